//! Planning of CpuAcc's fused layers: the custom operators its `optimize_subgraph`
//! substitutes (see [`crate::fusion`]), checked and built from their encoded attributes.

use super::{refused, Plan};
use crate::conv::ConvWorkload;
use crate::fusion;
use crate::io::Io;
use crate::matmul::{GemmWorkload, MatMulWorkload};
use crate::nhwc::{NhwcConvWorkload, NhwcPairWorkload};
use crate::ops::LayerNormWorkload;
use crate::threads::Threads;
use backplane_backend_api::{BackendError, LayerDesc, Result, Workload};
use backplane_core::ops::CustomOp;
use backplane_core::TensorInfo;

/// How CpuAcc runs the fused layer `layer` (whose op is `c`), or why it cannot.
pub(super) fn plan<'a>(
    c: &'a CustomOp,
    layer: &'a LayerDesc,
) -> std::result::Result<Plan<'a>, String> {
    fusion::check_custom(c, layer)?;
    Ok(Plan::new(move |io, th| build(c, layer, io, th)))
}

fn bad(layer: &LayerDesc, reason: String) -> BackendError {
    refused(layer, reason)
}

/// The workload of a fused layer [`plan`] accepted.
fn build(c: &CustomOp, layer: &LayerDesc, io: Io, th: Threads) -> Result<Box<dyn Workload>> {
    let k = |slot: usize| layer.constant(slot);
    // A constant as shared, for the operands packed once across plans (`crate::weights`).
    let shared = |slot: usize| layer.constants.get(slot).and_then(Option::as_ref);
    let act = fusion::decode_act(c).map_err(|r| bad(layer, r))?;
    Ok(match c.op_type.as_str() {
        fusion::FUSED_CONV_PAIR => {
            let (first, second, mid) = fusion::split_pair(c).map_err(|r| bad(layer, r))?;
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
            let desc = |op: &CustomOp| fusion::decode_conv(op).map_err(|r| bad(layer, r));
            let act = |op: &CustomOp| fusion::decode_act(op).map_err(|r| bad(layer, r));
            let (d1, a1) = (desc(&first)?, act(&first)?);
            let (d2, a2) = (desc(&second)?, act(&second)?);
            let one = NhwcConvWorkload::new(io1, &d1, k(1), k(2), a1, false, th.clone())?;
            let mut two = NhwcConvWorkload::new(io2, &d2, k(3), k(4), a2, false, th)?;
            if fusion::has_residual(&second) {
                two = two.with_residual()?;
            }
            Box::new(NhwcPairWorkload::new(io, one, two)?)
        }
        fusion::FUSED_CONV => {
            let desc = fusion::decode_conv(c).map_err(|r| bad(layer, r))?;
            let layout = fusion::decode_layout(c).map_err(|r| bad(layer, r))?;
            if layout != fusion::ConvLayout::Nchw {
                let nchw_in = layout == fusion::ConvLayout::NchwToNhwc;
                let conv = NhwcConvWorkload::new(io, &desc, k(1), k(2), act, nchw_in, th)?;
                return Ok(if fusion::has_residual(c) {
                    Box::new(conv.with_residual()?)
                } else {
                    Box::new(conv)
                });
            }
            let conv = ConvWorkload::new(io, &desc, k(1), k(2), act, th)?;
            if fusion::has_residual(c) {
                Box::new(conv.with_residual()?)
            } else {
                Box::new(conv)
            }
        }
        fusion::FUSED_MATMUL => {
            let bias = match layer.inputs.len() {
                3 => Some(
                    k(2).ok_or_else(|| bad(layer, "bias must be constant".into()))?
                        .as_slice::<f32>()?
                        .to_vec(),
                ),
                _ => None,
            };
            let views = fusion::decode_matmul_views(c).map_err(|r| bad(layer, r))?;
            let mut io = io;
            io.inputs.truncate(2);
            Box::new(FusedMatMul {
                inner: MatMulWorkload::new(io, shared(1), bias, act, views, th)?,
            })
        }
        fusion::FUSED_ADD_LAYER_NORM => {
            let (axis, epsilon) = fusion::decode_layer_norm(c).map_err(|r| bad(layer, r))?;
            Box::new(LayerNormWorkload::new(io, axis, epsilon, k(2), k(3), th)?.of_sum()?)
        }
        fusion::FUSED_GEMM => {
            let desc = fusion::decode_gemm(c).map_err(|r| bad(layer, r))?;
            Box::new(GemmWorkload::new(io, desc, shared(1), k(2), act, th)?)
        }
        other => return Err(bad(layer, format!("unknown custom op {other}"))),
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
}
