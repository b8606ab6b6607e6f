//! Tests of the Winograd F(4×4, 3×3) path against a direct convolution, and of its
//! intrinsics transforms against the safe bodies.

use super::*;

/// The 1-D identity `y = Aᵀ[(G g) ⊙ (Bᵀ d)]` equals the correlation
/// `yᵢ = Σₖ dᵢ₊ₖ gₖ` on every basis input and filter (so on all, by linearity).
#[test]
#[allow(clippy::needless_range_loop)]
fn transforms_compute_the_1d_correlation() {
    for dk in 0..ALPHA {
        for gk in 0..3 {
            let mut d = [[0f32; LANES]; ALPHA];
            d[dk] = [1.0; LANES];
            let bd = bt(&d);
            let mut prod = [[0f32; LANES]; ALPHA];
            for i in 0..ALPHA {
                prod[i] = [bd[i][0] * G[i][gk] as f32; LANES];
            }
            let y = at(&prod);
            for (i, yi) in y.iter().enumerate() {
                let want = if dk == i + gk { 1.0 } else { 0.0 };
                assert!((yi[0] - want).abs() < 1e-6, "d{dk} g{gk} y{i}: {}", yi[0]);
            }
        }
    }
}

/// A small deterministic generator of values in [-1, 1).
struct Rng(u64);
impl Rng {
    fn unit(&mut self) -> f32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
    fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.unit()).collect()
    }
}

fn geo(h: usize, w: usize, pads: [usize; 4]) -> Geo2 {
    let [pt, pl, pb, pr] = pads;
    Geo2 {
        h,
        w,
        kh: 3,
        kw: 3,
        sh: 1,
        sw: 1,
        dh: 1,
        dw: 1,
        pt,
        pl,
        oh: (h + pt + pb).saturating_sub(2),
        ow: (w + pl + pr).saturating_sub(2),
    }
}

/// Direct convolution in f64 (at the geometry's dilation), with bias and activation; the
/// reference of the undilated and the dilated tests.
#[allow(clippy::too_many_arguments)]
pub(super) fn direct(
    g: &Geo2,
    n: usize,
    c: usize,
    m: usize,
    x: &[f32],
    w: &[f32],
    bias: &[f32],
    act: Activation,
) -> Vec<f32> {
    let mut y = Vec::with_capacity(n * m * g.oh * g.ow);
    for b in 0..n {
        for co in 0..m {
            for oy in 0..g.oh {
                for ox in 0..g.ow {
                    let mut acc = f64::from(bias[co]);
                    for ci in 0..c {
                        for ky in 0..3 {
                            for kx in 0..3 {
                                let iy = (oy + ky * g.dh).checked_sub(g.pt);
                                let ix = (ox + kx * g.dw).checked_sub(g.pl);
                                let (Some(iy), Some(ix)) = (iy, ix) else {
                                    continue;
                                };
                                if iy >= g.h || ix >= g.w {
                                    continue;
                                }
                                let xv = x[((b * c + ci) * g.h + iy) * g.w + ix];
                                let wv = w[((co * c + ci) * 3 + ky) * 3 + kx];
                                acc += f64::from(xv) * f64::from(wv);
                            }
                        }
                    }
                    y.push(crate::math::apply(act, acc as f32));
                }
            }
        }
    }
    y
}

/// Largest `|got − want| / (1 + max |want|)` of one case.
#[allow(clippy::too_many_arguments)]
fn case(
    rng: &mut Rng,
    th: &Threads,
    n: usize,
    c: usize,
    m: usize,
    h: usize,
    w: usize,
    pads: [usize; 4],
    act: Activation,
) -> f32 {
    let g = geo(h, w, pads);
    let x = rng.vec(n * c * h * w);
    let wt = rng.vec(m * c * 9);
    let bias = rng.vec(m);
    let want = direct(&g, n, c, m, &x, &wt, &bias, act);
    let plan = Plan::new(&wt, m, c).unwrap();
    let mut got = vec![f32::NAN; want.len()];
    plan.run(th, &g, n, &x, Some(&bias), act, &mut got).unwrap();
    // The scale is the pre-activation output's (a clipped output hides its magnitude).
    let raw = direct(&g, n, c, m, &x, &wt, &bias, Activation::None);
    let scale = 1.0 + raw.iter().fold(0f32, |a, v| a.max(v.abs()));
    got.iter()
        .zip(&want)
        .map(|(a, b)| (a - b).abs() / scale)
        .fold(0f32, |a, e| {
            assert!(!e.is_nan(), "NaN: a pixel was not written");
            a.max(e)
        })
}

/// Tolerance of the Winograd path against a direct f64 convolution: max abs error <=
/// `TOL` × (1 + max |pre-activation reference|). Measured: at most 8.5e-6 (inputs, weights
/// and bias in [-1, 1), up to 64 input channels; typically 2e-6 to 5e-6); the bound
/// leaves a margin of ~6×.
const TOL: f32 = 5e-5;

/// The path forced on small and odd sizes (every border-tile shape), batches, pads
/// (asymmetric too), channel counts and activations, on 1 and 2 threads.
#[test]
fn matches_direct_convolution_on_odd_sizes() {
    let mut rng = Rng(7);
    let acts = [
        Activation::None,
        Activation::Relu,
        Activation::Clip {
            min: -0.5,
            max: 0.75,
        },
        Activation::LeakyRelu { alpha: 0.1 },
        Activation::Sigmoid,
    ];
    let two = Threads::new(2).unwrap();
    let mut worst = 0f32;
    let mut k = 0;
    for &(h, w) in &[(1, 1), (3, 3), (7, 7), (17, 17), (5, 9), (63, 63)] {
        for &c in &[1, 3, 17, 64] {
            for &m in &[1, 3, 17, 64] {
                if (h * w > 300 && (c < 17 || m < 17)) || (h * w > 1000 && c * m > 17 * 64) {
                    continue;
                }
                for &pads in &[[0, 0, 0, 0], [1, 1, 1, 1], [0, 1, 2, 1], [2, 0, 1, 2]] {
                    if h + pads[0] + pads[2] < 3 || w + pads[1] + pads[3] < 3 {
                        continue;
                    }
                    k += 1;
                    let n = 1 + k % 2;
                    let act = acts[k % acts.len()];
                    let th = if k % 3 == 0 { &two } else { &Threads::single() };
                    let e = case(&mut rng, th, n, c, m, h, w, pads, act);
                    assert!(e <= TOL, "{h}x{w} c{c} m{m} pads {pads:?} {act:?}: {e}");
                    worst = worst.max(e);
                }
            }
        }
    }
    eprintln!("winograd F(4,3): worst relative error {worst:e} over {k} cases");
}

/// The AVX2 intrinsics transforms against the safe bodies on the same block: the V
/// matrices and the output (both destinations, partial border tiles, every activation
/// the intrinsics take, NaN kept by Relu) agree within rounding.
#[test]
fn intrinsics_transforms_match_the_safe_bodies() {
    if !simd::has_avx2_fma() {
        return;
    }
    let mut rng = Rng(5);
    for (n, c, m, h, w) in [(1, 3, 5, 14, 14), (2, 17, 9, 7, 11), (1, 8, 16, 30, 29)] {
        let g = geo(h, w, [1, 1, 1, 1]);
        let tiles = Tiles::new(&g, n);
        let count = tiles.total.min(40);
        let blk = Block {
            first: tiles.total - count,
            count,
            pitch: count.div_ceil(simd::NR) * simd::NR,
        };
        let len = n * c * tiles.padded_plane();
        let mut xp = vec![0f32; len + simd::WINOGRAD_SLACK];
        let x = rng.vec(n * c * h * w);
        pad_input(&Threads::single(), &g, &tiles, &x, &mut xp[..len]).unwrap();
        let vs = xi_stride(c, blk.pitch);
        let (mut fast, mut safe) = (vec![0f32; XI * vs], vec![0f32; XI * vs]);
        simd::winograd_input(&Threads::single(), &tiles, c, &blk, &xp, &mut fast);
        simd::winograd_input_portable(&tiles, c, &blk, &xp, &mut safe);
        // Shared out over channels between threads: the same values, bit for bit.
        let mut shared = vec![0f32; XI * vs];
        let three = Threads::new(3).unwrap();
        simd::winograd_input(&three, &tiles, c, &blk, &xp, &mut shared);
        assert!(fast
            .iter()
            .zip(&shared)
            .all(|(a, b)| a.to_bits() == b.to_bits()));
        for (i, (a, b)) in fast.iter().zip(&safe).enumerate() {
            assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "V {i}: {a} vs {b}");
        }

        let ms = xi_stride(m, blk.pitch);
        let mut mo = rng.vec(XI * ms);
        mo[3] = f32::NAN;
        let bias = rng.vec(m);
        for act in [
            Activation::None,
            Activation::Relu,
            Activation::Clip {
                min: -0.5,
                max: 0.75,
            },
            Activation::LeakyRelu { alpha: 0.1 },
        ] {
            let ep = OutEpilogue {
                m,
                bias: Some(&bias),
                act,
            };
            let size = n * m * g.oh * g.ow;
            let (mut yf, mut ys) = (vec![0f32; size], vec![0f32; size]);
            simd::winograd_output(&g, &tiles, &blk, &ep, 0..m, &mo, &mut Dest::Output(&mut yf));
            simd::winograd_output_portable(
                &g,
                &tiles,
                &blk,
                &ep,
                0..m,
                &mo,
                &mut Dest::Output(&mut ys),
            );
            if n == 1 {
                // A part of the channels (as a thread writes it), into its planes only.
                let part = (m - 1) * g.oh * g.ow;
                let (mut pf, mut ps) = (vec![0f32; part], vec![0f32; part]);
                let mut df = Dest::Output(&mut pf);
                simd::winograd_output(&g, &tiles, &blk, &ep, 1..m, &mo, &mut df);
                let mut ds = Dest::Output(&mut ps);
                simd::winograd_output_portable(&g, &tiles, &blk, &ep, 1..m, &mo, &mut ds);
                assert_eq!(pf[..], yf[g.oh * g.ow..size], "channels 1.. {act:?}");
                for (p, q) in pf.iter().zip(&ps) {
                    assert!((p - q).abs() <= 1e-5 * (1.0 + q.abs()), "part: {p} vs {q}");
                }
            }
            let strips = m * blk.pitch * TILE * TILE;
            let (mut sf, mut ss) = (vec![0f32; strips], vec![0f32; strips]);
            simd::winograd_output(&g, &tiles, &blk, &ep, 0..m, &mo, &mut Dest::Strips(&mut sf));
            simd::winograd_output_portable(
                &g,
                &tiles,
                &blk,
                &ep,
                0..m,
                &mo,
                &mut Dest::Strips(&mut ss),
            );
            // The safe body fills the strips of lanes past the block's end too; the
            // intrinsics leave them (nothing reads them).
            let groups = blk.count.div_ceil(LANES);
            for (what, a, b) in [("output", &yf, &ys), ("strips", &sf, &ss)] {
                for (i, (p, q)) in a.iter().zip(b.iter()).enumerate() {
                    if what == "strips"
                        && (i % STRIP) / TILE + (i / (TILE * STRIP) % groups) * LANES >= blk.count
                    {
                        continue;
                    }
                    let same =
                        (p.is_nan() && q.is_nan()) || (p - q).abs() <= 1e-5 * (1.0 + q.abs());
                    assert!(same, "{what} {i} {act:?}: {p} vs {q}");
                }
            }
        }
    }
}

/// Many blocks (on 2 threads: the per-block buffers and the copy-out) and a batch.
#[test]
fn many_blocks_on_threads() {
    let mut rng = Rng(11);
    let two = Threads::new(2).unwrap();
    for (n, h, w) in [(2, 40, 37), (1, 70, 66)] {
        let e = case(
            &mut rng,
            &two,
            n,
            16,
            24,
            h,
            w,
            [1, 1, 1, 1],
            Activation::Relu,
        );
        assert!(e <= TOL, "{n}x{h}x{w}: {e}");
        let e = case(
            &mut rng,
            &Threads::single(),
            n,
            16,
            8,
            h,
            w,
            [1, 0, 0, 1],
            Activation::None,
        );
        assert!(e <= TOL, "{n}x{h}x{w}: {e}");
    }
}

/// One block shared by 2 and 3 threads (its transforms split over channel ranges) gives
/// the single thread's result bit for bit (the arithmetic is the same), and that result
/// matches the direct convolution; planes of one block (13×13), of one shared block on
/// threads (27×27 with c ≤ m, 55×55) and of blocks in parallel (27×27 with c > m),
/// channel counts prime and not.
#[test]
fn threads_split_one_block_bit_identically() {
    let mut rng = Rng(13);
    let threads = [Threads::new(2).unwrap(), Threads::new(3).unwrap()];
    for (h, c, m) in [
        (1, 16, 17),
        (5, 37, 16),
        (13, 64, 131),
        (13, 17, 2),
        (14, 16, 64),
        (27, 31, 67),
        (27, 67, 31),
        (55, 16, 64),
    ] {
        let g = geo(h, h, [1, 1, 1, 1]);
        let x = rng.vec(c * h * h);
        let wt = rng.vec(m * c * 9);
        let bias = rng.vec(m);
        let plan = Plan::new(&wt, m, c).unwrap();
        let size = m * g.oh * g.ow;
        let mut one = vec![f32::NAN; size];
        let act = Activation::Relu;
        plan.run(&Threads::single(), &g, 1, &x, Some(&bias), act, &mut one)
            .unwrap();
        let want = direct(&g, 1, c, m, &x, &wt, &bias, act);
        let raw = direct(&g, 1, c, m, &x, &wt, &bias, Activation::None);
        let scale = 1.0 + raw.iter().fold(0f32, |a, v| a.max(v.abs()));
        for (a, b) in one.iter().zip(&want) {
            assert!(
                (a - b).abs() / scale <= TOL,
                "{h}x{h} c{c} m{m}: {a} vs {b}"
            );
        }
        for th in &threads {
            let mut got = vec![f32::NAN; size];
            plan.run(th, &g, 1, &x, Some(&bias), act, &mut got).unwrap();
            let same = got
                .iter()
                .zip(&one)
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "{h}x{h} c{c} m{m} on {} threads", th.count());
        }
    }
}

/// The 2-D filter transform agrees with the 1-D one applied twice (G g Gᵀ).
#[test]
fn filter_transform_is_separable() {
    let g: Vec<f32> = (0..9).map(|i| i as f32 - 3.5).collect();
    let u = filter_transform(&g);
    // Row 5 / column 5 pick the last filter row / column.
    assert!((u[5 * ALPHA + 5] - f64::from(g[8])).abs() < 1e-12);
    assert!((u[0] - f64::from(g[0]) / 16.0).abs() < 1e-12);
}

/// The padded planes equal a naive zero-padded copy (input `(iy, ix)` at `(iy + pt, ix + pl)`,
/// zeros elsewhere, columns past the last window left out) on planes from 1×1 to 56×56,
/// odd and prime sides, every pad up to 2: the zeros stored past each row's gap are
/// overwritten by the next row, none spill out of the plane, and every other float is set
/// (the buffer starts as NaN).
#[test]
fn padded_planes_match_a_naive_copy() {
    let mut rng = Rng(11);
    for &(h, w) in &[
        (1, 1),
        (1, 7),
        (7, 1),
        (7, 7),
        (13, 11),
        (14, 14),
        (2, 3),
        (56, 56),
    ] {
        for &pads in &[
            [0, 0, 0, 0],
            [1, 1, 1, 1],
            [0, 1, 2, 1],
            [2, 0, 1, 2],
            [2, 2, 2, 2],
        ] {
            if h + pads[0] + pads[2] < 3 || w + pads[1] + pads[3] < 3 {
                continue;
            }
            let g = geo(h, w, pads);
            let tiles = Tiles::new(&g, 1);
            let (pw, len) = (tiles.pitch, tiles.padded_plane());
            let src = rng.vec(h * w);
            let mut got = vec![f32::NAN; len];
            pad_plane(&g, pw, &src, &mut got);
            for (i, v) in got.iter().enumerate() {
                let (r, col) = (i / pw, i % pw);
                let iy = r.checked_sub(g.pt).filter(|&y| y < h);
                let ix = col.checked_sub(g.pl).filter(|&x| x < w);
                let want = match (iy, ix) {
                    (Some(y), Some(x)) => src[y * w + x],
                    _ => 0.0,
                };
                assert_eq!(
                    v.to_bits(),
                    want.to_bits(),
                    "{h}x{w} pads {pads:?}: row {r} column {col}"
                );
            }
        }
    }
}

/// The whole batch's padding shared out in runs of planes between 2 and 3 threads equals
/// the one-thread padding bit for bit (runs that end mid-batch, a last short run, planes
/// too few to split), and every float of the buffer is written.
#[test]
fn padding_runs_on_threads_match_one_thread() {
    let mut rng = Rng(12);
    for &(n, c, h, w) in &[
        (1, 128, 14, 14),
        (2, 37, 13, 11),
        (1, 3, 56, 56),
        (3, 1, 7, 7),
    ] {
        let g = geo(h, w, [1, 1, 1, 1]);
        let tiles = Tiles::new(&g, n);
        let len = n * c * tiles.padded_plane();
        let x = rng.vec(n * c * h * w);
        let mut want = vec![f32::NAN; len];
        pad_input(&Threads::single(), &g, &tiles, &x, &mut want).unwrap();
        assert!(want.iter().all(|v| !v.is_nan()), "n{n} c{c} {h}x{w}");
        for t in [2, 3] {
            let mut got = vec![f32::NAN; len];
            pad_input(&Threads::new(t).unwrap(), &g, &tiles, &x, &mut got).unwrap();
            let same = got
                .iter()
                .zip(&want)
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "n{n} c{c} {h}x{w} threads {t}");
        }
    }
}

/// The products of a block go out in runs on several threads only where each is small:
/// DenseNet's 128→32 on 16 tiles in runs (two per thread on two threads), 256→256 one at a
/// time, one thread always one at a time; every run count covers the 36.
#[test]
fn small_products_go_out_in_runs() {
    let two = Threads::new(2).unwrap();
    let three = Threads::new(3).unwrap();
    assert_eq!(products_per_item(&Threads::single(), 32 * 16 * 128), 1);
    assert_eq!(products_per_item(&two, 256 * 16 * 256), 1);
    assert_eq!(products_per_item(&two, 32 * 16 * 128), 9);
    for macs in [1, 100, 32 * 16 * 128, 64 * 32 * 64, 1 << 20] {
        for th in [&two, &three] {
            let per = products_per_item(th, macs);
            assert!((1..=XI).contains(&per), "{macs}: {per}");
        }
    }
}
