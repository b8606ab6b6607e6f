//! The workload factory: turns a supported layer into its fast workload, doing the load-time
//! work (weight packing, constant folding of parameters) here.

use crate::act::{Activation, FromOp};
use crate::conv::ConvWorkload;
use crate::elementwise::Bin;
use crate::fusion;
use crate::io::Io;
use crate::matmul::{GemmWorkload, MatMulViews, MatMulWorkload};
use crate::nhwc::{NhwcConvWorkload, NhwcPairWorkload};
use crate::ops::*;
use crate::support;
use crate::threads::Threads;
use backplane_backend_api::{
    BackendError, LayerDesc, MemoryManager, Result, Workload, WorkloadFactory,
};
use backplane_core::ops::{CustomOp, PoolKind};
use backplane_core::{Op, TensorInfo};
use std::sync::Arc;

/// Creates CpuAcc workloads for one loaded network.
pub struct CpuAccWorkloadFactory {
    threads: Threads,
    _memory_manager: Option<Arc<dyn MemoryManager>>,
}

impl CpuAccWorkloadFactory {
    /// A factory whose workloads use `threads`.
    pub fn new(threads: Threads, memory_manager: Option<Arc<dyn MemoryManager>>) -> Self {
        CpuAccWorkloadFactory {
            threads,
            _memory_manager: memory_manager,
        }
    }

    /// The number of threads its workloads use.
    pub fn threads(&self) -> usize {
        self.threads.count()
    }
}

fn bad(layer: &LayerDesc, reason: String) -> BackendError {
    BackendError::Unsupported {
        layer: layer.name.clone(),
        op: layer.op.name().to_string(),
        reason,
    }
}

impl WorkloadFactory for CpuAccWorkloadFactory {
    fn create_workload(&self, layer: &LayerDesc) -> Result<Box<dyn Workload>> {
        support::check(layer).map_err(|r| bad(layer, r))?;
        let io = Io {
            layer: layer.name.clone(),
            inputs: layer.inputs.clone(),
            outputs: layer.outputs.clone(),
        };
        let th = self.threads.clone();
        let k = |slot: usize| layer.constant(slot);
        Ok(match &layer.op {
            Op::Identity
            | Op::Reshape { .. }
            | Op::Flatten { .. }
            | Op::Squeeze { .. }
            | Op::Unsqueeze { .. } => Box::new(CopyWorkload { io }),
            Op::Transpose { perm } => Box::new(TransposeWorkload::new(io, perm, th)?),
            Op::Concat { axis } => Box::new(ConcatWorkload::new(io, *axis)?),
            Op::Slice(_)
            | Op::Gather { .. }
            | Op::Where
            | Op::Expand { .. }
            | Op::Tile { .. }
            | Op::Pad(_)
            | Op::Split { .. } => crate::movement::workload(layer, io, th)?,
            Op::Cast { .. } => Box::new(crate::cast::CastWorkload::new(io, th)),
            Op::Unary(u) => Box::new(UnaryWorkload {
                io,
                act: Activation::from_unary(*u),
                threads: th,
            }),
            Op::Math(m) => Box::new(UnaryWorkload {
                io,
                act: Activation::from_math(*m)
                    .ok_or_else(|| bad(layer, format!("CpuAcc does not implement {}", m.name())))?,
                threads: th,
            }),
            Op::Binary(b) => Box::new(BinaryWorkload::new(io, Bin::from_op(*b), th)?),
            Op::BinaryExt(b) => {
                let op = Bin::from_ext(*b)
                    .ok_or_else(|| bad(layer, format!("CpuAcc does not implement {}", b.name())))?;
                Box::new(BinaryWorkload::new(io, op, th)?)
            }
            Op::Conv(desc) => Box::new(ConvWorkload::new(
                io,
                desc,
                k(1),
                k(2),
                Activation::None,
                th,
            )?),
            Op::ConvTranspose(desc) => Box::new(crate::conv_transpose::ConvTransposeWorkload::new(
                io,
                desc,
                k(1),
                k(2),
                th,
            )?),
            Op::Resize(desc) => Box::new(crate::resize::ResizeWorkload::new(io, desc, th)?),
            Op::MatMul => Box::new(MatMulWorkload::new(
                io,
                k(1),
                None,
                Activation::None,
                MatMulViews::default(),
                th,
            )?),
            Op::Gemm(desc) => Box::new(GemmWorkload::new(
                io,
                *desc,
                k(1),
                k(2),
                Activation::None,
                th,
            )?),
            Op::Pool(desc) => Box::new(PoolWorkload::new(io, desc, th)?),
            Op::GlobalPool(kind) => Box::new(GlobalPoolWorkload {
                io,
                kind: match kind {
                    PoolKind::Max => PoolKind::Max,
                    PoolKind::Average => PoolKind::Average,
                },
                threads: th,
            }),
            Op::Softmax { axis } => Box::new(SoftmaxWorkload::new(io, *axis, th)?),
            Op::ArgReduce(desc) => {
                Box::new(crate::arg_reduce::ArgReduceWorkload::new(io, desc, th)?)
            }
            Op::LogSoftmax { axis } => Box::new(SoftmaxWorkload::new(io, *axis, th)?.log()),
            Op::InstanceNormalization { epsilon } => {
                Box::new(InstanceNormWorkload::new(io, *epsilon, k(1), k(2), th)?)
            }
            Op::LayerNormalization { axis, epsilon } => {
                Box::new(LayerNormWorkload::new(io, *axis, *epsilon, k(1), k(2), th)?)
            }
            Op::BatchNormalization { epsilon } => Box::new(BatchNormWorkload::new(
                io,
                *epsilon,
                [k(1), k(2), k(3), k(4)],
                th,
            )?),
            Op::Reduce(desc) => Box::new(ReduceWorkload::new(io, desc, th)?),
            Op::Rnn(desc) => Box::new(crate::recurrent::RecurrentWorkload::new(io, desc, k, th)?),
            Op::Custom(c) => {
                let act = fusion::decode_act(c).map_err(|r| bad(layer, r))?;
                match c.op_type.as_str() {
                    fusion::FUSED_CONV_PAIR => {
                        let (first, second, mid) =
                            fusion::split_pair(c).map_err(|r| bad(layer, r))?;
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
                        let desc =
                            |op: &CustomOp| fusion::decode_conv(op).map_err(|r| bad(layer, r));
                        let act = |op: &CustomOp| fusion::decode_act(op).map_err(|r| bad(layer, r));
                        let (d1, a1) = (desc(&first)?, act(&first)?);
                        let (d2, a2) = (desc(&second)?, act(&second)?);
                        let one =
                            NhwcConvWorkload::new(io1, &d1, k(1), k(2), a1, false, th.clone())?;
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
                            let conv =
                                NhwcConvWorkload::new(io, &desc, k(1), k(2), act, nchw_in, th)?;
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
                            inner: MatMulWorkload::new(io, k(1), bias, act, views, th)?,
                        })
                    }
                    fusion::FUSED_ADD_LAYER_NORM => {
                        let (axis, epsilon) =
                            fusion::decode_layer_norm(c).map_err(|r| bad(layer, r))?;
                        Box::new(
                            LayerNormWorkload::new(io, axis, epsilon, k(2), k(3), th)?.of_sum()?,
                        )
                    }
                    fusion::FUSED_GEMM => {
                        let desc = fusion::decode_gemm(c).map_err(|r| bad(layer, r))?;
                        Box::new(GemmWorkload::new(io, desc, k(1), k(2), act, th)?)
                    }
                    other => return Err(bad(layer, format!("unknown custom op {other}"))),
                }
            }
            other => return Err(bad(layer, format!("{} is not implemented", other.name()))),
        })
    }
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
