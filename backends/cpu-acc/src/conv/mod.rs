//! Convolutions: every algorithm CpuAcc runs them with, and [`choose_conv_algorithm`], the one
//! place that picks among them.
//!
//! * [`nchw`]: the NCHW convolution workload: a GEMM over the input's padded stride phases
//!   (pointwise ones a GEMM on the input), and the dispatch to the paths below.
//! * [`direct`]: GEMM tiles run on the phases with no packed B (first layers, projections).
//! * [`grouped`]: grouped 3×3 layers with groups of eight outputs, all groups in one pass.
//! * [`pixel_rows`]: pointwise layers on small planes as a GEMM with the pixels as rows
//!   (strided ones on their subsampled input).
//! * [`winograd`]: Winograd F(4×4, 3×3) for 3×3 stride-1 layers.
//! * [`tap_regions`]: dilated layers whose taps mostly read padding, one GEMM per tap over
//!   the output pixels where it reads the input.
//! * [`channel_lanes`]: the output channels in vector lanes (first layers, stride 2).
//! * [`stem_pool`]: a first layer and the max pooling after it as one layer.
//! * [`depthwise`]: depthwise convolution and max pooling (planes, rows, channels-last
//!   blocks); [`window`]: pooling windows over one plane; [`pool_pairs`]: 2×2 stride-2
//!   average pools of even planes.
//! * [`nhwc`]: channels-last convolutions of a region (pointwise, depthwise, im2col tiles at
//!   offsets, pairs), [`nhwc_winograd`]: their Winograd F(2×2, 3×3).
//! * [`conv_transpose`]: ConvTranspose as a GEMM into columns and a scatter-add.

pub mod channel_lanes;
pub mod conv_transpose;
pub mod depthwise;
pub mod direct;
pub mod grouped;
pub mod nchw;
pub mod nhwc;
pub mod nhwc_winograd;
pub mod pixel_rows;
pub mod pool_pairs;
pub mod stem_pool;
pub mod tap_regions;
pub mod tiny_planes;
pub mod window;
pub mod winograd;

pub use nchw::*;

use crate::conv::window::Geo2;
use backplane_backend_api::{BackendError, Result};
use backplane_core::{Tensor, TensorView};
use std::sync::Arc;

/// The bias a convolution adds: its packed copy when it was constant, else the run-time
/// input in slot 2, or none.
pub(crate) fn bias_of<'a>(
    packed: &'a Option<Arc<Vec<f32>>>,
    inputs: &[TensorView<'a>],
) -> Result<Option<&'a [f32]>> {
    match packed {
        Some(b) => Ok(Some(b.as_slice())),
        None => inputs.get(2).map(crate::io::f32s).transpose(),
    }
}

/// How a convolution is computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConvAlgorithm {
    /// Winograd F(4×4, 3×3) over NCHW planes ([`winograd`]; constant weights).
    WinogradF4,
    /// Winograd F(2×2, 3×3) on a channels-last plane ([`nhwc_winograd`]).
    WinogradF2,
    /// One GEMM per tap over the outputs where it reads the input ([`tap_regions`];
    /// constant weights).
    TapRegions,
    /// The output channels in vector lanes ([`channel_lanes`]; constant weights).
    ChannelLanes,
    /// The depthwise kernel ([`depthwise`], or channels-last rows in [`nhwc`]).
    Depthwise,
    /// GEMM tiles on the phases, no packed B ([`direct`]).
    Direct,
    /// Groups of eight outputs in vector lanes ([`grouped`]; constant weights).
    Grouped,
    /// A pointwise GEMM with the pixels as rows, transposed into the planes ([`pixel_rows`];
    /// constant weights).
    PixelRows,
    /// A GEMM: over the phases (NCHW), on the input (pointwise), or by tiles reading the
    /// window at offsets (channels-last).
    Gemm,
}

/// Where a convolution's input and output lie.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConvLayoutIn {
    /// NCHW in, NCHW out.
    Nchw,
    /// Channels-last in and out (inside a channels-last region).
    Nhwc,
    /// NCHW in, channels-last out (a region's first layer).
    NchwToNhwc,
}

/// What [`choose_conv_algorithm`] looks at.
#[derive(Debug, Clone, Copy)]
pub struct ConvShape<'a> {
    /// The window geometry.
    pub geo: &'a Geo2,
    /// Input channels.
    pub c: usize,
    /// Output channels.
    pub m: usize,
    /// Groups.
    pub group: usize,
    /// Threads the workload runs on.
    pub threads: usize,
    /// Whether the weights are constant (known when the workload is created).
    pub const_weights: bool,
    /// The layout.
    pub layout: ConvLayoutIn,
    /// Whether the Winograd paths may be taken (false after a Winograd plan was refused).
    pub winograd: bool,
}

impl ConvShape<'_> {
    /// A 1×1 stride-1 unpadded window: a product with the pixels.
    pub fn pointwise(&self) -> bool {
        let g = self.geo;
        g.kh == 1
            && g.kw == 1
            && g.sh == 1
            && g.sw == 1
            && g.pt == 0
            && g.pl == 0
            && g.oh == g.h
            && g.ow == g.w
    }

    /// A 1×1 unpadded window with a stride (of 2, mostly: ResNet's and RegNet's
    /// projections), every output reading an input pixel: a product with every stride-th
    /// pixel of every stride-th row.
    pub fn strided_pointwise(&self) -> bool {
        let g = self.geo;
        (g.sh > 1 || g.sw > 1) && g.oh > 0 && g.ow > 0 && g.pointwise_inside()
    }

    /// One group per channel, as many outputs as inputs.
    pub fn depthwise(&self) -> bool {
        self.group == self.c && self.m == self.c && self.c > 1
    }
}

/// Whether an NCHW convolution that is not depthwise takes [`direct`]: one group (few
/// input channels under a window, or few outputs of a pointwise one), or small groups
/// under a window, one group at a time.
fn direct_applies(s: &ConvShape<'_>, pointwise: bool) -> bool {
    let cg = s.c / s.group.max(1);
    let k = cg * s.geo.kh * s.geo.kw;
    match (s.group, pointwise) {
        (1, true) => direct::applies_pointwise(s.m, s.c),
        (1, false) => direct::applies(s.c, k),
        (_, true) => false,
        (g, false) => direct::applies_grouped(cg, s.m / g, k, s.geo.ow),
    }
}

/// A copy of the constant f32 bias `b` as a convolution reads it, shared with other plans'
/// workloads through the cache of packed constants (`crate::weights`): one per constant.
pub(crate) fn shared_bias(b: Option<&Arc<Tensor>>) -> Result<Option<Arc<Vec<f32>>>> {
    b.map(|b| {
        crate::weights::shared(b, "conv_bias", &[], || {
            let v = b.as_slice::<f32>()?;
            let mut out = Vec::new();
            out.try_reserve_exact(v.len())
                .map_err(|_| BackendError::Other("cannot allocate the bias".into()))?;
            out.extend_from_slice(v);
            Ok(out)
        })
    })
    .transpose()
}

/// Whether an NCHW convolution of one group with constant weights takes the pixels as the
/// rows of its product: a pointwise or strided pointwise one by [`pixel_rows::applies`], one
/// with a window on a tiny plane by [`tiny_planes::applies`] (both run by
/// [`pixel_rows::Plan::run_conv`]).
fn pixel_rows_apply(s: &ConvShape<'_>, pointwise: bool) -> bool {
    if pointwise || s.strided_pointwise() {
        pixel_rows::applies(s.c, s.m, s.geo.oh * s.geo.ow)
    } else {
        tiny_planes::applies(s.geo, s.c, s.m)
    }
}

/// The algorithm a convolution runs with: every size threshold and option that decides it is
/// consulted here (the predicates of each path hold their own thresholds).
pub fn choose_conv_algorithm(s: &ConvShape<'_>) -> ConvAlgorithm {
    let options = crate::options::current();
    let pointwise = s.pointwise();
    match s.layout {
        ConvLayoutIn::Nchw => {
            if s.const_weights
                && s.winograd
                && s.group == 1
                && winograd::worth(s.geo, s.c, s.m)
                && options.winograd
            {
                ConvAlgorithm::WinogradF4
            } else if s.const_weights && s.group == 1 && tap_regions::applies(s.geo) {
                ConvAlgorithm::TapRegions
            } else if s.const_weights
                && s.group == 1
                && !pointwise
                && channel_lanes::applies(s.geo, s.c, s.m, s.threads)
            {
                ConvAlgorithm::ChannelLanes
            } else if s.depthwise() {
                ConvAlgorithm::Depthwise
            } else if s.const_weights && s.group == 1 && pixel_rows_apply(s, pointwise) {
                ConvAlgorithm::PixelRows
            } else if s.const_weights && grouped::applies(s.geo, s.c, s.m, s.group) {
                ConvAlgorithm::Grouped
            } else if direct_applies(s, pointwise) {
                ConvAlgorithm::Direct
            } else {
                ConvAlgorithm::Gemm
            }
        }
        ConvLayoutIn::Nhwc | ConvLayoutIn::NchwToNhwc => {
            let nhwc_in = s.layout == ConvLayoutIn::Nhwc;
            if nhwc_in && s.group == s.c && s.c > 1 {
                ConvAlgorithm::Depthwise
            } else if !nhwc_in
                && s.const_weights
                && s.group == 1
                && !pointwise
                && channel_lanes::applies_nhwc(s.geo, s.c, s.m)
            {
                ConvAlgorithm::ChannelLanes
            } else if nhwc_in
                && !pointwise
                && s.winograd
                && nhwc_winograd::applies(s.geo, s.c, s.m, s.threads)
            {
                ConvAlgorithm::WinogradF2
            } else {
                ConvAlgorithm::Gemm
            }
        }
    }
}
