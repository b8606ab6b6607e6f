//! Convolution of a network's first layer (a few input channels under a window) with the
//! output channels in vector lanes: `simd::channel_lanes` broadcasts each input value into
//! 16 or 32 output channels at a time, reading a zero-padded copy of the input at a stride
//! of 1 or 2, and the rows of channels-last results are transposed into the output planes.
//!
//! Against the direct path (`crate::direct`: the GEMM's 12×32 tiles over the input's stride
//! phases), whose tiles stream K runs of 32 inputs each (147 of them for a 7×7 window over
//! 3 channels: more than L1 holds with the next tile's prefetched), here the block of weights
//! (K × 32 floats, 18 KiB) stays in L1 and the inputs are single floats. Measured with
//! `conv_bench` (best of 5 runs of 15 alternating rounds, one thread): 3→32 3×3 stride 2 on
//! 224×224 0.47 → 0.41 ms, 3→64 7×7 stride 2 3.2 → 2.5 ms. On two threads the 7×7 layer
//! alone was slower on this (shared, 2-vCPU) machine, 2.6 against 2.0 ms, while whole
//! ResNet-18 and MobileNetV2 on two threads ran even or faster (best of 8 alternating runs:
//! 34.1 → 32.8 ms, 10.1 → 10.4 ms, within the noise). The transposes cost about a fifth of the
//! time; writing the planes from registers would save their round trip through L1 (not
//! done). AVX-512 only.

use crate::act::Activation;
use crate::direct;
use crate::gemm;
use crate::simd::{self, channel_lanes};
use crate::threads::Threads;
use crate::window::Geo2;
use backplane_backend_api::{BackendError, Result};
use std::cell::RefCell;

/// Set (to anything) when a workload is created to keep the direct path, for A/B
/// measurements.
pub const NO_CHANNEL_LANES_ENV: &str = "BACKPLANE_CPUACC_NO_CHANNEL_LANES";

thread_local! {
    static PADDED: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    static ROW: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Whether a convolution of one group with `c` input channels and this window takes the
/// channel-lanes path: the layers of [`direct::applies`] with a horizontal stride of 1 or 2,
/// and [`NO_CHANNEL_LANES_ENV`] unset.
pub fn applies(geo: &Geo2, c: usize) -> bool {
    geo.oh > 0
        && geo.ow > 0
        && (1..=2).contains(&geo.sw)
        && direct::applies(c, c * geo.kh * geo.kw)
        && std::env::var_os(NO_CHANNEL_LANES_ENV).is_none()
}

/// The weights in blocks of output channels, and where each tap reads the padded input.
#[derive(Debug, Clone)]
pub struct Plan {
    geo: Geo2,
    c: usize,
    m: usize,
    /// Vectors of 16 output channels per block (1 or 2).
    vectors: usize,
    /// Padded input: rows, row pitch.
    hp: usize,
    wp: usize,
    /// Offset of tap (channel, ky, kx), in that order, in the padded input.
    taps: Vec<usize>,
    /// Per block of `16·vectors` channels: K × `16·vectors` weights (zero past `m`).
    weights: Vec<f32>,
}

impl Plan {
    /// Plan a convolution of `m` filters of `c` channels (`w`: [m, c, kh, kw]) for
    /// `threads` threads: blocks of 32 channels, or 16 when 32 would leave threads idle.
    pub fn new(geo: &Geo2, w: &[f32], m: usize, c: usize, threads: usize) -> Result<Self> {
        let k = c * geo.kh * geo.kw;
        if w.len() < m * k || m == 0 || k == 0 {
            return Err(BackendError::Execution(
                "channel-lanes convolution: weights do not match".into(),
            ));
        }
        let vectors = if m > 16 && m.div_ceil(32) >= threads.max(1) {
            2
        } else {
            1
        };
        let width = 16 * vectors;
        let npad = channel_lanes::reach(geo.ow, vectors);
        let wp = (npad - 1) * geo.sw + (geo.kw - 1) * geo.dw + 1;
        let hp = (geo.oh - 1) * geo.sh + (geo.kh - 1) * geo.dh + 1;
        let mut taps = Vec::with_capacity(k);
        for ci in 0..c {
            for ky in 0..geo.kh {
                for kx in 0..geo.kw {
                    taps.push(ci * hp * wp + ky * geo.dh * wp + kx * geo.dw);
                }
            }
        }
        let blocks = m.div_ceil(width);
        let mut weights = vec![0f32; blocks * k * width];
        for (o, filter) in w.chunks(k).take(m).enumerate() {
            let block = &mut weights[o / width * k * width..][..k * width];
            for (t, &v) in filter.iter().enumerate() {
                block[t * width + o % width] = v;
            }
        }
        Ok(Plan {
            geo: *geo,
            c,
            m,
            vectors,
            hp,
            wp,
            taps,
            weights,
        })
    }

    /// `y = act(conv(x) + bias)` for one image: `x` its `c` input planes, `y` its `m`
    /// output planes. Blocks of output channels are shared out between the threads.
    pub fn run(
        &self,
        th: &Threads,
        x: &[f32],
        bias: Option<&[f32]>,
        act: Activation,
        y: &mut [f32],
    ) -> Result<()> {
        let g = &self.geo;
        let (plane, out_plane) = (g.h * g.w, g.oh * g.ow);
        let bad =
            |what: &str| BackendError::Execution(format!("channel-lanes convolution: {what}"));
        if x.len() < self.c * plane || y.len() < self.m * out_plane {
            return Err(bad("input or output too small"));
        }
        if bias.is_some_and(|b| b.len() < self.m) {
            return Err(bad("bias too short"));
        }
        let (hp, wp) = (self.hp, self.wp);
        let mut padded = gemm::take(&PADDED, self.c * hp * wp);
        padded.fill(0.0);
        for ci in 0..self.c {
            for iy in 0..g.h.min(hp.saturating_sub(g.pt)) {
                let cols = g.w.min(wp.saturating_sub(g.pl));
                let dst = (ci * hp + iy + g.pt) * wp + g.pl;
                let src = ci * plane + iy * g.w;
                padded[dst..dst + cols].copy_from_slice(&x[src..src + cols]);
            }
        }
        let kernel_act = if act.in_kernel() {
            act
        } else {
            Activation::None
        };
        let width = 16 * self.vectors;
        let k = self.taps.len();
        let npad = channel_lanes::reach(g.ow, self.vectors);
        let padded_ref = &padded;
        let res = th.chunks(
            &mut y[..self.m * out_plane],
            width * out_plane,
            |bi, slab| {
                let channels = slab.len() / out_plane;
                let mut b = [0f32; 32];
                if let Some(bias) = bias {
                    b[..channels].copy_from_slice(&bias[bi * width..bi * width + channels]);
                }
                let w = &self.weights[bi * k * width..(bi + 1) * k * width];
                let mut row = gemm::take(&ROW, self.vectors * npad * 16);
                let mut res = Ok(());
                for oy in 0..g.oh {
                    let x = &padded_ref[oy * g.sh * wp..];
                    let v = self.vectors;
                    if !channel_lanes::row(
                        x, g.sw, &self.taps, w, v, &b, kernel_act, g.ow, &mut row,
                    ) {
                        res = Err(bad("a row does not fit its buffers"));
                        break;
                    }
                    for v in 0..self.vectors {
                        let n = channels.saturating_sub(16 * v).min(16);
                        if n == 0 {
                            break;
                        }
                        let dst = &mut slab[16 * v * out_plane + oy * g.ow..];
                        simd::scatter_lanes(&row[v * npad * 16..], g.ow, n, dst, out_plane);
                    }
                }
                gemm::give_back(&ROW, row);
                if res.is_ok() && !act.in_kernel() {
                    simd::unary_in_place(act, slab);
                }
                res
            },
        );
        gemm::give_back(&PADDED, padded);
        res
    }
}
