//! The micro-kernels against plain sums and against each other.

use super::*;
use crate::isa::Isa;

/// A test operand: `len` values of a short ramp (period 19) over `div`.
fn ramp_a(len: usize, div: f32) -> Vec<f32> {
    (0..len)
        .map(|i| ((i * 7 % 19) as f32 - 9.0) / div)
        .collect()
}

/// A second test operand: `len` values of another ramp (period 23) over `div`.
fn ramp_b(len: usize, div: f32) -> Vec<f32> {
    (0..len)
        .map(|i| ((i * 13 % 23) as f32 - 11.0) / div)
        .collect()
}

/// The panel `b` (`kc` rows of [`NR`]) with its two halves one after the other.
fn halves_apart(b: &[f32], kc: usize) -> Vec<f32> {
    (0..kc * NR)
        .map(|i| {
            let (h, k, j) = (i / (kc * HALF), i / HALF % kc, i % HALF);
            b[k * NR + h * HALF + j]
        })
        .collect()
}

/// The in-place tile (AVX-512, or AVX2 at row offsets of six) against a plain sum for
/// every row range of a panel, column counts around the vector width (masked tails, and
/// inputs that end right after the last run), with biases and an activation; short
/// inputs and row ranges past the panel are refused.
#[test]
fn in_place_tiles_match_a_plain_sum() {
    let k = 13;
    let a: Vec<f32> = ramp_a(k * MR, 8.0);
    let x: Vec<f32> = ramp_b(400, 5.0);
    let offs: Vec<usize> = (0..k).map(|t| (t * 29) % 331).collect();
    let rb: Vec<f32> = (0..MR).map(|r| r as f32 * 0.1 - 0.5).collect();
    let act = Activation::Clip {
        min: -1.0,
        max: 2.5,
    };
    for (row0, mr) in (0..MR).flat_map(|r0| (1..=MR - r0).map(move |mr| (r0, mr))) {
        for nr in [1, 7, 16, 17, 31, 32] {
            let ldc = 40;
            let ep = TileEpilogue {
                accumulate: false,
                alpha: 1.0,
                row_bias: Some(&rb[row0..]),
                col_bias: None,
                last: true,
                act,
            };
            let rows = InPlaceRows::new(&offs);
            let last = offs.iter().max().unwrap();
            let avx2 = avx2_in_use();
            // The whole input, then one that ends right after the furthest row's nr
            // floats (AVX2 reads its last columns through a copy).
            for x in [&x[..], &x[..last + nr]] {
                let mut c = vec![f32::NAN; (mr - 1) * ldc + nr];
                let ran = microkernel_in_place(&a, row0, x, &rows, &mut c, ldc, mr, nr, &ep);
                assert_eq!(ran, has_avx512() || (avx2 && row0 % ROW_STEP == 0));
                if !ran {
                    continue;
                }
                for r in 0..mr {
                    for j in 0..nr {
                        let dot: f32 = (0..k).map(|t| a[t * MR + row0 + r] * x[offs[t] + j]).sum();
                        let want = act.apply_simple(dot + rb[row0 + r]);
                        let got = c[r * ldc + j];
                        assert!(
                            (got - want).abs() <= 1e-4 * want.abs().max(1.0),
                            "rows {row0}+{mr} x {nr} ({r}, {j})"
                        );
                    }
                }
            }
            let mut c = vec![f32::NAN; (mr - 1) * ldc + nr];
            // A row reaching past `x` is refused, not read; so are rows past the panel.
            let short = &x[..last + nr - 1];
            assert!(!microkernel_in_place(
                &a, row0, short, &rows, &mut c, ldc, mr, nr, &ep
            ));
            assert!(!microkernel_in_place(
                &a,
                MR - mr + 1,
                &x,
                &rows,
                &mut c,
                ldc,
                mr,
                nr,
                &ep
            ));
        }
    }
}

/// The tiles reading A in place (rows `lda` apart, and through a table of K offsets)
/// against a plain sum, for every row count up to three tiles (tiles of five or six
/// rows, each count of fewer than six with its own kernel), columns around the vector
/// widths, with a column bias, an activation and accumulation onto C, from a panel with
/// its halves interleaved and the same panel split. Where the CPU lacks AVX2 they refuse.
#[test]
fn strided_and_offset_tiles_match_a_plain_sum() {
    let (kc, lda) = (37, 41);
    let a: Vec<f32> = ramp_a(20 * lda + kc, 8.0);
    let b: Vec<f32> = ramp_b(kc * NR, 5.0);
    // The same panel with its halves one after the other.
    let split: Vec<f32> = halves_apart(&b, kc);
    let offs: Vec<usize> = (0..kc).map(|t| (t * 5) % lda).collect();
    let cb: Vec<f32> = (0..NR).map(|j| j as f32 * 0.1 - 0.5).collect();
    let act = Activation::Clip {
        min: -1.0,
        max: 2.5,
    };
    for rows in 1..=18 {
        for nr in [1, 8, 13, 16, 17, 24] {
            for accumulate in [false, true] {
                let ep = TileEpilogue {
                    accumulate,
                    alpha: 1.0,
                    row_bias: None,
                    col_bias: Some(&cb),
                    last: true,
                    act,
                };
                let ldc = 30;
                let c0: Vec<f32> = (0..rows * ldc).map(|i| (i % 5) as f32 * 0.25).collect();
                let cases = [false, true]
                    .map(|o| [(o, Halves::Interleaved), (o, Halves::Split)])
                    .into_iter()
                    .flatten();
                for (offsets, halves) in cases {
                    if offsets && nr > HALF {
                        continue;
                    }
                    let panel = match halves {
                        Halves::Interleaved => (&b[..], halves),
                        Halves::Split => (&split[..], halves),
                    };
                    let mut c = c0.clone();
                    let ran = if offsets {
                        tiles_offsets(kc, &a, lda, &offs, rows, panel, &mut c, ldc, nr, &ep)
                    } else {
                        tiles_strided(kc, &a, lda, rows, panel, &mut c, ldc, nr, &ep, 0)
                    };
                    assert_eq!(ran, strided_tiles());
                    if !ran {
                        continue;
                    }
                    for r in 0..rows {
                        for j in 0..ldc {
                            let got = c[r * ldc + j];
                            if j >= nr {
                                assert_eq!(got, c0[r * ldc + j], "column {j} past {nr}");
                                continue;
                            }
                            let at = |t: usize| if offsets { offs[t] } else { t };
                            let dot: f32 =
                                (0..kc).map(|t| a[r * lda + at(t)] * b[t * NR + j]).sum();
                            let base = if accumulate { c0[r * ldc + j] } else { 0.0 };
                            let want = act.apply_simple(dot + base + cb[j]);
                            assert!(
                                (got - want).abs() <= 1e-4 * want.abs().max(1.0),
                                "rows {rows} nr {nr} acc {accumulate} offsets {offsets} \
                                 {halves:?} at ({r}, {j}): {got} vs {want}"
                            );
                        }
                    }
                }
            }
        }
    }
}

/// The dispatched micro-kernel (AVX-512 or AVX2 here) and the portable one agree on every
/// tile shape, epilogue and accumulation mode.
#[test]
fn dispatched_and_portable_kernels_agree() {
    let kc = 37;
    let a: Vec<f32> = (0..kc * MR)
        .map(|i| ((i * 7) % 13) as f32 * 0.25 - 1.5)
        .collect();
    let b: Vec<f32> = (0..kc * NR)
        .map(|i| ((i * 5) % 11) as f32 * 0.5 - 2.5)
        .collect();
    let rb: Vec<f32> = (0..MR).map(|i| i as f32 - 2.0).collect();
    let cb: Vec<f32> = (0..NR).map(|i| 1.0 - i as f32 * 0.1).collect();
    let ldc = NR + 3;
    for act in [
        Activation::None,
        Activation::Relu,
        Activation::Clip {
            min: -3.0,
            max: 4.0,
        },
        Activation::LeakyRelu { alpha: 0.2 },
    ] {
        for (mr, nr) in [
            (MR, NR),
            (1, 1),
            (5, 17),
            (6, 16),
            (3, 31),
            (2, 8),
            (7, 32),
            (11, 5),
            (12, 16),
            (9, 23),
            (4, 16),
            (10, 9),
        ] {
            for accumulate in [false, true] {
                let ep = TileEpilogue {
                    accumulate,
                    alpha: 0.5,
                    row_bias: Some(&rb),
                    col_bias: Some(&cb),
                    last: true,
                    act,
                };
                let init: Vec<f32> = (0..MR * ldc).map(|i| (i % 5) as f32).collect();
                for row0 in [0, ROW_STEP].into_iter().filter(|r| r + mr <= MR) {
                    let mut slow = init.clone();
                    portable_kernel(kc, &a, row0, &b, &mut slow, ldc, mr, nr, &ep);
                    // The portable kernel itself against a plain sum.
                    if !accumulate {
                        let (r, j) = (mr - 1, nr - 1);
                        let dot: f32 = (0..kc).map(|k| a[k * MR + row0 + r] * b[k * NR + j]).sum();
                        let want = act.apply_simple(0.5 * dot + rb[r] + cb[j]);
                        let got = slow[r * ldc + j];
                        assert!((got - want).abs() <= 1e-4 * want.abs().max(1.0));
                    }
                    for isa in [Isa::Avx512, Isa::Avx2]
                        .into_iter()
                        .filter(|i| i.available())
                    {
                        // With accumulation, the tile also prefetches lines of B (a
                        // hint that must change nothing): none, part of kc, or all, as
                        // one run or as runs of 24 floats 40 apart (fewer than asked
                        // where they leave the slice).
                        let ahead = match accumulate {
                            true => &b[..(mr * 16 * kc / MR).min(b.len())],
                            false => &[][..],
                        };
                        let runs = Fetch {
                            data: ahead,
                            run: 24,
                            pitch: 40,
                            runs: nr,
                        };
                        for fetch in [Fetch::run(ahead), runs, Fetch::NONE] {
                            let mut fast = init.clone();
                            assert!(microkernel_on(
                                isa, kc, &a, row0, &b, &mut fast, ldc, mr, nr, &ep, fetch
                            ));
                            for (i, (x, y)) in fast.iter().zip(&slow).enumerate() {
                                assert!(
                                    (x - y).abs() <= 1e-4 * y.abs().max(1.0),
                                    "{isa:?} {act:?} {mr}x{nr} row0 {row0} at {i}: {x} vs {y}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }
    // Bounds are checked, not trusted.
    let mut c = vec![0f32; 4];
    let ep = TileEpilogue {
        accumulate: false,
        alpha: 1.0,
        row_bias: None,
        col_bias: None,
        last: true,
        act: Activation::None,
    };
    assert!(!microkernel(kc, &a, &b, &mut c, ldc, MR, NR, &ep));
    // A tile may not run past its panel or start off the row step.
    let mut c = vec![0f32; MR * ldc];
    assert!(!microkernel_rows(
        kc, &a, ROW_STEP, &b, &mut c, ldc, 7, NR, &ep
    ));
    assert!(!microkernel_rows(kc, &a, 3, &b, &mut c, ldc, 2, NR, &ep));
}

/// The tiles that read A in place, at the depths and row counts of the transformers'
/// projections (one K block of 256, ViT's 197 rows: a mix of six- and five-row tiles, each
/// six-row one prefetching its share of the next half-panel and its C tile) and at odd ones
/// (K of 1 and 131, one to 13 rows), with prefetch offsets near, far and wrapping: the same
/// sums as a plain loop, columns past `nr` and rows past `rows` untouched.
#[test]
fn strided_tiles_with_prefetch_shares_match_a_plain_sum() {
    let lda = 263;
    let a: Vec<f32> = ramp_a(197 * lda, 8.0);
    for kc in [1, 131, 256] {
        let b: Vec<f32> = ramp_b(kc * HALF, 5.0);
        for rows in [1, 5, 6, 7, 11, 13, 64, 197] {
            for (nr, accumulate) in [(16, true), (16, false), (11, true)] {
                for prefetch in [0, kc * HALF, usize::MAX - 4096] {
                    let ep = TileEpilogue {
                        accumulate,
                        alpha: 1.0,
                        row_bias: None,
                        col_bias: None,
                        last: true,
                        act: Activation::None,
                    };
                    let ldc = 19;
                    let c0: Vec<f32> = (0..(rows + 1) * ldc)
                        .map(|i| (i % 5) as f32 * 0.25)
                        .collect();
                    let mut c = c0.clone();
                    let panel = (&b[..], Halves::Split);
                    let ran =
                        tiles_strided(kc, &a, lda, rows, panel, &mut c, ldc, nr, &ep, prefetch);
                    assert_eq!(ran, strided_tiles());
                    if !ran {
                        continue;
                    }
                    for r in 0..=rows {
                        for j in 0..ldc {
                            let (got, old) = (c[r * ldc + j], c0[r * ldc + j]);
                            if j >= nr || r == rows {
                                assert_eq!(got, old, "kc {kc} rows {rows}: ({r}, {j}) written");
                                continue;
                            }
                            let dot: f32 = (0..kc).map(|t| a[r * lda + t] * b[t * HALF + j]).sum();
                            let want = dot + if accumulate { old } else { 0.0 };
                            assert!(
                                (got - want).abs() <= 1e-4 * want.abs().max(1.0),
                                "kc {kc} rows {rows} nr {nr} acc {accumulate} pf {prefetch} \
                                 at ({r}, {j}): {got} vs {want}"
                            );
                        }
                    }
                }
            }
        }
    }
}

/// The AVX-512 tiles reading A in place against a plain sum: row counts across one to
/// three twelve-row tiles (uneven splits, single rows), column counts from 1 to a whole
/// panel around the 16-lane halves, depths from 1 to past a vector's width, both halves'
/// layouts, with a column bias, an activation and accumulation onto C; the columns past
/// `nr` are left alone. Without AVX-512 they refuse; bad slices and a row bias are refused.
#[test]
fn wide_strided_tiles_match_a_plain_sum() {
    let lda = 41;
    let cb: Vec<f32> = (0..NR).map(|j| j as f32 * 0.1 - 0.5).collect();
    let act = Activation::Clip {
        min: -1.5,
        max: 2.5,
    };
    for kc in [1, 3, 16, 37] {
        let a: Vec<f32> = ramp_a(36 * lda + kc, 8.0);
        let b: Vec<f32> = ramp_b(kc * NR, 5.0);
        let split: Vec<f32> = halves_apart(&b, kc);
        for rows in [1, 2, 5, 7, 11, 12, 13, 17, 23, 24, 25, 31, 36] {
            for nr in [1, 3, 15, 16, 17, 24, 31, 32] {
                for accumulate in [false, true] {
                    let ep = TileEpilogue {
                        accumulate,
                        alpha: 1.0,
                        row_bias: None,
                        col_bias: Some(&cb),
                        last: true,
                        act,
                    };
                    let ldc = 35;
                    let c0: Vec<f32> = (0..rows * ldc).map(|i| (i % 5) as f32 * 0.25).collect();
                    for halves in [Halves::Interleaved, Halves::Split] {
                        let panel = match halves {
                            Halves::Interleaved => &b[..],
                            Halves::Split => &split[..],
                        };
                        let mut c = c0.clone();
                        let ran = tiles_strided_wide(
                            kc,
                            &a,
                            lda,
                            rows,
                            (panel, halves),
                            &mut c,
                            ldc,
                            nr,
                            &ep,
                        );
                        assert_eq!(ran, wide_strided_tiles());
                        if !ran {
                            continue;
                        }
                        for r in 0..rows {
                            for j in 0..ldc {
                                let got = c[r * ldc + j];
                                if j >= nr {
                                    assert_eq!(got, c0[r * ldc + j], "column {j} past {nr}");
                                    continue;
                                }
                                let dot: f32 =
                                    (0..kc).map(|t| a[r * lda + t] * b[t * NR + j]).sum();
                                let base = if accumulate { c0[r * ldc + j] } else { 0.0 };
                                let want = act.apply_simple(dot + base + cb[j]);
                                assert!(
                                    (got - want).abs() <= 1e-4 * want.abs().max(1.0),
                                    "kc {kc} rows {rows} nr {nr} acc {accumulate} {halves:?} \
                                     at ({r}, {j}): {got} vs {want}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }
    // Refusals: A, B or C one value short, a row bias, more columns than a panel.
    let (kc, rows, nr, ldc) = (16, 13, 32, 32);
    let a = vec![1f32; (rows - 1) * lda + kc];
    let b = vec![1f32; kc * NR];
    let mut c = vec![0f32; (rows - 1) * ldc + nr];
    let rb = vec![0f32; rows];
    let plain = TileEpilogue {
        accumulate: false,
        alpha: 1.0,
        row_bias: None,
        col_bias: None,
        last: true,
        act: Activation::None,
    };
    let with_rb = TileEpilogue {
        row_bias: Some(&rb),
        ..plain
    };
    let il = Halves::Interleaved;
    let short_a = &a[..a.len() - 1];
    let short_b = &b[..b.len() - 1];
    assert!(!tiles_strided_wide(
        kc,
        short_a,
        lda,
        rows,
        (&b, il),
        &mut c,
        ldc,
        nr,
        &plain
    ));
    assert!(!tiles_strided_wide(
        kc,
        &a,
        lda,
        rows,
        (short_b, il),
        &mut c,
        ldc,
        nr,
        &plain
    ));
    let cl = c.len();
    assert!(!tiles_strided_wide(
        kc,
        &a,
        lda,
        rows,
        (&b, il),
        &mut c[..cl - 1],
        ldc,
        nr,
        &plain
    ));
    assert!(!tiles_strided_wide(
        kc,
        &a,
        lda,
        rows,
        (&b, il),
        &mut c,
        ldc,
        nr,
        &with_rb
    ));
    assert!(!tiles_strided_wide(
        kc,
        &a,
        lda,
        rows,
        (&b, il),
        &mut c,
        40,
        NR + 1,
        &plain
    ));
    // Whole and in bounds: it runs where the CPU has AVX-512, and sums K ones.
    let ran = tiles_strided_wide(kc, &a, lda, rows, (&b, il), &mut c, ldc, nr, &plain);
    assert_eq!(ran, wide_strided_tiles());
    if ran {
        assert!(c.iter().all(|&v| v == kc as f32));
    }
}

/// The tiles reading A in place with a sigmoid or swish in their store (see
/// [`strided_tiles_apply`]), AVX-512's ([`tiles_strided_wide`]) and AVX2's (its
/// `column_strided`, called directly so that it is tested wherever the CPU has AVX2):
/// bit-equal to the same tiles without it followed by the tier's vector function on each
/// stored value, across row counts of one to several tiles, masked column tails (and
/// AVX2's 3×24 tile), depths 1 and past a vector, accumulation onto C (a residual) or
/// not; a K block that is not the last applies nothing.
/// A tier's tiles (the stored C for an activation) and its vector function on one value.
#[cfg(target_arch = "x86_64")]
type Tier<'t> = (
    Isa,
    Box<dyn Fn(Activation) -> Vec<f32> + 't>,
    fn(Activation, f32) -> f32,
);

#[test]
fn strided_tiles_apply_sigmoids_and_swishes_in_their_store() {
    let acts = [
        Activation::Silu,
        Activation::HardSwish,
        Activation::Sigmoid,
        Activation::HardSigmoid {
            alpha: 0.2,
            beta: 0.5,
        },
    ];
    for act in acts {
        assert_eq!(
            strided_tiles_apply(act),
            wide_strided_tiles() || strided_tiles()
        );
    }
    assert!(strided_tiles_apply(Activation::Relu));
    assert!(!strided_tiles_apply(Activation::Tanh));
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::*;
        let (lda, ldc) = (37, 34);
        let cb: Vec<f32> = (0..NR).map(|j| j as f32 * 0.3 - 4.0).collect();
        for kc in [1, 17] {
            let a: Vec<f32> = ramp_a(25 * lda + kc, 2.0);
            let b: Vec<f32> = ramp_b(kc * NR, 3.0);
            for rows in [1, 5, 7, 12, 13, 25] {
                let c0: Vec<f32> = (0..rows * ldc).map(|i| (i % 9) as f32 - 4.0).collect();
                for nr in [1, 3, 16, 17, 24, 32] {
                    for (accumulate, last) in [(false, true), (true, true), (true, false)] {
                        let ep_of = |act: Activation| TileEpilogue {
                            accumulate,
                            alpha: 1.0,
                            row_bias: None,
                            col_bias: Some(&cb),
                            last,
                            act,
                        };
                        // Each tier the CPU has: its tiles and its vector function.
                        let mut tiers: Vec<Tier<'_>> = Vec::new();
                        if wide_strided_tiles() {
                            let run = |act: Activation| {
                                let mut c = c0.clone();
                                let bh = (&b[..], Halves::Interleaved);
                                let ep = ep_of(act);
                                assert!(tiles_strided_wide(
                                    kc, &a, lda, rows, bh, &mut c, ldc, nr, &ep
                                ));
                                c
                            };
                            // SAFETY: AVX-512F is present (`wide_strided_tiles`).
                            let f = |act: Activation, x: f32| unsafe {
                                let v =
                                    super::avx512::Act512::new(act).apply_all(_mm512_set1_ps(x));
                                _mm512_cvtss_f32(v)
                            };
                            tiers.push((Isa::Avx512, Box::new(run), f));
                        }
                        if Isa::Avx2.available() && nr <= WIDE {
                            let run = |act: Activation| {
                                let mut c = c0.clone();
                                let ep = ep_of(act);
                                // SAFETY: AVX2 and FMA are present (checked); rows r < rows
                                // of A hold kc floats at r·lda; the tiles read B's kc steps
                                // of 32 (16 and, past 16 columns, 8 more at 16) inside `b`;
                                // C holds `rows` rows of ldc >= nr; the column bias holds
                                // NR values; the prefetch address is never read.
                                unsafe {
                                    super::avx2::column_strided(
                                        kc,
                                        a.as_ptr(),
                                        lda,
                                        rows,
                                        b.as_ptr(),
                                        (NR, HALF),
                                        c.as_mut_ptr(),
                                        ldc,
                                        nr,
                                        &ep,
                                        b.as_ptr(),
                                    )
                                };
                                c
                            };
                            // SAFETY: AVX2 and FMA are present (checked).
                            let f = |act: Activation, x: f32| unsafe {
                                let v = super::avx2::Act256::new(act).apply_all(_mm256_set1_ps(x));
                                _mm256_cvtss_f32(v)
                            };
                            tiers.push((Isa::Avx2, Box::new(run), f));
                        }
                        for (isa, run, vector) in &tiers {
                            let plain = run(Activation::None);
                            for act in acts {
                                let got = run(act);
                                for (i, (&g, &p)) in got.iter().zip(&plain).enumerate() {
                                    let want = match last && i % ldc < nr {
                                        true => vector(act, p),
                                        false => p,
                                    };
                                    assert_eq!(
                                        g.to_bits(),
                                        want.to_bits(),
                                        "{isa:?} {act:?} kc {kc} rows {rows} nr {nr} \
                                         acc {accumulate} last {last} at {i}: {g} vs {want}"
                                    );
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// `act(x)` by its definition, in f64 (the sigmoids and swishes too).
fn act_by_definition(act: Activation, x: f32) -> f32 {
    let v = x as f64;
    let sig = 1.0 / (1.0 + (-v).exp());
    let y = match act {
        Activation::Silu => v * sig,
        Activation::Sigmoid => sig,
        Activation::HardSwish => v * (v / 6.0 + 0.5).clamp(0.0, 1.0),
        Activation::HardSigmoid { alpha, beta } => (alpha as f64 * v + beta as f64).clamp(0.0, 1.0),
        _ => return act.apply_simple(x),
    };
    y as f32
}

/// The panel-pair tiles ([`tiles_strided_pairs`], six rows by four columns, eight by three)
/// against the one-panel tiles ([`tiles_strided_wide`]) run on each of the two panels in
/// turn (the same FMA order per value, so the same bits) and against a plain sum: depths 1
/// to 64 (a short K, MobileNets' 16-40, odd ones), 1 to 61 rows (one partial tile to ten),
/// 33 to 64 columns (a third vector masked or whole, a fourth masked or whole), a
/// `ldc` past the columns, onto earlier contents or not, with every kind of activation the
/// store applies (in-kernel, and the sigmoids and swishes); then the refusals.
#[test]
#[allow(clippy::needless_range_loop)]
fn panel_pair_tiles_match_one_panel_at_a_time_and_a_plain_sum() {
    let acts = [
        Activation::None,
        Activation::Relu,
        Activation::Clip {
            min: -1.5,
            max: 2.5,
        },
        Activation::LeakyRelu { alpha: 0.1 },
        Activation::Silu,
        Activation::HardSwish,
        Activation::Sigmoid,
        Activation::HardSigmoid {
            alpha: 0.2,
            beta: 0.5,
        },
    ];
    let cb: Vec<f32> = (0..2 * NR).map(|j| j as f32 * 0.05 - 0.7).collect();
    let mut case = 0;
    for kc in [1, 3, 16, 17, 24, 40, 64] {
        let lda = kc + 3;
        let rows_max = 61;
        let a: Vec<f32> = ramp_a((rows_max - 1) * lda + kc, 8.0);
        // Two interleaved panels, one after the other.
        let b: Vec<f32> = ramp_b(2 * kc * NR, 5.0);
        for rows in [1, 5, 6, 7, 8, 9, 13, 24, 61] {
            for nr in [33, 40, 47, 48, 49, 63, 64] {
                case += 1;
                let act = acts[case % acts.len()];
                let accumulate = case % 3 == 0;
                let ep = TileEpilogue {
                    accumulate,
                    alpha: 1.0,
                    row_bias: None,
                    col_bias: Some(&cb),
                    last: true,
                    act,
                };
                let ldc = nr + 5;
                let c0: Vec<f32> = (0..rows * ldc).map(|i| (i % 7) as f32 * 0.25).collect();
                let mut c = c0.clone();
                let ran = tiles_strided_pairs(kc, &a, lda, rows, &b, &mut c, ldc, nr, &ep);
                assert_eq!(ran, wide_strided_tiles(), "kc {kc} rows {rows} nr {nr}");
                if !ran {
                    continue;
                }
                // The one-panel tiles, the second panel's with its share of the bias.
                let mut one = c0.clone();
                let il = Halves::Interleaved;
                assert!(tiles_strided_wide(
                    kc,
                    &a,
                    lda,
                    rows,
                    (&b, il),
                    &mut one,
                    ldc,
                    NR,
                    &ep
                ));
                let ep2 = TileEpilogue {
                    col_bias: Some(&cb[NR..]),
                    ..ep
                };
                let second = &b[kc * NR..];
                assert!(tiles_strided_wide(
                    kc,
                    &a,
                    lda,
                    rows,
                    (second, il),
                    &mut one[NR..],
                    ldc,
                    nr - NR,
                    &ep2
                ));
                for r in 0..rows {
                    for j in 0..ldc {
                        let at = r * ldc + j;
                        let (got, same) = (c[at], one[at]);
                        let what = format!("kc {kc} rows {rows} nr {nr} {act:?} at ({r}, {j})");
                        assert_eq!(got.to_bits(), same.to_bits(), "{what}: {got} vs {same}");
                        if j >= nr {
                            assert_eq!(got, c0[at], "{what}: past the columns");
                            continue;
                        }
                        let (p, jj) = (j / NR, j % NR);
                        let dot: f32 = (0..kc)
                            .map(|t| a[r * lda + t] * b[p * kc * NR + t * NR + jj])
                            .sum();
                        let base = if accumulate { c0[at] } else { 0.0 };
                        let want = act_by_definition(act, dot + base + cb[j]);
                        assert!(
                            (got - want).abs() <= 1e-4 * want.abs().max(1.0),
                            "{what}: {got} vs {want}"
                        );
                    }
                }
            }
        }
    }
    // Refusals: A, B or C one value short, a row bias, a scale, 32 or 65 columns, no depth.
    let (kc, rows, nr, lda, ldc) = (16, 13, 64, 16, 64);
    let a = vec![1f32; (rows - 1) * lda + kc];
    let b = vec![1f32; 2 * kc * NR];
    let mut c = vec![0f32; (rows - 1) * ldc + nr];
    let rb = vec![0f32; rows];
    let plain = TileEpilogue {
        accumulate: false,
        alpha: 1.0,
        row_bias: None,
        col_bias: None,
        last: true,
        act: Activation::None,
    };
    let with_rb = TileEpilogue {
        row_bias: Some(&rb),
        ..plain
    };
    let scaled = TileEpilogue {
        alpha: 2.0,
        ..plain
    };
    let (al, bl, cl) = (a.len() - 1, b.len() - 1, c.len() - 1);
    assert!(!tiles_strided_pairs(
        kc,
        &a[..al],
        lda,
        rows,
        &b,
        &mut c,
        ldc,
        nr,
        &plain
    ));
    assert!(!tiles_strided_pairs(
        kc,
        &a,
        lda,
        rows,
        &b[..bl],
        &mut c,
        ldc,
        nr,
        &plain
    ));
    assert!(!tiles_strided_pairs(
        kc,
        &a,
        lda,
        rows,
        &b,
        &mut c[..cl],
        ldc,
        nr,
        &plain
    ));
    assert!(!tiles_strided_pairs(
        kc, &a, lda, rows, &b, &mut c, ldc, nr, &with_rb
    ));
    assert!(!tiles_strided_pairs(
        kc, &a, lda, rows, &b, &mut c, ldc, nr, &scaled
    ));
    assert!(!tiles_strided_pairs(
        kc, &a, lda, rows, &b, &mut c, ldc, NR, &plain
    ));
    assert!(!tiles_strided_pairs(
        kc,
        &a,
        lda,
        rows,
        &b,
        &mut c,
        80,
        2 * NR + 1,
        &plain
    ));
    assert!(!tiles_strided_pairs(
        0, &a, lda, rows, &b, &mut c, ldc, nr, &plain
    ));
    // Whole and in bounds: it runs where the CPU has AVX-512, and sums K ones.
    let ran = tiles_strided_pairs(kc, &a, lda, rows, &b, &mut c, ldc, nr, &plain);
    assert_eq!(ran, wide_strided_tiles());
    if ran {
        assert!(c.iter().all(|&v| v == kc as f32));
    }
}
