//! Resize (ONNX Resize / Upsample), f32, scaling the last two axes only: nearest (every
//! `nearest_mode`) and linear, under every coordinate transformation except
//! tf_crop_and_resize.
//!
//! The source index (nearest) or the two neighbours and their weights (linear) of every output
//! row and column are planned at load time, from the output shape and scales the desc carries,
//! with the same f32 coordinate arithmetic as CpuRef (so that nearest rounding ties land on the
//! same side). Execution is then a gather per row (nearest, repeated rows copied) or a
//! horizontal pass over the input rows that are read followed by a vertical blend (linear),
//! planes shared out between the threads.

use crate::gemm;
use crate::io::{f32s, f32s_mut, input, output, Io};
use crate::threads::Threads;
use backplane_backend_api::{BackendError, Result, Workload};
use backplane_core::ops::{linear_neighbours, CoordinateTransform, ResizeDesc, ResizeMode};
use backplane_core::{TensorView, TensorViewMut};
use backplane_cpu_kernels::AlignedVec;
use std::cell::RefCell;

/// Why CpuAcc cannot run a Resize of an input of shape `x`, if it cannot.
pub fn check(desc: &ResizeDesc, x: &[usize]) -> std::result::Result<(), String> {
    let rank = x.len();
    if rank == 0 {
        return Err("CpuAcc does not resize scalars".into());
    }
    if desc.output_shape.len() != rank || desc.scales.len() != rank {
        return Err("Resize output shape or scales do not match the input rank".into());
    }
    match desc.mode {
        ResizeMode::Nearest | ResizeMode::Linear => {}
        ResizeMode::Cubic => return Err("CpuAcc does not implement cubic Resize".into()),
    }
    if desc.coordinate_transform == CoordinateTransform::TfCropAndResize {
        return Err(
            "CpuAcc does not implement tf_crop_and_resize (roi and extrapolation_value)".into(),
        );
    }
    let inner = rank.saturating_sub(2);
    for (axis, &len) in x.iter().enumerate().take(inner) {
        if len != desc.output_shape[axis] || desc.scales[axis] != 1.0 {
            return Err(format!(
                "CpuAcc resizes only the last two axes; axis {axis} is scaled"
            ));
        }
    }
    if desc.mode == ResizeMode::Linear
        && desc.antialias
        && desc.scales[inner..].iter().any(|&s| s < 1.0)
    {
        return Err("CpuAcc does not implement antialiased linear downsampling".into());
    }
    if desc.output_shape.iter().all(|&d| d > 0) && x.contains(&0) {
        return Err("Resize of an empty input to a non-empty output".into());
    }
    Ok(())
}

/// Linear: the two neighbours of coordinate `c` (clamped into the input) and their weights.
#[derive(Debug, Clone, Copy)]
struct Tap {
    i0: usize,
    i1: usize,
    w0: f32,
    w1: f32,
}

fn linear(c: f32, len: usize) -> Tap {
    let [(i0, w0), (i1, w1)] = linear_neighbours(c, len);
    Tap {
        i0,
        i1,
        w0: w0 as f32,
        w1: w1 as f32,
    }
}

/// The per-axis plan of the two resized axes.
enum Plan {
    /// Source row of each output row, source column of each output column.
    Nearest { rows: Vec<usize>, cols: Vec<usize> },
    /// Neighbours and weights of each output row and column; `used[y]`: input row `y` is read.
    Linear {
        rows: Vec<Tap>,
        cols: Vec<Tap>,
        used: Vec<bool>,
    },
}

thread_local! {
    static ROWS: RefCell<AlignedVec<f32>> = const { RefCell::new(AlignedVec::new()) };
}

/// A Resize of the last two axes, planned at load time.
pub struct ResizeWorkload {
    io: Io,
    h: usize,
    w: usize,
    oh: usize,
    ow: usize,
    plan: Plan,
    threads: Threads,
}

impl ResizeWorkload {
    /// Plan the resize of the layer's input (shape in `io`) as `desc` resolves it.
    pub fn new(io: Io, desc: &ResizeDesc, threads: Threads) -> Result<Self> {
        let bad = |m: String| BackendError::Other(format!("{}: {m}", io.layer));
        let x = io.input_dims()?;
        check(desc, &x).map_err(bad)?;
        let rank = x.len();
        // A rank-1 input is a single row.
        let axis = |back: usize| rank.checked_sub(back);
        let dim = |back: usize| {
            axis(back).map_or((1, 1, 1.0), |a| {
                (x[a], desc.output_shape[a], desc.scales[a])
            })
        };
        let ((h, oh, sy), (w, ow, sx)) = (dim(2), dim(1));
        let t = desc.coordinate_transform;
        let plan = match desc.mode {
            ResizeMode::Nearest => {
                let pick = |len: usize, out: usize, s: f32| -> Vec<usize> {
                    (0..out)
                        .map(|o| desc.nearest_mode.index(t.source(o, len, out, s), len))
                        .collect()
                };
                Plan::Nearest {
                    rows: pick(h, oh, sy),
                    cols: pick(w, ow, sx),
                }
            }
            _ => {
                let taps = |len: usize, out: usize, s: f32| -> Vec<Tap> {
                    (0..out)
                        .map(|o| linear(t.source(o, len, out, s), len))
                        .collect()
                };
                let rows = taps(h, oh, sy);
                let mut used = vec![false; h];
                for r in &rows {
                    for i in [r.i0, r.i1] {
                        if let Some(u) = used.get_mut(i) {
                            *u = true;
                        }
                    }
                }
                Plan::Linear {
                    rows,
                    cols: taps(w, ow, sx),
                    used,
                }
            }
        };
        Ok(ResizeWorkload {
            io,
            h,
            w,
            oh,
            ow,
            plan,
            threads,
        })
    }

    /// Resize one plane `x` (h·w) into `y` (oh·ow).
    fn plane(&self, x: &[f32], y: &mut [f32]) -> Result<()> {
        let (w, ow) = (self.w, self.ow);
        let oob = || self.io.error("a source index is outside the input".into());
        match &self.plan {
            Plan::Nearest { rows, cols } => {
                let mut prev: Option<usize> = None;
                for (oy, &sy) in rows.iter().enumerate() {
                    let (done, rest) = y.split_at_mut(oy * ow);
                    let row = rest.get_mut(..ow).ok_or_else(oob)?;
                    match prev {
                        Some(p) if p == sy && oy > 0 => {
                            row.copy_from_slice(&done[(oy - 1) * ow..]);
                        }
                        _ => {
                            let src = x.get(sy * w..(sy + 1) * w).ok_or_else(oob)?;
                            for (d, &sx) in row.iter_mut().zip(cols) {
                                *d = *src.get(sx).ok_or_else(oob)?;
                            }
                        }
                    }
                    prev = Some(sy);
                }
                Ok(())
            }
            Plan::Linear { rows, cols, used } => {
                // Each input row that is read, resampled horizontally.
                let mut t = gemm::take(&ROWS, self.h * ow);
                for (iy, _) in used.iter().enumerate().filter(|(_, &u)| u) {
                    let src = x.get(iy * w..(iy + 1) * w).ok_or_else(oob)?;
                    let dst = t.get_mut(iy * ow..(iy + 1) * ow).ok_or_else(oob)?;
                    for (d, c) in dst.iter_mut().zip(cols) {
                        let (a, b) = (src.get(c.i0), src.get(c.i1));
                        *d = a.zip(b).map(|(a, b)| a * c.w0 + b * c.w1).ok_or_else(oob)?;
                    }
                }
                let res = rows.iter().enumerate().try_for_each(|(oy, r)| {
                    let row = y.get_mut(oy * ow..(oy + 1) * ow).ok_or_else(oob)?;
                    let t0 = t.get(r.i0 * ow..(r.i0 + 1) * ow).ok_or_else(oob)?;
                    let t1 = t.get(r.i1 * ow..(r.i1 + 1) * ow).ok_or_else(oob)?;
                    for ((d, a), b) in row.iter_mut().zip(t0).zip(t1) {
                        *d = a * r.w0 + b * r.w1;
                    }
                    Ok(())
                });
                gemm::give_back(&ROWS, t);
                res
            }
        }
    }
}

impl Workload for ResizeWorkload {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        self.io.check(inputs, outputs)?;
        let x = f32s(input(inputs, 0)?)?;
        let y = f32s_mut(output(outputs)?)?;
        let (in_plane, out_plane) = (self.h * self.w, self.oh * self.ow);
        if out_plane == 0 || y.is_empty() {
            return Ok(());
        }
        let planes = y.len() / out_plane;
        if y.len() != planes * out_plane || x.len() != planes * in_plane {
            return Err(self.io.error("buffers do not match the plan".into()));
        }
        let per = self.threads.chunk_size(planes, 1, 1);
        self.threads.chunks(y, per * out_plane, |i, yc| {
            for (j, yp) in yc.chunks_mut(out_plane).enumerate() {
                let p = i * per + j;
                let xp = x
                    .get(p * in_plane..(p + 1) * in_plane)
                    .ok_or_else(|| self.io.error("input plane out of range".into()))?;
                self.plane(xp, yp)?;
            }
            Ok(())
        })
    }
}
