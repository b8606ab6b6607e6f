//! The workloads of the non-GEMM ops: elementwise, pooling, normalizations, reductions and
//! data movement.

use crate::act::Activation;
use crate::elementwise::{self, Bin, BroadcastPlan};
use crate::io::{f32s, f32s_mut, input, output, Io};
use crate::reduce::{self, ReducePlan};
use crate::simd;
use crate::threads::Threads;
use crate::window::{self, FromGeometry, Geo2, WindowKind};
use backplane_backend_api::patterns::batch_norm_affine;
use backplane_backend_api::{BackendError, Result, Workload};
use backplane_core::ops::{PoolDesc, PoolKind};
use backplane_core::shape::{broadcast_strides, normalize_axis, strides_of};
use backplane_core::{Tensor, TensorView, TensorViewMut};

/// A unary function.
pub struct UnaryWorkload {
    /// Buffers.
    pub io: Io,
    /// The function.
    pub act: Activation,
    /// Threads.
    pub threads: Threads,
}

impl Workload for UnaryWorkload {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        self.io.check(inputs, outputs)?;
        let x = f32s(input(inputs, 0)?)?;
        elementwise::unary(&self.threads, self.act, x, f32s_mut(output(outputs)?)?)
    }
}

/// A binary function with broadcasting.
pub struct BinaryWorkload {
    io: Io,
    op: Bin,
    plan: BroadcastPlan,
    threads: Threads,
}

impl BinaryWorkload {
    /// Plan it.
    pub fn new(io: Io, op: Bin, threads: Threads) -> Result<Self> {
        let dims = |v: Option<&backplane_core::TensorInfo>| {
            v.map(|i| i.shape.dims().to_vec())
                .ok_or_else(|| BackendError::Other(format!("{}: missing tensor", io.layer)))
        };
        let (a, b, y) = (
            dims(io.inputs.first())?,
            dims(io.inputs.get(1))?,
            dims(io.outputs.first())?,
        );
        let plan = BroadcastPlan::new(&a, &b, &y);
        Ok(BinaryWorkload {
            io,
            op,
            plan,
            threads,
        })
    }
}

impl Workload for BinaryWorkload {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        self.io.check(inputs, outputs)?;
        let a = f32s(input(inputs, 0)?)?;
        let b = f32s(input(inputs, 1)?)?;
        let y = f32s_mut(output(outputs)?)?;
        elementwise::binary(&self.threads, self.op, &self.plan, a, b, y)
    }
}

/// Why CpuAcc cannot pool this, if it cannot.
pub fn check_pool(desc: &PoolDesc, x: &[usize]) -> std::result::Result<Geo2, String> {
    if x.len() != 3 && x.len() != 4 {
        return Err("CpuAcc pools 1-D and 2-D inputs only".into());
    }
    let g = desc.geometry(x).map_err(|e| e.to_string())?;
    Geo2::from_geometry(&g, &x[2..]).ok_or_else(|| "unsupported geometry".into())
}

/// MaxPool / AveragePool.
pub struct PoolWorkload {
    io: Io,
    geo: Geo2,
    kind: PoolKind,
    inv_cy: Vec<f32>,
    inv_cx: Vec<f32>,
    /// Max pooling's channels-last plan (used with AVX-512 on NaN-free inputs).
    max_plan: Option<crate::depthwise::Plan>,
    /// An average pool as the depthwise convolution it is: its plan and the tap weights,
    /// 1/count when every window counts the same taps, else ones, with the sums then scaled
    /// per output pixel by `inv_cy[oy] · inv_cx[ox]` (the third field: TFLite's SAME pools,
    /// which leave the padding out of the count). The depthwise paths take many small planes
    /// (DenseNet's 2×2 pools, Inception's 3×3 ones on 4×4 planes) at vector speed, where the
    /// window path loops per row.
    uniform_average: Option<(crate::depthwise::Plan, Vec<f32>, Option<Vec<f32>>)>,
    /// A 2×2 stride-2 average pool of even planes, run by `conv::pool_pairs`.
    pair_average: bool,
    threads: Threads,
}

/// 1/count per output position along one axis: taps inside the input, or inside the padded
/// input with `include_pad`.
#[allow(clippy::too_many_arguments)]
fn inv_counts(
    out: usize,
    input: usize,
    k: usize,
    s: usize,
    d: usize,
    pb: usize,
    pe: usize,
    include_pad: bool,
) -> Vec<f32> {
    (0..out)
        .map(|o| {
            let count = (0..k)
                .filter(|&t| {
                    let p = o * s + t * d;
                    if include_pad {
                        p < pb + input + pe
                    } else {
                        p >= pb && p < pb + input
                    }
                })
                .count();
            1.0 / count.max(1) as f32
        })
        .collect()
}

impl PoolWorkload {
    /// Build it from the geometry [`check_pool`] planned.
    pub fn new(io: Io, desc: &PoolDesc, geo: Geo2, threads: Threads) -> Result<Self> {
        let x = io.input_dims()?;
        let g = desc.geometry(&x)?;
        let (pe_h, pe_w) = if x.len() == 4 {
            (g.pads_end[0], g.pads_end[1])
        } else {
            (0, g.pads_end[0])
        };
        let inc = desc.count_include_pad;
        let inv_cy = inv_counts(geo.oh, geo.h, geo.kh, geo.sh, geo.dh, geo.pt, pe_h, inc);
        let inv_cx = inv_counts(geo.ow, geo.w, geo.kw, geo.sw, geo.dw, geo.pl, pe_w, inc);
        let uniform = |inv: &[f32]| inv.windows(2).all(|p| p[0] == p[1]);
        let pair_average =
            matches!(desc.kind, PoolKind::Average) && crate::conv::pool_pairs::applies(&geo);
        // Pair averages never take the depthwise plan: none is built for them.
        let uniform_average =
            (matches!(desc.kind, PoolKind::Average) && !pair_average && geo.dh == 1 && geo.dw == 1)
                .then(|| {
                    let plan = crate::depthwise::Plan::new(&geo);
                    let taps = geo.kh * geo.kw;
                    if uniform(&inv_cy) && uniform(&inv_cx) {
                        let inv = inv_cy.first().copied().unwrap_or(1.0)
                            * inv_cx.first().copied().unwrap_or(1.0);
                        return Ok::<_, BackendError>((plan, vec![inv; taps], None));
                    }
                    let mut scale = Vec::new();
                    scale
                        .try_reserve_exact(geo.oh * geo.ow)
                        .map_err(|_| io.error("no memory for the pool's counts".into()))?;
                    for &fy in &inv_cy {
                        scale.extend(inv_cx.iter().map(|&fx| fy * fx));
                    }
                    Ok((plan, vec![1.0; taps], Some(scale)))
                })
                .transpose()?;
        Ok(PoolWorkload {
            io,
            geo,
            kind: desc.kind,
            uniform_average,
            inv_cy,
            inv_cx,
            max_plan: matches!(desc.kind, PoolKind::Max).then(|| crate::depthwise::Plan::new(&geo)),
            pair_average,
            threads,
        })
    }
}

impl Workload for PoolWorkload {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        self.io.check(inputs, outputs)?;
        let x = f32s(input(inputs, 0)?)?;
        let y = f32s_mut(output(outputs)?)?;
        if self.pair_average {
            return crate::conv::pool_pairs::run_average(&self.threads, &self.geo, x, y);
        }
        if let Some((plan, taps, scale)) = &self.uniform_average {
            let act = crate::act::Activation::None;
            crate::depthwise::run(&self.threads, plan, 1, x, taps, None, act, y)?;
            let Some(scale) = scale else {
                return Ok(());
            };
            // The sums divided by their windows' counts, as the window path does.
            let plane = scale.len().max(1);
            let per = self
                .threads
                .chunk_size(y.len() / plane, (16384 / plane).max(1), 1)
                * plane;
            return self.threads.chunks(y, per, |_, block| {
                for out in block.chunks_exact_mut(plane) {
                    for (o, &f) in out.iter_mut().zip(scale) {
                        *o *= f;
                    }
                }
                Ok(())
            });
        }
        if let Some(plan) = &self.max_plan {
            if crate::depthwise::run_max(&self.threads, plan, x, y)? {
                return Ok(());
            }
        }
        let (pad, kind) = match self.kind {
            PoolKind::Max => (f32::NEG_INFINITY, WindowKind::Max),
            PoolKind::Average => (
                0.0,
                WindowKind::Average {
                    inv_cy: &self.inv_cy,
                    inv_cx: &self.inv_cx,
                },
            ),
        };
        window::run_planes(&self.threads, &self.geo, x, y, pad, |_| kind)
    }
}

/// GlobalAveragePool / GlobalMaxPool.
pub struct GlobalPoolWorkload {
    /// Buffers.
    pub io: Io,
    /// Max or average.
    pub kind: PoolKind,
    /// Threads.
    pub threads: Threads,
}

impl Workload for GlobalPoolWorkload {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        self.io.check(inputs, outputs)?;
        let x = f32s(input(inputs, 0)?)?;
        let y = f32s_mut(output(outputs)?)?;
        if y.is_empty() {
            return Ok(());
        }
        let plane = x.len() / y.len();
        let kind = self.kind;
        let per = self
            .threads
            .chunk_size(y.len(), (16384 / plane.max(1)).max(1), 1);
        self.threads.chunks(y, per, |ci, yc| {
            for (i, o) in yc.iter_mut().enumerate() {
                let p = ci * per + i;
                let run = &x[p * plane..(p + 1) * plane];
                *o = match kind {
                    PoolKind::Average => {
                        (simd::reduce_run(reduce::RunKind::Sum, run) / plane as f64) as f32
                    }
                    PoolKind::Max => simd::reduce_run(reduce::RunKind::Max, run) as f32,
                };
            }
            Ok(())
        })
    }
}

/// Softmax or LogSoftmax along one axis.
pub struct SoftmaxWorkload {
    io: Io,
    outer: usize,
    len: usize,
    inner: usize,
    /// LogSoftmax instead.
    log: bool,
    threads: Threads,
}

impl SoftmaxWorkload {
    /// Plan it.
    pub fn new(io: Io, axis: i64, threads: Threads) -> Result<Self> {
        let dims = io.input_dims()?;
        let a = normalize_axis(axis, dims.len())?;
        let p = |d: &[usize]| d.iter().product::<usize>();
        Ok(SoftmaxWorkload {
            outer: p(&dims[..a]),
            len: dims[a],
            inner: p(&dims[a + 1..]),
            log: false,
            io,
            threads,
        })
    }

    /// Compute LogSoftmax (`ln(softmax(x))`, without the rounding of `ln` of a tiny
    /// probability) instead.
    pub fn log(mut self) -> Self {
        self.log = true;
        self
    }

    /// The row function: softmax or its logarithm.
    fn row(&self) -> fn(&[f32], &mut [f32]) {
        if self.log {
            simd::log_softmax_row
        } else {
            simd::softmax_row
        }
    }
}

impl Workload for SoftmaxWorkload {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        self.io.check(inputs, outputs)?;
        let x = f32s(input(inputs, 0)?)?;
        let y = f32s_mut(output(outputs)?)?;
        let (len, inner) = (self.len, self.inner);
        if len == 0 || y.is_empty() {
            return Ok(());
        }
        let row = self.row();
        if inner == 1 {
            let per = self.threads.chunk_size(self.outer, (8192 / len).max(1), 1);
            return self.threads.chunks(y, per * len, |ci, yc| {
                for (r, out) in yc.chunks_exact_mut(len).enumerate() {
                    let s = (ci * per + r) * len;
                    row(&x[s..s + len], out);
                }
                Ok(())
            });
        }
        // A strided axis: gather each column, softmax it, scatter it back.
        self.threads.chunks(y, len * inner, |o, yc| {
            let (mut col, mut res) = (vec![0f32; len], vec![0f32; len]);
            let base = o * len * inner;
            for i in 0..inner {
                for (j, v) in col.iter_mut().enumerate() {
                    *v = x[base + j * inner + i];
                }
                row(&col, &mut res);
                for (j, &v) in res.iter().enumerate() {
                    yc[j * inner + i] = v;
                }
            }
            Ok(())
        })
    }
}

/// Expand a parameter of shape `from` to the block shape `to` (row-major).
fn expand(values: &[f32], from: &[usize], to: &[usize]) -> Vec<f32> {
    let st = broadcast_strides(from, to);
    let total: usize = to.iter().product();
    let tstr = strides_of(to);
    (0..total)
        .map(|i| {
            let mut off = 0;
            for ((&d, &s), &t) in to.iter().zip(&st).zip(&tstr) {
                off += (i / t) % d.max(1) * s;
            }
            values[off]
        })
        .collect()
}

/// InstanceNormalization: each channel's plane of each image normalized by its own mean and
/// variance, then scaled and shifted per channel.
pub struct InstanceNormWorkload {
    io: Io,
    epsilon: f32,
    /// Channels, and elements per plane.
    channels: usize,
    plane: usize,
    /// Scale and bias when constant at load time (else read from inputs 1 and 2).
    scale: Option<Vec<f32>>,
    bias: Option<Vec<f32>>,
    threads: Threads,
}

impl InstanceNormWorkload {
    /// Plan it for X `[N, C, ...]`, scale and bias `[C]`.
    pub fn new(
        io: Io,
        epsilon: f32,
        scale: Option<&Tensor>,
        bias: Option<&Tensor>,
        threads: Threads,
    ) -> Result<Self> {
        let dims = io.input_dims()?;
        let (channels, plane) = match dims.as_slice() {
            [_, c, rest @ ..] => (*c, rest.iter().product()),
            _ => {
                return Err(BackendError::Other(format!(
                    "{}: InstanceNormalization needs rank >= 2",
                    io.layer
                )))
            }
        };
        let constant = |t: Option<&Tensor>| -> Result<Option<Vec<f32>>> {
            t.map(|t| Ok(t.as_slice::<f32>()?.to_vec())).transpose()
        };
        Ok(InstanceNormWorkload {
            scale: constant(scale)?,
            bias: constant(bias)?,
            io,
            epsilon,
            channels,
            plane,
            threads,
        })
    }
}

impl Workload for InstanceNormWorkload {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        self.io.check(inputs, outputs)?;
        let x = f32s(input(inputs, 0)?)?;
        let scale = match &self.scale {
            Some(s) => s.as_slice(),
            None => f32s(input(inputs, 1)?)?,
        };
        let bias = match &self.bias {
            Some(b) => b.as_slice(),
            None => f32s(input(inputs, 2)?)?,
        };
        let (c, plane) = (self.channels, self.plane);
        if scale.len() != c || bias.len() != c {
            return Err(self
                .io
                .error(format!("scale and bias must hold {c} values")));
        }
        let y = f32s_mut(output(outputs)?)?;
        if plane == 0 || y.is_empty() {
            return Ok(());
        }
        let planes = y.len() / plane;
        let per = self.threads.chunk_size(planes, (16384 / plane).max(1), 1);
        let eps = self.epsilon;
        self.threads.chunks(y, per * plane, |ci, yc| {
            for (j, out) in yc.chunks_exact_mut(plane).enumerate() {
                let p = ci * per + j;
                let ch = p % c;
                let s = p * plane;
                simd::instance_norm_plane(&x[s..s + plane], scale[ch], bias[ch], eps, out);
            }
            Ok(())
        })
    }
}

/// LayerNormalization over the trailing axes.
pub struct LayerNormWorkload {
    io: Io,
    /// Input 1 is added to input 0 before normalizing (a residual connection), and scale
    /// and bias are inputs 2 and 3.
    sum: bool,
    epsilon: f32,
    block_dims: Vec<usize>,
    scale: Option<Vec<f32>>,
    bias: Option<Vec<f32>>,
    threads: Threads,
}

impl LayerNormWorkload {
    /// Plan it, expanding constant scale and bias to the block.
    pub fn new(
        io: Io,
        axis: i64,
        epsilon: f32,
        scale: Option<&Tensor>,
        bias: Option<&Tensor>,
        threads: Threads,
    ) -> Result<Self> {
        let dims = io.input_dims()?;
        let a = normalize_axis(axis, dims.len())?;
        let block_dims = dims[a..].to_vec();
        let exp = |t: Option<&Tensor>| -> Result<Option<Vec<f32>>> {
            t.map(|t| Ok(expand(t.as_slice::<f32>()?, t.shape().dims(), &block_dims)))
                .transpose()
        };
        Ok(LayerNormWorkload {
            scale: exp(scale)?,
            bias: exp(bias)?,
            sum: false,
            io,
            epsilon,
            block_dims,
            threads,
        })
    }

    /// Normalize the sum of inputs 0 and 1 (of one shape) instead: `scale`/`bias` are then
    /// inputs 2 and 3. The sum is never stored.
    pub fn of_sum(mut self) -> Result<Self> {
        match self.io.inputs.as_slice() {
            [a, b, ..] if a.same_layout(b) => {
                self.sum = true;
                Ok(self)
            }
            _ => Err(BackendError::Other(format!(
                "{}: the two summands must have one shape",
                self.io.layer
            ))),
        }
    }
}

impl Workload for LayerNormWorkload {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        self.io.check(inputs, outputs)?;
        let x = f32s(input(inputs, 0)?)?;
        let (addend, params) = if self.sum {
            (Some(f32s(input(inputs, 1)?)?), 2)
        } else {
            (None, 1)
        };
        let block: usize = self.block_dims.iter().product();
        let scale_rt;
        let scale: &[f32] = match &self.scale {
            Some(s) => s,
            None => {
                let v = input(inputs, params)?;
                scale_rt = expand(f32s(v)?, v.dims(), &self.block_dims);
                &scale_rt
            }
        };
        let bias_rt;
        let bias: Option<&[f32]> = match (&self.bias, inputs.get(params + 1)) {
            (Some(b), _) => Some(b),
            (None, Some(v)) => {
                bias_rt = expand(f32s(v)?, v.dims(), &self.block_dims);
                Some(&bias_rt)
            }
            (None, None) => None,
        };
        let y = f32s_mut(output(outputs)?)?;
        if block == 0 || y.is_empty() {
            return Ok(());
        }
        let rows = y.len() / block;
        let per = self.threads.chunk_size(rows, (8192 / block).max(1), 1);
        let eps = self.epsilon;
        self.threads.chunks(y, per * block, |ci, yc| {
            let mut sum = vec![0f32; if addend.is_some() { block } else { 0 }];
            for (r, out) in yc.chunks_exact_mut(block).enumerate() {
                let s = (ci * per + r) * block;
                let row = &x[s..s + block];
                match addend {
                    Some(b) => {
                        simd::binary_vv(Bin::Add, row, &b[s..s + block], &mut sum);
                        simd::layer_norm_row(&sum, scale, bias, eps, out);
                    }
                    None => simd::layer_norm_row(row, scale, bias, eps, out),
                }
            }
            Ok(())
        })
    }
}

/// Inference BatchNormalization as a per-channel affine map.
pub struct BatchNormWorkload {
    io: Io,
    epsilon: f32,
    affine: Option<(Vec<f32>, Vec<f32>)>,
    /// Applied to each block of the output as it is written (a `FusedBatchNorm`).
    act: Activation,
    threads: Threads,
}

impl BatchNormWorkload {
    /// Precompute the affine map when the parameters are constants.
    pub fn new(
        io: Io,
        epsilon: f32,
        params: [Option<&Tensor>; 4],
        threads: Threads,
    ) -> Result<Self> {
        let affine = match params {
            [Some(s), Some(b), Some(m), Some(v)] => Some(batch_norm_affine(
                s.as_slice()?,
                b.as_slice()?,
                m.as_slice()?,
                v.as_slice()?,
                epsilon,
            )),
            _ => None,
        };
        Ok(BatchNormWorkload {
            io,
            epsilon,
            affine,
            act: Activation::None,
            threads,
        })
    }

    /// The same, with `act` applied to its output (a `FusedBatchNorm`).
    pub fn with_act(mut self, act: Activation) -> Self {
        self.act = act;
        self
    }
}

impl Workload for BatchNormWorkload {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        self.io.check(inputs, outputs)?;
        let x = f32s(input(inputs, 0)?)?;
        let rt;
        let (mul, add) = match &self.affine {
            Some((m, a)) => (m.as_slice(), a.as_slice()),
            None => {
                let p = |i| -> Result<&[f32]> { f32s(input(inputs, i)?) };
                rt = batch_norm_affine(p(1)?, p(2)?, p(3)?, p(4)?, self.epsilon);
                (rt.0.as_slice(), rt.1.as_slice())
            }
        };
        let dims = x.len();
        let y = f32s_mut(output(outputs)?)?;
        let shape = self
            .io
            .inputs
            .first()
            .map(|i| i.shape.dims().to_vec())
            .unwrap_or_default();
        let plane: usize = shape.iter().skip(2).product();
        if dims == 0 || plane == 0 {
            return Ok(());
        }
        batch_norm_planes(&self.threads, x, (mul, add), self.act, plane, y)
    }
}

/// `y = act(x · mul[c] + add[c])` over NCHW planes of `plane` values, `c` the plane's channel
/// (`mul` and `add` one value a channel), split between the threads: a BatchNormalization
/// and its activation (`BatchNormWorkload`, and a convolution's folded input normalization
/// where its algorithm does not apply it while packing, `crate::conv::nchw`).
pub(crate) fn batch_norm_planes(
    threads: &Threads,
    x: &[f32],
    (mul, add): (&[f32], &[f32]),
    act: Activation,
    plane: usize,
    y: &mut [f32],
) -> Result<()> {
    let c = mul.len().min(add.len());
    if plane == 0 || c == 0 || x.len() < y.len() {
        return Ok(());
    }
    // Blocks of whole planes, about 16K values each at least (one plane per step item
    // was 49 values on DenseNet's 7×7 planes: more hand-offs than arithmetic).
    let planes = y.len() / plane;
    let per = threads.chunk_size(planes, (16384 / plane).max(1), 1);
    threads.chunks(y, per * plane, |ci, block| {
        for (j, out) in block.chunks_exact_mut(plane).enumerate() {
            let p = ci * per + j;
            let ch = p % c;
            let (k, a) = (mul[ch], add[ch]);
            for (o, &v) in out.iter_mut().zip(&x[p * plane..(p + 1) * plane]) {
                *o = v * k + a;
            }
        }
        if act != Activation::None {
            // The block is still in cache: one more pass over it, not over the tensor.
            simd::unary_in_place(act, block);
        }
        Ok(())
    })
}

/// A reduction.
pub struct ReduceWorkload {
    io: Io,
    plan: ReducePlan,
    threads: Threads,
}

impl ReduceWorkload {
    /// Build it from its plan.
    pub fn new(io: Io, plan: ReducePlan, threads: Threads) -> Self {
        ReduceWorkload { io, plan, threads }
    }
}

impl Workload for ReduceWorkload {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        self.io.check(inputs, outputs)?;
        let x = f32s(input(inputs, 0)?)?;
        reduce::reduce(&self.threads, &self.plan, x, f32s_mut(output(outputs)?)?)
    }
}
