//! Planning of CpuAcc's fused layers: the custom operators its `optimize_subgraph`
//! substitutes (see [`crate::fusion`]), checked and built from their typed payload ([`Fused`]).

use super::{refused, Plan};
use crate::conv::stem_pool::ConvMaxPoolWorkload;
use crate::conv::ConvWorkload;
use crate::fusion::{self, ConvLayout, Fused};
use crate::io::Io;
use crate::matmul::{GemmWorkload, MatMulWorkload};
use crate::nhwc::{NhwcConvWorkload, NhwcPairWorkload};
use crate::ops::{BatchNormWorkload, LayerNormWorkload};
use crate::threads::Threads;
use backplane_backend_api::{BackendError, LayerDesc, Result, Workload};
use backplane_core::ops::CustomOp;
use backplane_core::TensorInfo;

/// How CpuAcc runs the fused layer `layer` (whose op is `c`), or why it cannot.
pub(super) fn plan<'a>(
    c: &'a CustomOp,
    layer: &'a LayerDesc,
) -> std::result::Result<Plan<'a>, String> {
    let fused = fusion::check_custom(c, layer)?;
    Ok(Plan::new(move |io, th| build(fused, layer, io, th)))
}

fn bad(layer: &LayerDesc, reason: String) -> BackendError {
    refused(layer, reason)
}

/// The workload of a fused layer [`plan`] accepted.
fn build(fused: Fused, layer: &LayerDesc, io: Io, th: Threads) -> Result<Box<dyn Workload>> {
    let k = |slot: usize| layer.constant(slot);
    // A constant as shared, for the operands packed once across plans (`crate::weights`).
    let shared = |slot: usize| layer.constants.get(slot).and_then(Option::as_ref);
    Ok(match fused {
        Fused::ConvPair { first, second, mid } => {
            let (x, w1, b1, w2, b2, r) = match io.inputs.as_slice() {
                [x, w1, b1, w2, b2] => (x, w1, b1, w2, b2, None),
                [x, w1, b1, w2, b2, r] => (x, w1, b1, w2, b2, Some(r)),
                _ => {
                    let why = "a convolution pair takes five or six inputs";
                    return Err(bad(layer, why.into()));
                }
            };
            let part = |inputs: Vec<TensorInfo>, y: TensorInfo| Io {
                layer: io.layer.clone(),
                inputs,
                outputs: vec![y],
            };
            let io1 = part(vec![x.clone(), w1.clone(), b1.clone()], mid.clone());
            let mut in2 = vec![mid, w2.clone(), b2.clone()];
            in2.extend(r.cloned());
            let io2 = part(in2, io.outputs[0].clone());
            let (d1, a1) = (&first.desc, first.act);
            let (d2, a2) = (&second.desc, second.act);
            let one = NhwcConvWorkload::new(io1, d1, shared(1), shared(2), a1, false, th.clone())?;
            let mut two = NhwcConvWorkload::new(io2, d2, shared(3), shared(4), a2, false, th)?;
            if second.residual {
                two = two.with_residual()?;
            }
            Box::new(NhwcPairWorkload::new(io, one, two)?)
        }
        Fused::Conv(spec) => {
            let (desc, act) = (&spec.desc, spec.act);
            if spec.layout != ConvLayout::Nchw {
                let nchw_in = spec.layout == ConvLayout::NchwToNhwc;
                let conv = NhwcConvWorkload::new(io, desc, shared(1), shared(2), act, nchw_in, th)?;
                return Ok(if spec.residual {
                    Box::new(conv.with_residual()?)
                } else {
                    Box::new(conv)
                });
            }
            let mut conv = ConvWorkload::new(io, desc, shared(1), shared(2), act, th)?;
            if let Some(pre) = spec.pre {
                conv = conv.with_pre(pre)?;
            }
            if spec.residual {
                Box::new(conv.with_residual()?)
            } else {
                Box::new(conv)
            }
        }
        Fused::ConvMaxPool { conv, pool } => Box::new(ConvMaxPoolWorkload::new(
            io,
            &conv.desc,
            &pool,
            shared(1),
            shared(2),
            conv.act,
            th,
        )?),
        Fused::MatMul { views, act } => {
            let bias = match layer.inputs.len() {
                3 => Some(
                    k(2).ok_or_else(|| bad(layer, "bias must be constant".into()))?
                        .as_slice::<f32>()?
                        .to_vec(),
                ),
                _ => None,
            };
            let mut io = io;
            io.inputs.truncate(2);
            Box::new(FusedMatMul {
                inner: MatMulWorkload::new(io, shared(1), bias, act, views, th)?,
            })
        }
        Fused::AddLayerNorm { axis, epsilon } => {
            Box::new(LayerNormWorkload::new(io, axis, epsilon, k(2), k(3), th)?.of_sum()?)
        }
        Fused::Gemm { desc, act } => {
            Box::new(GemmWorkload::new(io, desc, shared(1), k(2), act, th)?)
        }
        Fused::BatchNorm { epsilon, act } => Box::new(
            BatchNormWorkload::new(io, epsilon, [k(1), k(2), k(3), k(4)], th)?.with_act(act),
        ),
    })
}

/// A MatMul whose third input (the bias) was taken at load time.
struct FusedMatMul {
    inner: MatMulWorkload,
}

impl Workload for FusedMatMul {
    fn execute(
        &self,
        inputs: &[backplane_core::TensorView<'_>],
        outputs: &mut [backplane_core::TensorViewMut<'_>],
    ) -> Result<()> {
        self.inner.execute(&inputs[..inputs.len().min(2)], outputs)
    }

    /// The bias was copied at load; A and B as the inner product reads them (a packed B is
    /// not read), so the runtime can release the weights once they are packed.
    fn reads_constant_input(&self, slot: usize) -> bool {
        slot < 2 && self.inner.reads_constant_input(slot)
    }
}
