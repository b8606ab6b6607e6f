//! Transposed convolution (ONNX ConvTranspose), 1-D and 2-D, f32.
//!
//! Per image and group the product `cols = W_gᵀ · X_g` (by [`gemm::sgemm`], with the weights
//! packed once at load time when they are constant) gives, for every output channel and
//! kernel tap, the input plane that tap scatters; a col2im pass then adds each of those
//! planes into the output at `i·stride + k·dilation - pad_begin`, starting from the bias.
//! The scatter ranges of every tap are planned at load time from the resolved geometry
//! (pads, auto_pad, output_shape and output_padding, as [`ConvTransposeDesc::geometry`]
//! resolves them).

use crate::gemm::{self, ASrc, BSrc, Epilogue, MatView, Packed};
use crate::io::{f32s, f32s_mut, input, output, Io};
use crate::threads::Threads;
use crate::weights;
use backplane_backend_api::{BackendError, Result, Workload};
use backplane_core::ops::ConvTransposeDesc;
use backplane_core::{Tensor, TensorView, TensorViewMut};
use backplane_cpu_kernels::AlignedVec;
use std::cell::RefCell;
use std::sync::Arc;

/// Why CpuAcc cannot run a transposed convolution with these shapes, if it cannot.
pub fn check(
    desc: &ConvTransposeDesc,
    x: &[usize],
    w: &[usize],
    b: Option<&[usize]>,
) -> std::result::Result<(), String> {
    if x.len() != 3 && x.len() != 4 {
        return Err(format!(
            "CpuAcc runs 1-D and 2-D transposed convolutions, not {}-D",
            x.len().saturating_sub(2)
        ));
    }
    if w.len() != x.len() {
        return Err("weight rank differs from input rank".into());
    }
    let group = desc.group.max(1);
    if !x[1].is_multiple_of(group) || w[0] != x[1] {
        return Err("input channels do not match the weights and groups".into());
    }
    if w[2..] != desc.window.kernel[..] {
        return Err("kernel_shape differs from the weights".into());
    }
    if b.is_some_and(|b| b != [w[1] * group]) {
        return Err("bias length differs from the output channels".into());
    }
    desc.geometry(x).map_err(|e| e.to_string())?;
    Ok(())
}

/// Where one kernel tap along one axis scatters: inputs `lo..hi` land at output
/// `first + (i - lo)·stride`.
#[derive(Debug, Clone, Copy)]
struct Span {
    lo: usize,
    hi: usize,
    first: usize,
}

/// The spans of every tap along one axis of `len` inputs and `out` outputs.
fn spans(
    len: usize,
    out: usize,
    kernel: usize,
    stride: usize,
    dilation: usize,
    pad: i64,
) -> Vec<Span> {
    (0..kernel)
        .map(|k| {
            let at = |i: usize| (i * stride + k * dilation) as i64 - pad;
            let valid = |i: &usize| (0..out as i64).contains(&at(*i));
            let lo = (0..len).find(valid).unwrap_or(len);
            let hi = (lo..len)
                .take_while(|i| valid(i))
                .last()
                .map_or(lo, |i| i + 1);
            Span {
                lo,
                hi,
                first: if lo < hi { at(lo) as usize } else { 0 },
            }
        })
        .collect()
}

/// The plan of one transposed convolution, as 2-D (a 1-D one has a height of 1).
#[derive(Debug, Clone)]
struct Geo {
    /// Input plane.
    h: usize,
    w: usize,
    /// Output plane.
    oh: usize,
    ow: usize,
    /// Kernel.
    kh: usize,
    kw: usize,
    /// Strides.
    sh: usize,
    sw: usize,
    /// Where each kernel row (column) scatters.
    rows: Vec<Span>,
    cols: Vec<Span>,
}

enum Weights {
    /// `W_gᵀ` packed per group (shared with other plans' workloads: `crate::weights`).
    Packed(Arc<Vec<Packed>>),
    /// A run-time input: read in place by the SGEMM each execution.
    Runtime,
}

thread_local! {
    static COLS: RefCell<AlignedVec<f32>> = const { RefCell::new(AlignedVec::new()) };
}

/// A transposed convolution: SGEMM into columns, then a col2im scatter-add.
pub struct ConvTransposeWorkload {
    io: Io,
    geo: Geo,
    n: usize,
    c: usize,
    /// Output channels per group.
    mg: usize,
    group: usize,
    weights: Weights,
    bias: Option<Arc<Vec<f32>>>,
    threads: Threads,
}

impl ConvTransposeWorkload {
    /// Build it: `weights`/`bias` are the constant values when known.
    pub fn new(
        io: Io,
        desc: &ConvTransposeDesc,
        weights: Option<&Arc<Tensor>>,
        bias: Option<&Arc<Tensor>>,
        threads: Threads,
    ) -> Result<Self> {
        let bad = |m: String| BackendError::Other(format!("{}: {m}", io.layer));
        let dims = |slot: usize, what: &str| {
            io.inputs
                .get(slot)
                .map(|i| i.shape.dims().to_vec())
                .ok_or_else(|| bad(format!("no {what}")))
        };
        let (xd, wd) = (dims(0, "input")?, dims(1, "weights")?);
        let bd = io.inputs.get(2).map(|i| i.shape.dims().to_vec());
        check(desc, &xd, &wd, bd.as_deref()).map_err(bad)?;
        let (out, pb, _) = desc.geometry(&xd)?;
        let one = |v: &[usize], i: usize| v.get(i).copied().unwrap_or(1);
        let win = &desc.window;
        // 1-D: a height-1 image with a height-1 kernel.
        let (h, oh, kh, sh, dh, ph, ax) = if xd.len() == 4 {
            (
                xd[2],
                out[0],
                wd[2],
                one(&win.strides, 0),
                one(&win.dilations, 0),
                pb[0],
                1,
            )
        } else {
            (1, 1, 1, 1, 1, 0, 0)
        };
        let (w, ow, kw) = (xd[ax + 2], out[ax], wd[ax + 2]);
        let (sw, dw, pw) = (one(&win.strides, ax), one(&win.dilations, ax), pb[ax]);
        let geo = Geo {
            h,
            w,
            oh,
            ow,
            kh,
            kw,
            sh,
            sw,
            rows: spans(h, oh, kh, sh, dh, ph),
            cols: spans(w, ow, kw, sw, dw, pw),
        };
        let group = desc.group.max(1);
        let (n, c, mg) = (xd[0], xd[1], wd[1]);
        let cg = c / group;
        let taps = mg * kh * kw;
        let weights = match weights {
            // The packed form depends on the channels, groups and kernel only: plans at
            // every input size share it.
            Some(t) => Weights::Packed(weights::shared(
                t,
                "conv_transpose_a",
                &[group, cg, taps],
                || {
                    let w = t.as_slice::<f32>()?;
                    let per = cg * taps;
                    (0..group)
                        .map(|g| {
                            let wg = w
                                .get(g * per..(g + 1) * per)
                                .ok_or_else(|| bad("weights are too small".into()))?;
                            // (tap row r, input channel ci) is W[g·cg + ci][r].
                            let view = MatView {
                                data: wg,
                                rs: 1,
                                cs: taps,
                            };
                            Ok(Packed::pack_a(taps, cg, view))
                        })
                        .collect::<Result<Vec<_>>>()
                },
            )?),
            None => Weights::Runtime,
        };
        let bias = super::shared_bias(bias)?;
        if bias.as_ref().is_some_and(|b| b.len() != mg * group) {
            return Err(bad("bias length differs from the output channels".into()));
        }
        Ok(ConvTransposeWorkload {
            io,
            geo,
            n,
            c,
            mg,
            group,
            weights,
            bias,
            threads,
        })
    }

    /// One image's group: `x` its input channels, `y` its output channels, `bias` theirs
    /// (`w`: all weights when they are a run-time input).
    fn unit(
        &self,
        th: &Threads,
        g: usize,
        x: &[f32],
        w: Option<&[f32]>,
        bias: Option<&[f32]>,
        y: &mut [f32],
    ) -> Result<()> {
        let geo = &self.geo;
        let cg = self.c / self.group;
        let taps = self.mg * geo.kh * geo.kw;
        let plane = geo.h * geo.w;
        let a = match (&self.weights, w) {
            (Weights::Packed(p), _) => ASrc::Packed(
                p.get(g)
                    .ok_or_else(|| self.io.error("no packed weights for a group".into()))?,
            ),
            (Weights::Runtime, Some(w)) => {
                let per = cg * taps;
                let wg = w
                    .get(g * per..(g + 1) * per)
                    .ok_or_else(|| self.io.error("weights are too small".into()))?;
                ASrc::View(MatView {
                    data: wg,
                    rs: 1,
                    cs: taps,
                })
            }
            (Weights::Runtime, None) => {
                return Err(self.io.error("the weights are missing".into()));
            }
        };
        let b = BSrc::View(MatView {
            data: x,
            rs: plane,
            cs: 1,
        });
        let mut cols = gemm::take(&COLS, taps * plane);
        let product = if cg == 0 {
            // No input channels: nothing scatters, the output is the bias.
            cols[..taps * plane].fill(0.0);
            Ok(())
        } else {
            let ep = Epilogue::default();
            let c = &mut cols[..taps * plane];
            gemm::sgemm(th, taps, plane, cg, &a, &b, c, plane, &ep)
        };
        let res = product.and_then(|()| {
            let out_plane = geo.oh * geo.ow;
            let per = th.chunk_size(self.mg, 1, 1);
            let cols = &cols[..taps * plane];
            th.chunks(y, per * out_plane, |i, yc| {
                for (j, yp) in yc.chunks_mut(out_plane.max(1)).enumerate() {
                    let m = i * per + j;
                    let b = bias.and_then(|b| b.get(m)).copied().unwrap_or(0.0);
                    let kk = geo.kh * geo.kw;
                    let src = cols
                        .get(m * kk * plane..(m + 1) * kk * plane)
                        .ok_or_else(|| self.io.error("columns are too small".into()))?;
                    col2im(geo, src, b, yp)
                        .ok_or_else(|| self.io.error("col2im plan out of range".into()))?;
                }
                Ok(())
            })
        });
        gemm::give_back(&COLS, cols);
        res
    }
}

/// Scatter-add one output channel's columns (`kh·kw` input planes) into its output plane,
/// which starts at `bias`. `None` if the plan does not fit the buffers.
fn col2im(geo: &Geo, cols: &[f32], bias: f32, y: &mut [f32]) -> Option<()> {
    y.fill(bias);
    let plane = geo.h * geo.w;
    for (ky, r) in geo.rows.iter().enumerate() {
        for (kx, s) in geo.cols.iter().enumerate() {
            let t = ky * geo.kw + kx;
            let tap = cols.get(t * plane..(t + 1) * plane)?;
            let len = s.hi - s.lo;
            if len == 0 {
                continue;
            }
            for iy in r.lo..r.hi {
                let oy = r.first + (iy - r.lo) * geo.sh;
                let src = tap.get(iy * geo.w + s.lo..iy * geo.w + s.hi)?;
                let row = y.get_mut(oy * geo.ow..(oy + 1) * geo.ow)?;
                if geo.sw == 1 {
                    for (d, v) in row.get_mut(s.first..s.first + len)?.iter_mut().zip(src) {
                        *d += v;
                    }
                } else {
                    let last = s.first + (len - 1) * geo.sw;
                    let span = row.get_mut(s.first..last + 1)?;
                    for (d, v) in span.iter_mut().step_by(geo.sw).zip(src) {
                        *d += v;
                    }
                }
            }
        }
    }
    Some(())
}

impl Workload for ConvTransposeWorkload {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        self.io.check(inputs, outputs)?;
        let x = f32s(input(inputs, 0)?)?;
        let w = match self.weights {
            Weights::Runtime => Some(f32s(input(inputs, 1)?)?),
            Weights::Packed(_) => None,
        };
        let b = match (&self.bias, inputs.get(2)) {
            (Some(b), _) => Some(b.as_slice()),
            (None, Some(v)) => Some(f32s(v)?),
            (None, None) => None,
        };
        let y = f32s_mut(output(outputs)?)?;
        let geo = &self.geo;
        let (in_unit, out_unit) = (
            self.c / self.group * geo.h * geo.w,
            self.mg * geo.oh * geo.ow,
        );
        let units = self.n * self.group;
        if x.len() != units * in_unit || y.len() != units * out_unit {
            return Err(self.io.error("buffers do not match the plan".into()));
        }
        if out_unit == 0 {
            return Ok(());
        }
        let run = |th: &Threads, u: usize, yu: &mut [f32]| {
            let g = u % self.group;
            let xu = &x[u * in_unit..(u + 1) * in_unit];
            let bu = b.and_then(|b| b.get(g * self.mg..(g + 1) * self.mg));
            self.unit(th, g, xu, w, bu, yu)
        };
        let count = self.threads.count();
        if count > 1 && units > 1 && (units.is_multiple_of(count) || units >= 4 * count) {
            // Whole units per thread, each run single-threaded.
            let single = Threads::single();
            self.threads
                .chunks(y, out_unit, |u, yu| run(&single, u, yu))
        } else {
            y.chunks_mut(out_unit)
                .enumerate()
                .try_for_each(|(u, yu)| run(&self.threads, u, yu))
        }
    }
}
