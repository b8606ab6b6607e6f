//! CpuAcc's kernels: the kernel crate's API (`backplane_cpu_kernels`, where every `unsafe`
//! block lives) re-exported under the paths the workloads use, and CpuAcc's own safe,
//! autovectorizable kernel bodies (elementwise, normalization, reductions, windows,
//! depthwise planes, the Winograd fallbacks) compiled for AVX-512, AVX2 and the baseline by
//! the kernel crate's `multiversion!`.

pub use backplane_cpu_kernels::channel_lanes;
pub use backplane_cpu_kernels::depthwise_rows;
pub use backplane_cpu_kernels::gemm::{
    microkernel, microkernel_fetching, microkernel_in_place, microkernel_rows,
    microkernel_rows_fetching, pack_segments, prefetch_l2, strided_tiles, strided_tiles_apply,
    tiles_offsets, tiles_strided, tiles_strided_pairs, tiles_strided_wide, wide_strided_tiles,
    Fetch, Halves, InPlaceRows, TileEpilogue, HALF, MR, NR, ROW_STEP, WIDE,
};
pub use backplane_cpu_kernels::gemv::gemv_panel;
pub use backplane_cpu_kernels::isa::{
    avx2_in_use, has_avx2_fma, has_avx512, int8_isa, isa, isa_in_use, Isa,
};
pub use backplane_cpu_kernels::pool_rows::{depthwise_row, max_row};
pub use backplane_cpu_kernels::transpose::{
    gather_lanes, gather_lanes_pitched, scatter_lanes, transpose_tile, BLOCK_LANES,
};

use crate::act::Activation;
use backplane_cpu_kernels::{elementwise, nhwc_depthwise, winograd as kw};

backplane_cpu_kernels::multiversion! {
    /// Apply a unary function elementwise (`y[i] = f(x[i])`).
    pub fn unary(act: Activation, x: &[f32], y: &mut [f32]) => crate::math::unary_body;
}
backplane_cpu_kernels::multiversion! {
    /// Apply a unary function in place (compiled per tier; see [`unary_in_place`]).
    fn unary_in_place_compiled(act: Activation, y: &mut [f32]) => crate::math::unary_in_place_body;
}

/// Apply a unary function in place. Relu, Clip and LeakyRelu take explicit vector code with
/// AVX2 (`backplane_cpu_kernels::elementwise`): compiled from plain loops, their select
/// becomes a masked store, slow on AMD CPUs.
pub fn unary_in_place(act: Activation, y: &mut [f32]) {
    if elementwise::act_in_place(act, y) {
        return;
    }
    unary_in_place_compiled(act, y)
}
backplane_cpu_kernels::multiversion! {
    /// `y[i] = op(a[i], b[i])` over equal-length slices.
    pub fn binary_vv(op: crate::elementwise::Bin, a: &[f32], b: &[f32], y: &mut [f32])
        => crate::elementwise::binary_vv_body;
}
backplane_cpu_kernels::multiversion! {
    /// `y[i] = op(a[i], s)`.
    pub fn binary_vs(op: crate::elementwise::Bin, a: &[f32], s: f32, y: &mut [f32])
        => crate::elementwise::binary_vs_body;
}
backplane_cpu_kernels::multiversion! {
    /// `y[i] = op(s, b[i])`.
    pub fn binary_sv(op: crate::elementwise::Bin, s: f32, b: &[f32], y: &mut [f32])
        => crate::elementwise::binary_sv_body;
}
backplane_cpu_kernels::multiversion! {
    /// Depthwise / pooling window over a prepared plane (see `crate::conv::window`).
    pub fn window_plane(job: &crate::conv::window::PlaneJob<'_>, out: &mut [f32])
        => crate::conv::window::plane_body;
}
backplane_cpu_kernels::multiversion! {
    /// One depthwise convolution plane (see `crate::conv::depthwise`).
    pub fn depthwise_plane(plan: &crate::conv::depthwise::Plan, x: &[f32], w: &[f32], bias: f32, act: Activation, out: &mut [f32], scratch: &mut [f32])
        => crate::conv::depthwise::plane_body;
}
backplane_cpu_kernels::multiversion! {
    /// A block of depthwise-convolution or max-pooling planes, channels-last (see
    /// `crate::conv::depthwise`).
    pub fn depthwise_block(plan: &crate::conv::depthwise::Plan, x: &[f32], n: usize, op: crate::conv::depthwise::BlockOp<'_>, out: &mut [f32], scratch: &mut [f32])
        => crate::conv::depthwise::block_body;
}
backplane_cpu_kernels::multiversion! {
    /// [`nhwc_depthwise_row`] compiled from plain Rust.
    fn nhwc_depthwise_row_compiled(job: &crate::conv::nhwc::DwRow<'_>, oy: usize, res: Option<&[f32]>, out: &mut [f32]) -> bool
        => crate::conv::nhwc::dw_row_body;
}

/// Output row `oy` of a channels-last depthwise convolution into `out` (see
/// `crate::conv::nhwc::dw_row_body`), with the whole of `job.act` applied: by explicit
/// AVX-512 or AVX2 code where it runs (the compiled loops kept their accumulators in
/// memory), the activation in registers where those kernels compute it
/// ([`Activation::in_registers`]), else on the stored row while it is in L1. False,
/// computing nothing, when a buffer is too short.
pub fn nhwc_depthwise_row(
    job: &crate::conv::nhwc::DwRow<'_>,
    oy: usize,
    res: Option<&[f32]>,
    out: &mut [f32],
) -> bool {
    if !nhwc_depthwise::row_fits(job, oy, res, out) {
        return false;
    }
    if job.act.in_registers() && nhwc_depthwise::row(job, oy, res, out) {
        return true;
    }
    let part = crate::conv::nhwc::DwRow {
        act: job.act.kernel_part(),
        ..*job
    };
    if !nhwc_depthwise::row(&part, oy, res, out)
        && !nhwc_depthwise_row_compiled(&part, oy, res, out)
    {
        return false;
    }
    if !job.act.in_kernel() {
        unary_in_place(job.act, &mut out[..job.geo.ow * job.c]);
    }
    true
}
backplane_cpu_kernels::multiversion! {
    /// Pad and phase-split one input plane for a window op (see `crate::conv::window`).
    pub fn window_prepare(geo: &crate::conv::window::Geo2, x: &[f32], pad: f32, dst: &mut [f32])
        => crate::conv::window::prepare_body;
}
backplane_cpu_kernels::multiversion! {
    /// One plane of a 2×2 stride-2 average pool (see `crate::conv::pool_pairs`).
    pub fn pair_average_plane(x: &[f32], ow: usize, y: &mut [f32], pairs: &mut [f32])
        => crate::conv::pool_pairs::pair_average_plane_body;
}
backplane_cpu_kernels::multiversion! {
    /// Softmax of one contiguous row.
    pub fn softmax_row(x: &[f32], y: &mut [f32]) => crate::norm::softmax_row_body;
}
backplane_cpu_kernels::multiversion! {
    /// LogSoftmax of one contiguous row.
    pub fn log_softmax_row(x: &[f32], y: &mut [f32]) => crate::norm::log_softmax_row_body;
}
backplane_cpu_kernels::multiversion! {
    /// Instance normalization of one channel's plane.
    pub fn instance_norm_plane(x: &[f32], scale: f32, bias: f32, epsilon: f32, y: &mut [f32])
        => crate::norm::instance_norm_plane_body;
}
backplane_cpu_kernels::multiversion! {
    /// Layer normalization of one row.
    pub fn layer_norm_row(x: &[f32], scale: &[f32], bias: Option<&[f32]>, epsilon: f32, y: &mut [f32])
        => crate::norm::layer_norm_row_body;
}
backplane_cpu_kernels::multiversion! {
    /// `y[i] = act(y[i] + r[i])`.
    pub fn add_act_in_place(act: Activation, y: &mut [f32], r: &[f32])
        => crate::math::add_act_in_place_body;
}
backplane_cpu_kernels::multiversion! {
    /// Whether `x` holds a NaN.
    pub fn any_nan(x: &[f32]) -> bool => crate::math::any_nan_body;
}
backplane_cpu_kernels::multiversion! {
    /// Sum and sum of squares... reductions over one contiguous run.
    pub fn reduce_run(kind: crate::reduce::RunKind, x: &[f32]) -> f64
        => crate::reduce::reduce_run_body;
}
backplane_cpu_kernels::multiversion! {
    /// `acc[i] = combine(acc[i], row[i])` in f64 over rows `stride` apart: strided sums
    /// over an outer axis.
    pub fn reduce_rows_f64(kind: crate::reduce::RunKind, acc: &mut [f64], x: &[f32], stride: usize)
        => crate::reduce::reduce_rows_f64_body;
}
backplane_cpu_kernels::multiversion! {
    /// `acc[i] = combine(acc[i], x[i])` for strided reductions over an outer axis.
    pub fn reduce_accumulate(kind: crate::reduce::RunKind, acc: &mut [f32], x: &[f32])
        => crate::reduce::reduce_accumulate_body;
}

backplane_cpu_kernels::multiversion! {
    /// Winograd input transform of one block of tiles by the safe body (see
    /// `crate::conv::winograd`): the fallback of [`winograd_input`].
    pub fn winograd_input_portable(tiles: &crate::conv::winograd::Tiles, c: usize, blk: &crate::conv::winograd::Block, x: &[f32], v: &mut [f32])
        => crate::conv::winograd::input_body;
}
backplane_cpu_kernels::multiversion! {
    /// Winograd output transform of one block of tiles, with bias and activation, by the
    /// safe body (see `crate::conv::winograd`): the fallback of [`winograd_output`].
    pub fn winograd_output_portable(geo: &crate::conv::window::Geo2, tiles: &crate::conv::winograd::Tiles, blk: &crate::conv::winograd::Block, ep: &crate::conv::winograd::OutEpilogue<'_>, channels: std::ops::Range<usize>, mo: &[f32], dest: &mut crate::conv::winograd::Dest<'_>)
        => crate::conv::winograd::output_body;
}

/// Zeros the Winograd input transform may read after the padded input (see
/// [`winograd_input`]).
pub const WINOGRAD_SLACK: usize = kw::WINDOW_SLACK;

/// Winograd input transform of one block of tiles (see `crate::conv::winograd`): AVX2+FMA
/// intrinsics (`backplane_cpu_kernels::winograd`) where they apply, the input channels
/// shared out between the threads of `th`, else the safe body (on this thread).
pub fn winograd_input(
    th: &crate::threads::Threads,
    tiles: &crate::conv::winograd::Tiles,
    c: usize,
    blk: &crate::conv::winograd::Block,
    x: &[f32],
    v: &mut [f32],
) {
    if !kw::input_threaded(th, tiles, c, blk, x, v) {
        winograd_input_portable(tiles, c, blk, x, v);
    }
}

/// Winograd output transform of one block of tiles, for the output channels `channels`
/// (`dest` starting at the first of them), with bias and activation (see
/// `crate::conv::winograd`): AVX2+FMA intrinsics (`backplane_cpu_kernels::winograd`) where
/// they apply, else the safe body.
pub fn winograd_output(
    geo: &crate::conv::window::Geo2,
    tiles: &crate::conv::winograd::Tiles,
    blk: &crate::conv::winograd::Block,
    ep: &crate::conv::winograd::OutEpilogue<'_>,
    channels: std::ops::Range<usize>,
    mo: &[f32],
    dest: &mut crate::conv::winograd::Dest<'_>,
) {
    if !kw::output_channels(geo, tiles, blk, ep, channels.clone(), mo, dest) {
        winograd_output_portable(geo, tiles, blk, ep, channels, mo, dest);
    }
}

#[cfg(test)]
mod tests;
