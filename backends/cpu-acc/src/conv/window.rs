//! 2-D sliding windows over one plane: max/average pooling (depthwise convolution has its own
//! kernel in `crate::conv::depthwise`).
//!
//! Each input plane is first copied into a padded scratch plane whose rows are split into
//! `stride` phases (column `x·stride + q` goes to phase `q`), so that every kernel tap reads a
//! contiguous run of the phase row whatever the stride: the tap loops are plain vectorizable
//! `out[i] ∘= w · row[i]` loops.

use crate::simd;
use crate::threads::Threads;
use backplane_backend_api::Result;
use backplane_core::ops::Geometry;

/// What the window computes.
#[derive(Debug, Clone, Copy)]
pub enum WindowKind<'a> {
    /// Maximum (NaN propagates).
    Max,
    /// Sum divided by the per-position count `inv_cy[oy] * inv_cx[ox]`.
    Average {
        /// 1/count factor per output row.
        inv_cy: &'a [f32],
        /// 1/count factor per output column.
        inv_cx: &'a [f32],
    },
}

pub use backplane_cpu_kernels::geo::Geo2;

/// A [`Geo2`] from the core's resolved window geometry.
pub trait FromGeometry: Sized {
    /// From a resolved geometry of 1 or 2 spatial axes (1-D windows get height 1).
    fn from_geometry(g: &Geometry, spatial: &[usize]) -> Option<Self>;
}

impl FromGeometry for Geo2 {
    fn from_geometry(g: &Geometry, spatial: &[usize]) -> Option<Self> {
        match spatial.len() {
            1 => Some(Geo2 {
                h: 1,
                w: spatial[0],
                kh: 1,
                kw: g.kernel[0],
                sh: 1,
                sw: g.strides[0],
                dh: 1,
                dw: g.dilations[0],
                pt: 0,
                pl: g.pads_begin[0],
                oh: 1,
                ow: g.output[0],
            }),
            2 => Some(Geo2 {
                h: spatial[0],
                w: spatial[1],
                kh: g.kernel[0],
                kw: g.kernel[1],
                sh: g.strides[0],
                sw: g.strides[1],
                dh: g.dilations[0],
                dw: g.dilations[1],
                pt: g.pads_begin[0],
                pl: g.pads_begin[1],
                oh: g.output[0],
                ow: g.output[1],
            }),
            _ => None,
        }
    }
}

/// One plane's job: the prepared plane and what to compute.
#[derive(Debug, Clone, Copy)]
pub struct PlaneJob<'a> {
    /// The prepared (padded, phase-split) plane.
    pub src: &'a [f32],
    /// Geometry.
    pub geo: Geo2,
    /// What to compute.
    pub kind: WindowKind<'a>,
    /// Whether the plane holds a NaN (max then takes the slower NaN-propagating loop).
    pub has_nan: bool,
}

/// Copy plane `x` (h×w) into `dst`, padded with `pad` and split into stride phases (the body
/// [`simd::window_prepare`] compiles per ISA).
#[inline(always)]
pub fn prepare_body(geo: &Geo2, x: &[f32], pad: f32, dst: &mut [f32]) {
    let (rows, row_len, phase_len) = (geo.padded_rows(), geo.row_len(), geo.phase_len());
    // The strided case's padded row lives past the planes (see `Geo2::scratch_len`), not in
    // a vector allocated per plane (for small planes, a tenth of a pooling layer's time).
    let (dst, tmp) = dst.split_at_mut((rows * row_len).min(dst.len()));
    for r in 0..rows {
        let drow = &mut dst[r * row_len..(r + 1) * row_len];
        let iy = r as isize - geo.pt as isize;
        if iy < 0 || iy >= geo.h as isize {
            drow.fill(pad);
            continue;
        }
        let srow = &x[iy as usize * geo.w..(iy as usize + 1) * geo.w];
        if geo.sw == 1 {
            let lo = geo.pl.min(row_len);
            drow[..lo].fill(pad);
            let n = geo.w.min(row_len - lo);
            drow[lo..lo + n].copy_from_slice(&srow[..n]);
            drow[lo + n..].fill(pad);
        } else {
            // Pad the row contiguously, then split it into phases with plain strided copies.
            let lo = geo.pl.min(row_len);
            let n = geo.w.min(row_len - lo);
            tmp[..lo].fill(pad);
            tmp[lo..lo + n].copy_from_slice(&srow[..n]);
            tmp[lo + n..].fill(pad);
            let sw = geo.sw;
            if sw == 2 {
                let (p0, p1) = drow.split_at_mut(phase_len);
                for (xq, (a, b)) in p0.iter_mut().zip(p1.iter_mut()).enumerate() {
                    *a = tmp[2 * xq];
                    *b = tmp[2 * xq + 1];
                }
            } else {
                for q in 0..sw {
                    let phase = &mut drow[q * phase_len..(q + 1) * phase_len];
                    for (xq, v) in phase.iter_mut().enumerate() {
                        *v = tmp[xq * sw + q];
                    }
                }
            }
        }
    }
}

/// Compute one output plane from a prepared plane (the body [`simd::window_plane`] compiles
/// per ISA).
#[inline(always)]
pub fn plane_body(job: &PlaneJob<'_>, out: &mut [f32]) {
    let g = &job.geo;
    let (row_len, phase_len) = (g.row_len(), g.phase_len());
    for (oy, orow) in out.chunks_exact_mut(g.ow).enumerate().take(g.oh) {
        match job.kind {
            WindowKind::Average { .. } => orow.fill(0.0),
            WindowKind::Max => orow.fill(f32::NEG_INFINITY),
        }
        for ky in 0..g.kh {
            let r = oy * g.sh + ky * g.dh;
            for kx in 0..g.kw {
                let col = kx * g.dw;
                let start = r * row_len + (col % g.sw) * phase_len + col / g.sw;
                let src = &job.src[start..start + g.ow];
                match job.kind {
                    WindowKind::Max if !job.has_nan => {
                        // Without NaNs `f32::max` is the maximum, and vectorizes to vmaxps
                        // with a whole store (a compare-select that keeps `*o` becomes a
                        // masked store of the changed lanes, slow on AMD's CPUs).
                        for (o, &v) in orow.iter_mut().zip(src) {
                            *o = o.max(v);
                        }
                    }
                    WindowKind::Max => {
                        for (o, &v) in orow.iter_mut().zip(src) {
                            *o = if o.is_nan() || *o >= v { *o } else { v };
                        }
                    }
                    WindowKind::Average { .. } => {
                        for (o, &v) in orow.iter_mut().zip(src) {
                            *o += v;
                        }
                    }
                }
            }
        }
        match job.kind {
            WindowKind::Average { inv_cy, inv_cx } => {
                let fy = inv_cy[oy];
                for (o, &fx) in orow.iter_mut().zip(inv_cx) {
                    *o *= fy * fx;
                }
            }
            WindowKind::Max => {}
        }
    }
}

/// Run a window op over `planes` planes: `x` holds them (h·w each), `y` receives them
/// (oh·ow each). `kind_of(plane)` says what to compute for each plane.
pub fn run_planes<'k, F>(
    th: &Threads,
    geo: &Geo2,
    x: &[f32],
    y: &mut [f32],
    pad: f32,
    kind_of: F,
) -> Result<()>
where
    F: Fn(usize) -> WindowKind<'k> + Sync + Send,
{
    let (in_plane, out_plane) = (geo.h * geo.w, geo.oh * geo.ow);
    if out_plane == 0 {
        return Ok(());
    }
    let planes = y.len() / out_plane;
    let per = if planes * out_plane < 8192 {
        planes.max(1)
    } else {
        th.chunk_size(planes, 1, 1)
    };
    th.chunks(y, per * out_plane, |ci, yc| {
        let mut scratch = vec![0f32; geo.scratch_len()];
        for (i, out) in yc.chunks_exact_mut(out_plane).enumerate() {
            let p = ci * per + i;
            let plane = &x[p * in_plane..(p + 1) * in_plane];
            simd::window_prepare(geo, plane, pad, &mut scratch);
            let kind = kind_of(p);
            let job = PlaneJob {
                src: &scratch,
                geo: *geo,
                kind,
                has_nan: matches!(kind, WindowKind::Max) && simd::any_nan(plane),
            };
            simd::window_plane(&job, out);
        }
        Ok(())
    })
}
