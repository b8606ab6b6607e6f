//! Winograd F(2×2, 3×3) for channels-last 3×3 stride-1 convolutions on small planes (a
//! ResNet's 7×7 last stage), where the NCHW F(4×4, 3×3) path (`crate::conv::winograd`) would cover
//! 49 pixels with four tiles and its 36 transformed weight matrices would each serve four
//! GEMM rows.
//!
//! One 2×2 output tile of a 3×3 correlation is `Aᵀ [(G g Gᵀ) ⊙ (Bᵀ d B)] A` for the tile's
//! 4×4 input window `d` (Lavin & Gray, 2015), with the interpolation points 0, 1, −1, ∞:
//!
//! ```text
//! Bᵀ = | 1  0 -1  0 |    G = | 1    0    0   |    Aᵀ = | 1  1  1  0 |
//!      | 0  1  1  0 |        | 1/2  1/2  1/2 |         | 0  1 -1 -1 |
//!      | 0 -1  1  0 |        | 1/2 -1/2  1/2 |
//!      | 0  1  0 -1 |        | 0    0    1   |
//! ```
//!
//! The input and output transforms are additions of whole channel runs (channels are
//! contiguous in NHWC), and the 16 products `M_ξ (tiles × M) = V_ξ (tiles × C) · U_ξ (C × M)`
//! run through the in-place AVX2 tiles (`simd::tiles_strided`), the tiles of every image as
//! the rows. The weights are transformed once, at load, into 16 packed B operands: 16·C·M
//! floats against 9·C·M (a 512→512 layer: 16.8 MB against 9.4 MB), for 16/36 of the direct
//! convolution's multiply-adds.

use crate::act::Activation;
use crate::conv::window::Geo2;
use crate::gemm::{self, Packed, KC};
use crate::simd::{self, TileEpilogue, NR};
use crate::threads::Threads;
use backplane_backend_api::{BackendError, Result};
use backplane_cpu_kernels::AlignedVec;
use std::cell::RefCell;

/// Points of the transformed domain (a 4×4 window).
const POINTS: usize = 16;

/// Fewest input and output channels: below them the transforms cost more than the products
/// save.
const MIN_CHANNELS: usize = 64;

/// Most output pixels: larger planes take the NCHW F(4×4, 3×3) path instead.
const MAX_PIXELS: usize = 64;

thread_local! {
    static TRANSFORMED: RefCell<AlignedVec<f32>> = const { RefCell::new(AlignedVec::new()) };
    static PRODUCTS: RefCell<AlignedVec<f32>> = const { RefCell::new(AlignedVec::new()) };
}

/// Whether a channels-last convolution with this geometry and these channels runs here: 3×3,
/// stride 1, undilated, padded by one (output as large as the input), a small plane, with
/// the AVX2 tiles ([`simd::strided_tiles`]), on one thread. The transformed weights (16.8 MB
/// for 512→512) stream from memory once per run for only a few GEMM rows: faster than the
/// im2col path on one thread, slower on two, where the im2col path splits its (smaller)
/// weights between the threads and the transformed ones saturate memory (the measurement:
/// docs/cpu-acc-bounds.md, "Channels-last Winograd").
pub fn applies(geo: &Geo2, c: usize, m: usize, threads: usize) -> bool {
    (
        geo.kh, geo.kw, geo.sh, geo.sw, geo.dh, geo.dw, geo.pt, geo.pl,
    ) == (3, 3, 1, 1, 1, 1, 1, 1)
        && (geo.oh, geo.ow) == (geo.h, geo.w)
        && geo.oh * geo.ow <= MAX_PIXELS
        && geo.oh > 0
        && geo.ow > 0
        && c >= MIN_CHANNELS
        && m >= MIN_CHANNELS
        && threads == 1
        && simd::strided_tiles()
        && crate::options::current().winograd
}

/// `G g Gᵀ` of one 3×3 filter (row-major), in f64.
fn filter_transform(g: &[f32]) -> [f64; POINTS] {
    let g: [f64; 9] = std::array::from_fn(|i| f64::from(g[i]));
    // G·g: 4×3.
    let mut gg = [[0f64; 3]; 4];
    for col in 0..3 {
        let (a, b, c) = (g[col], g[3 + col], g[6 + col]);
        gg[0][col] = a;
        gg[1][col] = (a + b + c) / 2.0;
        gg[2][col] = (a - b + c) / 2.0;
        gg[3][col] = c;
    }
    // (G·g)·Gᵀ: 4×4.
    let mut u = [0f64; POINTS];
    for (row, r) in gg.iter().enumerate() {
        let (a, b, c) = (r[0], r[1], r[2]);
        u[row * 4] = a;
        u[row * 4 + 1] = (a + b + c) / 2.0;
        u[row * 4 + 2] = (a - b + c) / 2.0;
        u[row * 4 + 3] = c;
    }
    u
}

/// The transformed weights of one convolution.
pub struct Plan {
    /// `U_ξ` (K = C, N = M) for each point ξ, packed as GEMM B operands.
    u: Vec<Packed>,
    c: usize,
    m: usize,
}

impl Plan {
    /// Transform ONNX weights `[M, C, 3, 3]`.
    pub fn new(w: &[f32], m: usize, c: usize) -> Result<Self> {
        if w.len() != m * c * 9 {
            return Err(BackendError::Other(
                "Winograd F(2x2, 3x3): weights do not match".into(),
            ));
        }
        // Each point's matrix straight from W (the transform of one filter recomputed per
        // point: no 16·C·M copy at load beside the packed result).
        let u = (0..POINTS)
            .map(|xi| {
                Packed::pack_b_with(c, m, |ci, j| {
                    let at = (j * c + ci) * 9;
                    filter_transform(&w[at..at + 9])[xi] as f32
                })
                .with_halves(gemm::halves_for(c))
            })
            .collect();
        Ok(Plan { u, c, m })
    }

    /// `y` (`[n, oh, ow, M]`) = `act(conv(x) + bias + r)` for `x` `[n, h, w, C]`.
    #[allow(clippy::too_many_arguments)]
    pub fn run(
        &self,
        th: &Threads,
        geo: &Geo2,
        n: usize,
        x: &[f32],
        bias: &[f32],
        act: Activation,
        r: Option<&[f32]>,
        y: &mut [f32],
    ) -> Result<()> {
        let (c, m) = (self.c, self.m);
        let (tiles_y, tiles_x) = (geo.oh.div_ceil(2), geo.ow.div_ceil(2));
        let per_image = tiles_y * tiles_x;
        let tiles = n * per_image;
        let bad = |what: &str| BackendError::Execution(format!("Winograd F(2x2, 3x3): {what}"));
        let out_len = n * geo.oh * geo.ow * m;
        if x.len() != n * geo.h * geo.w * c
            || y.len() != out_len
            || bias.len() != m
            || r.is_some_and(|r| r.len() != out_len)
        {
            return Err(bad("buffers do not match"));
        }
        // V: [tile][ξ][C], so that V_ξ's rows are 16·C apart.
        let mut v = gemm::take(&TRANSFORMED, tiles * POINTS * c);
        // M: [ξ][panel][tile][NR], one contiguous block per product task.
        let panels = m.div_ceil(NR);
        let mut prod = gemm::take(&PRODUCTS, POINTS * panels * tiles * NR);
        let res = (|| -> Result<()> {
            let image_in = geo.h * geo.w * c;
            th.chunks(&mut v[..tiles * POINTS * c], POINTS * c, |t, vt| {
                let (b, at) = (t / per_image, t % per_image);
                let img = &x[b * image_in..(b + 1) * image_in];
                input_tile(geo, c, img, at / tiles_x, at % tiles_x, vt);
                Ok(())
            })?;
            let v = &v[..tiles * POINTS * c];
            th.chunks(
                &mut prod[..POINTS * panels * tiles * NR],
                tiles * NR,
                |i, block| {
                    let (xi, p) = (i / panels, i % panels);
                    self.product(xi, p, v, tiles, block)
                        .then_some(())
                        .ok_or_else(|| bad("the tiles refused a product"))
                },
            )?;
            let prod = &prod[..POINTS * panels * tiles * NR];
            let image_out = geo.oh * geo.ow * m;
            let two_rows = 2 * geo.ow * m;
            for b in 0..n {
                let yb = &mut y[b * image_out..(b + 1) * image_out];
                let rb = r.map(|r| &r[b * image_out..(b + 1) * image_out]);
                th.chunks(yb, two_rows, |ty, rows| {
                    let res = rb.map(|r| &r[ty * two_rows..ty * two_rows + rows.len()]);
                    let first = b * per_image + ty * tiles_x;
                    let out = Out {
                        m,
                        tiles,
                        panels,
                        bias,
                        act,
                    };
                    out.tile_row(prod, first, tiles_x, geo.ow, res, rows);
                    Ok(())
                })?;
            }
            Ok(())
        })();
        gemm::give_back(&TRANSFORMED, v);
        gemm::give_back(&PRODUCTS, prod);
        res
    }

    /// `block` (`tiles` rows of [`NR`] floats) = columns `p·NR ..` of `V_ξ · U_ξ`, by the
    /// AVX2 tiles. False when they refuse.
    fn product(&self, xi: usize, p: usize, v: &[f32], tiles: usize, block: &mut [f32]) -> bool {
        let (c, m) = (self.c, self.m);
        let u = &self.u[xi];
        let halves = u.halves();
        let blocks = c.div_ceil(KC);
        for kb in 0..blocks {
            let (k0, kc) = (kb * KC, KC.min(c - kb * KC));
            let Some(panel) = u
                .block(kb, 0)
                .ok()
                .and_then(|d| d.chunks_exact(kc * NR).nth(p))
            else {
                return false;
            };
            for h in (0..NR).step_by(NR / 2) {
                let j0 = p * NR + h;
                if j0 >= m {
                    break;
                }
                let ep = TileEpilogue {
                    accumulate: kb > 0,
                    alpha: 1.0,
                    row_bias: None,
                    col_bias: None,
                    last: kb + 1 == blocks,
                    act: Activation::None,
                };
                let nr = (m - j0).min(NR / 2);
                let next = halves.next(kc, h);
                let a = v.get(xi * c + k0..).unwrap_or(&[]);
                let lda = POINTS * c;
                let out = &mut block[h..];
                let b = (&panel[halves.start(kc, h)..], halves);
                if !simd::tiles_strided(kc, a, lda, tiles, b, out, NR, nr, &ep, next) {
                    return false;
                }
            }
        }
        true
    }
}

/// `Bᵀ d B` of tile (ty, tx) of one image `x` (`[h, w, C]`), into `v` (`[ξ][C]`): the window
/// rows from `2·ty − 1`, columns from `2·tx − 1`, zero outside the image.
fn input_tile(geo: &Geo2, c: usize, x: &[f32], ty: usize, tx: usize, v: &mut [f32]) {
    let at = |i: usize, j: usize| -> Option<&[f32]> {
        let iy = (2 * ty + i).checked_sub(geo.pt).filter(|&iy| iy < geo.h)?;
        let ix = (2 * tx + j).checked_sub(geo.pl).filter(|&ix| ix < geo.w)?;
        x.get((iy * geo.w + ix) * c..(iy * geo.w + ix + 1) * c)
    };
    let d: [[Option<&[f32]>; 4]; 4] = std::array::from_fn(|i| std::array::from_fn(|j| at(i, j)));
    let val = |s: Option<&[f32]>, ch: usize| s.map_or(0.0, |s| s[ch]);
    for ch in 0..c {
        let e: [[f32; 4]; 4] = std::array::from_fn(|i| std::array::from_fn(|j| val(d[i][j], ch)));
        // Bᵀ·d, then ·B.
        let mut t = [[0f32; 4]; 4];
        for j in 0..4 {
            t[0][j] = e[0][j] - e[2][j];
            t[1][j] = e[1][j] + e[2][j];
            t[2][j] = e[2][j] - e[1][j];
            t[3][j] = e[1][j] - e[3][j];
        }
        for (i, row) in t.iter().enumerate() {
            v[(i * 4) * c + ch] = row[0] - row[2];
            v[(i * 4 + 1) * c + ch] = row[1] + row[2];
            v[(i * 4 + 2) * c + ch] = row[2] - row[1];
            v[(i * 4 + 3) * c + ch] = row[1] - row[3];
        }
    }
}

/// What the output transform reads: the products' layout, bias and activation.
struct Out<'a> {
    m: usize,
    tiles: usize,
    panels: usize,
    bias: &'a [f32],
    act: Activation,
}

impl Out<'_> {
    /// Output rows `2·ty`, `2·ty + 1` (those that exist: `rows` holds whole rows of `ow`
    /// pixels) from the tiles `first ..` of one tile row: `Aᵀ M A + bias (+ res)`, activated.
    fn tile_row(
        &self,
        prod: &[f32],
        first: usize,
        tiles_x: usize,
        ow: usize,
        res: Option<&[f32]>,
        rows: &mut [f32],
    ) {
        let m = self.m;
        let height = rows.len() / (ow * m).max(1);
        for tx in 0..tiles_x {
            let t = first + tx;
            for j in 0..m {
                let (p, l) = (j / NR, j % NR);
                let mm: [f32; POINTS] = std::array::from_fn(|xi| {
                    prod[((xi * self.panels + p) * self.tiles + t) * NR + l]
                });
                // Aᵀ·M (2×4), then ·A (2×2).
                let s: [[f32; 4]; 2] = std::array::from_fn(|k| {
                    std::array::from_fn(|q| match k {
                        0 => mm[q] + mm[4 + q] + mm[8 + q],
                        _ => mm[4 + q] - mm[8 + q] - mm[12 + q],
                    })
                });
                for (dy, sr) in s.iter().enumerate().take(height) {
                    let out = [sr[0] + sr[1] + sr[2], sr[1] - sr[2] - sr[3]];
                    for (dx, &o) in out.iter().enumerate() {
                        let ox = 2 * tx + dx;
                        if ox >= ow {
                            continue;
                        }
                        let at = (dy * ow + ox) * m + j;
                        let v = o + self.bias[j] + res.map_or(0.0, |r| r[at]);
                        rows[at] = crate::math::apply(self.act, v);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The filter transform against its definition `G g Gᵀ` with G written out.
    #[test]
    fn filter_transform_is_g_g_gt() {
        let g: Vec<f32> = (0..9).map(|i| i as f32 * 0.75 - 2.0).collect();
        let gm = [
            [1.0, 0.0, 0.0],
            [0.5, 0.5, 0.5],
            [0.5, -0.5, 0.5],
            [0.0, 0.0, 1.0],
        ];
        let u = filter_transform(&g);
        for i in 0..4 {
            for j in 0..4 {
                let mut want = 0f64;
                for a in 0..3 {
                    for b in 0..3 {
                        want += gm[i][a] * f64::from(g[a * 3 + b]) * gm[j][b];
                    }
                }
                assert!((u[i * 4 + j] - want).abs() < 1e-12, "({i}, {j})");
            }
        }
    }
}
