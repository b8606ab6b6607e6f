//! The SGEMM against a naive product: every operand source, odd shapes, threads.
use super::*;

/// A row-major view of `data`, rows `cols` long.
fn row_major(data: &[f32], cols: usize) -> MatView<'_> {
    MatView {
        data,
        rs: cols,
        cs: 1,
    }
}

/// A column-major view of `data`, columns `rows` long.
fn col_major(data: &[f32], rows: usize) -> MatView<'_> {
    MatView {
        data,
        rs: 1,
        cs: rows,
    }
}

fn naive(m: usize, n: usize, k: usize, a: &[f32], b: &[f32]) -> Vec<f32> {
    let mut c = vec![0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut s = 0f64;
            for l in 0..k {
                s += f64::from(a[i * k + l]) * f64::from(b[l * n + j]);
            }
            c[i * n + j] = s as f32;
        }
    }
    c
}

/// A row-major `rows`×`cols` matrix stored column by column.
fn column_major(rows: usize, cols: usize, x: &[f32]) -> Vec<f32> {
    let mut t = vec![0f32; rows * cols];
    for i in 0..rows {
        for j in 0..cols {
            t[j * rows + i] = x[i * cols + j];
        }
    }
    t
}

fn rand(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// Split halves hold each value where `simd::Halves` says (every K block, the last
/// one short, the last panel narrow), go back to the packed layout unchanged, leave an
/// A operand alone, and are refused by the SGEMM.
#[test]
fn split_halves_move_every_value_and_come_back() {
    let (k, n) = (KC + 37, 2 * NR + 5);
    let b: Vec<f32> = (0..k * n).map(|i| i as f32).collect();
    let view = row_major(&b, n);
    let packed = Packed::pack_b(k, n, view);
    let split = packed.clone().with_halves(simd::Halves::Split);
    assert_eq!(split.halves(), simd::Halves::Split);
    for (r, j) in (0..k).flat_map(|r| (0..n).map(move |j| (r, j))) {
        let (kb, l) = (r / KC, r % KC);
        let kc = KC.min(k - kb * KC);
        let panel = split.block(kb, j / NR).unwrap();
        let h = j % NR / simd::HALF * simd::HALF;
        let at = simd::Halves::Split.start(kc, h) + l * simd::HALF + j % simd::HALF;
        assert_eq!(panel[at], b[r * n + j], "({r}, {j})");
    }
    let back = split.clone().with_halves(simd::Halves::Interleaved);
    assert_eq!(back.data, packed.data);
    let a = Packed::pack_a(n, k, col_major(&b, n));
    assert_eq!(a.clone().with_halves(simd::Halves::Split).data, a.data);
    let mut c = vec![0f32; n];
    let x = vec![1f32; k];
    let xv = ASrc::View(row_major(&x, k));
    let th = Threads::single();
    let ep = Epilogue::default();
    let refused = sgemm(&th, 1, n, k, &xv, &BSrc::Packed(&split), &mut c, n, &ep);
    assert!(refused.is_err());
    sgemm(&th, 1, n, k, &xv, &BSrc::Packed(&back), &mut c, n, &ep).unwrap();
    let want: f64 = (0..k).map(|r| f64::from(b[r * n + 3])).sum();
    assert!(
        (f64::from(c[3]) - want).abs() <= 1e-5 * want,
        "{} vs {want}",
        c[3]
    );
}

/// Prepacked A with B packed on the fly takes four routes (small A split by columns or,
/// with a short K, by rows; large A with a narrow B split by rows; the general loop): all
/// agree with the naive product, with row biases, column biases and an activation in the
/// epilogue, at 1, 2, 3, 5 and 16 threads (small A on few panels splits rows and columns
/// when the panels are fewer than the threads).
#[test]
fn packed_a_routes_match_naive_with_epilogues() {
    let counts = [1, 2, 3, 5, 16];
    for th in counts.map(|t| Threads::new(t).unwrap()) {
        for &(m, n, k) in &[
            // Small A on 2, 1 and 6 panels (7×7, 20 and 13×13 pixels).
            (64, 49, 1179),
            (48, 20, 3000),
            (17, 169, 1200),
            (1, 1, 1),
            (7, 257, 17),
            (63, 300, 600),
            (130, 70, 1300),
            (257, 63, 700),
            (61, 3, 2900),
            (130, 600, 1300),
            (130, 600, 100),
            // Rows split between threads inside a packed panel (shares of 18 rows).
            (32, 3000, 27),
            (30, 3000, 27),
            // A narrow last panel (14×14 and 13×11 planes, 1 and 17 columns past a panel):
            // column tasks weighted by its cost.
            (128, 196, 300),
            (17, 143, 129),
            (3, 97, 640),
            (32, 113, 200),
        ] {
            let a = rand(m * k, 3);
            let b = rand(k * n, 4);
            let rb = rand(m, 5);
            let cb = rand(n, 6);
            let mut want = naive(m, n, k, &a, &b);
            for i in 0..m {
                for j in 0..n {
                    let v = want[i * n + j] + rb[i] + cb[j];
                    want[i * n + j] = if v < 0.0 { 0.0 } else { v };
                }
            }
            let pa = Packed::pack_a(m, k, row_major(&a, k));
            let bv = row_major(&b, n);
            let rows: Vec<usize> = (0..k).map(|l| l * n).collect();
            let shifted = Shifted::contiguous(&b, &rows);
            // The same matrix gathered: rows of 7 columns, 12 apart, NaN between them.
            let (cols, pitch) = (7, 12);
            let span = n.div_ceil(cols) * pitch;
            let mut wide = vec![f32::NAN; k * span];
            for l in 0..k {
                for j in 0..n {
                    wide[l * span + (j / cols) * pitch + j % cols] = b[l * n + j];
                }
            }
            let wide_rows: Vec<usize> = (0..k).map(|l| l * span).collect();
            let gathered = Shifted::gathered(&wide, &wide_rows, cols, pitch);
            let ep = Epilogue {
                row_bias: Some(&rb),
                col_bias: Some(&cb),
                act: Activation::Relu,
                ..Epilogue::default()
            };
            let sources = [
                BSrc::View(bv),
                BSrc::Shifted(shifted),
                BSrc::Shifted(gathered),
            ];
            for (bi, bsrc) in sources.iter().enumerate() {
                let mut c = vec![f32::NAN; m * n];
                sgemm(&th, m, n, k, &ASrc::Packed(&pa), bsrc, &mut c, n, &ep).unwrap();
                for (i, (x, y)) in c.iter().zip(&want).enumerate() {
                    assert!(
                        (x - y).abs() <= 1e-5 * (k as f32).sqrt() + 1e-5 * y.abs(),
                        "{m}x{n}x{k} b{bi} threads {th:?} at {i}: {x} vs {y}"
                    );
                }
            }
        }
    }
}

/// The column tasks of a small-A product: a narrow last panel (at most half a panel's
/// columns) counts as half a panel, so that a 14×14 plane's 7 panels split 3 | 3 + 1 on two
/// threads; every other width keeps the threads' even share of whole panels.
#[test]
fn column_share_weighs_a_narrow_last_panel_by_its_cost() {
    let two = Threads::new(2).unwrap();
    let three = Threads::new(3).unwrap();
    let one = Threads::single();
    // 196 columns: 6 panels and 4 columns.
    assert_eq!(blocks::column_share(&two, 196), 3);
    assert_eq!(two.share(7, 1, 2), 2, "the unweighted share this replaces");
    // A last panel of 17 columns or more is a whole panel's work: the plain share.
    for n in [49usize, 60, 64, 817, 3136] {
        let np = n.div_ceil(NR);
        assert_eq!(
            blocks::column_share(&two, n),
            two.share(np, 1, 2),
            "{n} columns"
        );
    }
    // One thread, or one panel: no split.
    assert_eq!(blocks::column_share(&one, 196), 7);
    assert_eq!(blocks::column_share(&two, 16), 1);
    // Every share is a whole number of panels, at least one and at most all.
    for n in 1..700 {
        for th in [&two, &three] {
            let per = blocks::column_share(th, n);
            assert!(per >= 1 && per <= n.div_ceil(NR).max(1), "{n}: {per}");
        }
    }
}

/// A few rows against a large packed B (the column split between threads, as for a
/// batch-1 fully connected layer or a convolution over a 7×7 plane), with biases and an
/// activation, A packed or not, accumulating onto C or not.
#[test]
fn few_rows_split_by_columns_match_naive() {
    let th = Threads::new(2).unwrap();
    for &(m, n, k) in &[
        (1, 300, 1000),
        (5, 257, 1100),
        (12, 1000, 300),
        (49, 512, 1152),
        (13, 131, 4099),
        (MC, 160, 4000),
        // A transformer's tokens against a projection; the most rows the split takes.
        (128, 768, 768),
        (COLUMN_SPLIT_ROWS, 160, 3300),
    ] {
        assert!(splits_by_columns(&th, m, n, k), "{m}x{n}x{k}");
        assert!(!splits_by_columns(&Threads::single(), m, n, k));
        let a = rand(m * k, 7);
        let b = rand(k * n, 8);
        let rb = rand(m, 9);
        let cb = rand(n, 10);
        let mut want = naive(m, n, k, &a, &b);
        for i in 0..m {
            for j in 0..n {
                want[i * n + j] = (want[i * n + j] + rb[i] + cb[j]).max(0.0);
            }
        }
        let av = row_major(&a, k);
        let pa = Packed::pack_a(m, k, av);
        let pb = Packed::pack_b(k, n, row_major(&b, n));
        let ep = Epilogue {
            row_bias: Some(&rb),
            col_bias: Some(&cb),
            act: Activation::Relu,
            ..Epilogue::default()
        };
        for asrc in [ASrc::View(av), ASrc::Packed(&pa)] {
            let mut c = vec![f32::NAN; m * n];
            sgemm(&th, m, n, k, &asrc, &BSrc::Packed(&pb), &mut c, n, &ep).unwrap();
            for (i, (x, y)) in c.iter().zip(&want).enumerate() {
                assert!(
                    (x - y).abs() <= 1e-5 * (k as f32).sqrt() + 1e-5 * y.abs(),
                    "{m}x{n}x{k} at {i}: {x} vs {y}"
                );
            }
        }
        // Onto a C of wider rows (a residual already there), the columns past N untouched.
        let ldc = n + 3;
        let c0 = rand(m * ldc, 15);
        let acc = Epilogue {
            accumulate: true,
            col_bias: Some(&cb),
            act: Activation::Relu,
            ..Epilogue::default()
        };
        let mut c = c0.clone();
        sgemm(
            &th,
            m,
            n,
            k,
            &ASrc::View(av),
            &BSrc::Packed(&pb),
            &mut c,
            ldc,
            &acc,
        )
        .unwrap();
        let plain = naive(m, n, k, &a, &b);
        check_c(&c, &c0, (m, n, k, ldc), true, "accumulate", |i, j, base| {
            (plain[i * n + j] + base + cb[j]).max(0.0)
        });
    }
    // Below the weights' threshold, or past the rows' bound, the rows are split.
    assert!(!splits_by_columns(&th, 49, 256, 256));
    assert!(!splits_by_columns(&th, COLUMN_SPLIT_ROWS + 1, 768, 768));
}

/// A row-major A with more rows than one A panel takes the in-place tiles (where the CPU
/// runs them), against a packed B (both half layouts) or a B view (row- or column-major,
/// packed whole first): against the plain product with alpha, a column bias, an
/// activation in the tile and one after it, accumulation onto C, C rows wider than N, one
/// and two threads; a split B is refused where the tiles do not run (a few rows, a
/// transposed A, a row bias).
#[test]
fn in_place_tiles_match_naive_and_split_b_needs_them() {
    let acts = [
        Activation::Clip {
            min: -0.5,
            max: 0.75,
        },
        Activation::Sigmoid,
    ];
    for th in [Threads::single(), Threads::new(2).unwrap()] {
        for &(m, n, k) in &[(13, 5, 3), (61, 33, 97), (130, 70, 300), (19, 24, 260)] {
            let (a, b) = (rand(m * k, 3), rand(k * n, 4));
            let ldc = n + 3;
            let c0 = rand(m * ldc, 5);
            let bias = rand(n, 6);
            let plain = naive(m, n, k, &a, &b);
            let av = row_major(&a, k);
            let bv = row_major(&b, n);
            let interleaved = Packed::pack_b(k, n, bv);
            let split = interleaved.clone().with_halves(simd::Halves::Split);
            let bt = column_major(k, n, &b);
            let btv = col_major(&bt, k);
            let sources = [
                BSrc::Packed(&interleaved),
                BSrc::Packed(&split),
                BSrc::View(bv),
                BSrc::View(btv),
            ];
            for (act, accumulate) in acts.into_iter().zip([true, false]) {
                let ep = Epilogue {
                    alpha: 0.5,
                    accumulate,
                    col_bias: Some(&bias),
                    act,
                    ..Epilogue::default()
                };
                assert_eq!(in_place_tiles(m, av.cs, &ep), simd::strided_tiles());
                for (bi, bsrc) in sources.iter().enumerate() {
                    let mut c = c0.clone();
                    let got = sgemm(&th, m, n, k, &ASrc::View(av), bsrc, &mut c, ldc, &ep);
                    if bi == 1 && !simd::strided_tiles() {
                        assert!(got.is_err());
                        continue;
                    }
                    got.unwrap();
                    let what = format!("b{bi} acc {accumulate}");
                    check_c(&c, &c0, (m, n, k, ldc), accumulate, &what, |i, j, base| {
                        crate::math::apply(act, 0.5 * plain[i * n + j] + base + bias[j])
                    });
                }
            }
            // Where the in-place tiles do not run, a split B is refused: a few rows, a
            // transposed A, a row bias.
            let (at, rb) = (column_major(m, k, &a), vec![1f32; m]);
            let with_rb = Epilogue {
                row_bias: Some(&rb),
                ..Epilogue::default()
            };
            let refusals = [
                (MR, row_major(&a, k), Epilogue::default()),
                (m, col_major(&at, m), Epilogue::default()),
                (m, av, with_rb),
            ];
            for (rows, a_view, ep) in refusals {
                let mut c = vec![0f32; m * n];
                let split_b = BSrc::Packed(&split);
                let got = sgemm(
                    &th,
                    rows,
                    n,
                    k,
                    &ASrc::View(a_view),
                    &split_b,
                    &mut c,
                    n,
                    &ep,
                );
                assert!(got.is_err(), "{rows} rows, A column step {}", a_view.cs);
            }
        }
    }
}

#[test]
fn sgemm_matches_naive_for_odd_sizes_and_every_operand_kind() {
    // (The padding columns of hand-laid panels are NaN: they must never reach C.)
    for th in [Threads::single(), Threads::new(2).unwrap()] {
        for &(m, n, k) in &[
            (1, 1, 1),
            (3, 7, 17),
            (7, 17, 3),
            (17, 63, 257),
            (63, 257, 7),
            (13, 300, 600),
            (130, 20, 33),
        ] {
            let a = rand(m * k, 1);
            let b = rand(k * n, 2);
            let want = naive(m, n, k, &a, &b);
            let av = row_major(&a, k);
            let bv = row_major(&b, n);
            let pa = Packed::pack_a(m, k, av);
            let pb = Packed::pack_b(k, n, bv);
            // B laid out by hand at `panel_offset` (what the Winograd transform does).
            let mut panels = vec![f32::NAN; k * n.div_ceil(NR) * NR];
            for r in 0..k {
                for j in 0..n {
                    panels[panel_offset(k, n, r, j)] = b[r * n + j];
                }
            }
            // B stored column-major (a transposed view, as attention's Kᵀ is read).
            let bt = column_major(k, n, &b);
            let btv = col_major(&bt, k);
            let kinds = [
                BSrc::View(bv),
                BSrc::Packed(&pb),
                BSrc::Panels(&panels),
                BSrc::View(btv),
            ];
            // A stored column-major (a transposed view, as Gemm's transA reads it).
            let at = column_major(m, k, &a);
            let atv = col_major(&at, m);
            let asrcs = [ASrc::View(av), ASrc::Packed(&pa), ASrc::View(atv)];
            for (ai, asrc) in asrcs.iter().enumerate() {
                for (bi, bsrc) in kinds.iter().enumerate() {
                    let mut c = vec![f32::NAN; m * n];
                    sgemm(&th, m, n, k, asrc, bsrc, &mut c, n, &Epilogue::default()).unwrap();
                    for (x, y) in c.iter().zip(&want) {
                        assert!(
                            (x - y).abs() <= 1e-5 * (k as f32).sqrt() + 1e-5 * y.abs(),
                            "{m}x{n}x{k} a{ai} b{bi}: {x} vs {y}"
                        );
                    }
                }
            }
        }
    }
}

/// A few rows (1 to 256, odd counts) against a B of more than 2^17 floats take the column
/// split of the in-place tiles (one block on one thread; panels outermost where A fits in
/// L2 and K has several blocks, a last panel of 20 columns among them): against the plain
/// product with a column bias and an activation, both half layouts, C rows wider than N; with two threads and
/// accumulation onto C the row split runs instead, and 257 rows are past the split.
#[test]
fn few_rows_against_a_large_b_match_naive() {
    for th in [Threads::single(), Threads::new(2).unwrap()] {
        for &(m, n, k) in &[
            (13, 1031, 131),
            (64, 509, 263),
            (29, 532, 600),
            (97, 2053, 64),
            (256, 521, 257),
            (257, 521, 257),
        ] {
            assert_eq!(
                few_rows::takes(&th, m, n, k, &Epilogue::default()),
                m <= few_rows::FEW_ROWS
            );
            let (a, b) = (rand(m * k, 11), rand(k * n, 12));
            let ldc = n + 5;
            let c0 = rand(m * ldc, 13);
            let bias = rand(n, 14);
            let plain = naive(m, n, k, &a, &b);
            let av = row_major(&a, k);
            let interleaved = Packed::pack_b(k, n, row_major(&b, n));
            let split = interleaved.clone().with_halves(simd::Halves::Split);
            for (pb, accumulate) in [(&interleaved, false), (&split, true)] {
                let ep = Epilogue {
                    accumulate,
                    col_bias: Some(&bias),
                    act: Activation::Relu,
                    ..Epilogue::default()
                };
                let mut c = c0.clone();
                let got = sgemm(
                    &th,
                    m,
                    n,
                    k,
                    &ASrc::View(av),
                    &BSrc::Packed(pb),
                    &mut c,
                    ldc,
                    &ep,
                );
                if pb.halves() == simd::Halves::Split && !simd::strided_tiles() {
                    assert!(got.is_err());
                    continue;
                }
                got.unwrap();
                let what = format!("acc {accumulate}");
                check_c(&c, &c0, (m, n, k, ldc), accumulate, &what, |i, j, base| {
                    (plain[i * n + j] + base + bias[j]).max(0.0)
                });
            }
        }
    }
}

/// The panels-outermost walk visits every half of every panel in every K block once, each
/// panel's K blocks in order before the next panel, and hands each visit the offset of the
/// next one's half (0 after the last).
#[test]
fn panels_outermost_walk_covers_every_half_once_and_prefetches_the_next() {
    let (k, n) = (600, 532);
    let packed = Packed::pack_b(k, n, row_major(&rand(k * n, 3), n));
    for halves in [simd::Halves::Interleaved, simd::Halves::Split] {
        let packed = packed.clone().with_halves(halves);
        let (data, _) = packed.panels();
        let mut seen = Vec::new();
        few_rows::each_half_panel_by_columns(
            packed.panels(),
            k,
            n,
            simd::WIDE,
            (2, 17),
            |hp, next| {
                let at = data.len() - hp.b.0.len();
                seen.push((hp.j0, hp.kb, hp.nr, at, next));
                Ok(())
            },
        )
        .unwrap();
        // Panels 2..16 have two halves of 16, the last (16) one 20-column whole: 3 K blocks.
        assert_eq!(seen.len(), (14 * 2 + 1) * 3);
        for w in seen.windows(2) {
            assert_eq!(w[0].4, w[1].3.wrapping_sub(w[0].3), "{halves:?} {w:?}");
            let (p0, p1) = (w[0].0 / NR, w[1].0 / NR);
            assert!(
                p1 == p0 || (p1 == p0 + 1 && w[0].1 == 2 && w[1].1 == 0),
                "{w:?}"
            );
        }
        assert_eq!(
            seen.last().map(|v| (v.0, v.1, v.2, v.4)),
            Some((512, 2, 20, 0))
        );
        let mut cols: Vec<_> = seen.iter().map(|v| (v.0, v.1)).collect();
        cols.sort_unstable();
        cols.dedup();
        assert_eq!(cols.len(), seen.len());
        // A range past the last panel (16) visits only the panels there are.
        let mut past = Vec::new();
        few_rows::each_half_panel_by_columns(
            packed.panels(),
            k,
            n,
            simd::WIDE,
            (15, 40),
            |hp, _| {
                past.push(hp.j0);
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(past, [480, 496, 480, 496, 480, 496, 512, 512, 512]);
    }
}

/// C (`m` rows of `ldc`, the first `n` columns computed) against `want(i, j, base)`, where
/// `base` is C's value before the product when it accumulates (else 0), within a tolerance
/// growing with `k`; the columns past `n` untouched.
fn check_c(
    c: &[f32],
    c0: &[f32],
    (m, n, k, ldc): (usize, usize, usize, usize),
    accumulate: bool,
    what: &str,
    want: impl Fn(usize, usize, f32) -> f32,
) {
    for i in 0..m {
        for j in 0..ldc {
            let (x, at) = (c[i * ldc + j], i * ldc + j);
            if j >= n {
                assert_eq!(x, c0[at], "{m}x{n}x{k}: ({i}, {j}) written");
                continue;
            }
            let base = if accumulate { c0[at] } else { 0.0 };
            let y = want(i, j, base);
            assert!(
                (x - y).abs() <= 1e-5 * (k as f32).sqrt() + 1e-5 * y.abs(),
                "{m}x{n}x{k} {what}: ({i}, {j}) {x} vs {y}"
            );
        }
    }
}

/// The column-split products copy their blocks into C by columns, each block on the thread
/// that computed it, where there is a block per thread (`copy_column_blocks`): at 2 and 3
/// threads C is bit for bit the 1-thread C, on a C of wider rows whose extra columns stay
/// untouched, for 1, 3, 17 and 64 rows over 1, 7, 13 and 55×55 pixels (the small ones run
/// on one thread; the large ones split by columns, or by rows where K < M).
#[test]
fn column_split_copy_matches_one_thread_bit_for_bit() {
    let one = Threads::single();
    for &(m, k) in &[(1usize, 700usize), (3, 400), (17, 64), (64, 16), (16, 64)] {
        for n in [1usize, 7, 13, 55 * 55] {
            let a = rand(m * k, 7);
            let b = rand(k * n, 8);
            let rb = rand(m, 9);
            let pa = Packed::pack_a(m, k, row_major(&a, k));
            let ep = Epilogue {
                row_bias: Some(&rb),
                act: Activation::Relu,
                ..Epilogue::default()
            };
            let ldc = n + 5;
            let run = |th: &Threads| packed_into_marked(th, (m, n, k), &pa, &b, ldc, &ep);
            let want = run(&one);
            for (i, v) in want.iter().enumerate() {
                if i % ldc >= n {
                    assert_eq!(*v, -7.0, "{m}x{n}x{k}: column {} written", i % ldc);
                }
            }
            for t in [2, 3] {
                let got = run(&Threads::new(t).unwrap());
                let same = got
                    .iter()
                    .zip(&want)
                    .all(|(x, y)| x.to_bits() == y.to_bits());
                assert!(same, "{m}x{n}x{k} at {t} threads differs from 1 thread");
            }
        }
    }
}

/// `sgemm` of packed `pa` (m×k) and row-major `b` (k×n) into a C of row stride `ldc`
/// filled with −7 first (so that columns past `n` show any stray write).
fn packed_into_marked(
    th: &Threads,
    (m, n, k): (usize, usize, usize),
    pa: &Packed,
    b: &[f32],
    ldc: usize,
    ep: &Epilogue<'_>,
) -> Vec<f32> {
    let mut c = vec![-7.0f32; m * ldc];
    sgemm(
        th,
        m,
        n,
        k,
        &ASrc::Packed(pa),
        &BSrc::View(row_major(b, n)),
        &mut c,
        ldc,
        ep,
    )
    .unwrap();
    c
}

/// The column split of the small-A path writing C's columns in place (`small_a_columns`):
/// at 2 and 3 threads C is bit for bit the 1-thread C and within rounding of a naive
/// product with both biases and the activation (ReLU in the tile, a sigmoid after each
/// block), the columns of C past `n` untouched; shapes with one and several K blocks
/// (K = 331, 512, 700, 1153), tasks of one and several groups of `NB` panels (N = 3025), a
/// narrow last panel (N = 200, 529, 3025) and rows in one or several A panels.
#[test]
fn small_a_column_split_in_place_matches_one_thread_and_naive() {
    let one = Threads::single();
    let shapes = [
        (1usize, 700usize, 3025usize),
        (5, 331, 1500),
        (17, 64, 3025),
        (24, 97, 97 * 16),
        (13, 1153, 200),
        (64, 512, 529),
    ];
    for &(m, k, n) in &shapes {
        let two = Threads::new(2).unwrap();
        let np = n.div_ceil(NR);
        assert!(
            m * n * k >= PARALLEL_MACS
                && m * k <= SMALL_A
                && in_place_columns(&two, np, column_share(&two, n)),
            "{m}x{n}x{k} does not take the in-place split at 2 threads"
        );
        let a = rand(m * k, 17);
        let b = rand(k * n, 18);
        let rb = rand(m, 19);
        let cb = rand(n, 20);
        let pa = Packed::pack_a(m, k, row_major(&a, k));
        let prod = naive(m, n, k, &a, &b);
        for act in [Activation::Relu, Activation::Sigmoid] {
            let ep = Epilogue {
                row_bias: Some(&rb),
                col_bias: Some(&cb),
                act,
                ..Epilogue::default()
            };
            let ldc = n + 3;
            let run = |th: &Threads| packed_into_marked(th, (m, n, k), &pa, &b, ldc, &ep);
            let want = run(&one);
            for i in 0..m {
                for j in 0..ldc {
                    let v = want[i * ldc + j];
                    if j >= n {
                        assert_eq!(v, -7.0, "{m}x{n}x{k}: column {j} written");
                        continue;
                    }
                    let x = prod[i * n + j] + rb[i] + cb[j];
                    let r = match act {
                        Activation::Relu => x.max(0.0),
                        _ => 1.0 / (1.0 + (-x).exp()),
                    };
                    let tol = 1e-4 * (1.0 + (k as f32).sqrt());
                    assert!(
                        (v - r).abs() <= tol,
                        "{m}x{n}x{k} {act:?} ({i},{j}): {v} vs {r}"
                    );
                }
            }
            for t in [2, 3] {
                let got = run(&Threads::new(t).unwrap());
                let same = got
                    .iter()
                    .zip(&want)
                    .all(|(x, y)| x.to_bits() == y.to_bits());
                assert!(
                    same,
                    "{m}x{n}x{k} {act:?} at {t} threads differs from 1 thread"
                );
            }
            if m == 1 {
                // One row with a stride shorter than the row (never used between rows).
                let mut c = vec![-7.0f32; n];
                let (a, b) = (&ASrc::Packed(&pa), &BSrc::View(row_major(&b, n)));
                sgemm(&two, 1, n, k, a, b, &mut c, 1, &ep).unwrap();
                let same = c.iter().zip(&want).all(|(x, y)| x.to_bits() == y.to_bits());
                assert!(same, "one row of {n}x{k} {act:?} with a short stride");
            }
        }
    }
}

/// A B view whose rows lie further apart than its width (a convolution's input planes, the
/// next block's rows fetched while the tiles run): the small-A and the blocked paths, over
/// several column and K blocks, on one and two threads, against the naive product.
#[test]
fn strided_view_blocks_match_naive() {
    for th in [1, 2].map(|t| Threads::new(t).unwrap()) {
        for &(m, n, k, pitch) in &[
            (40, 600, 530, 637),
            (400, 600, 530, 611),
            (13, 257, 1, 300),
            (64, 3136 / 4, 64, 3136 / 4 + 5),
            (2100, 40, 300, 41),
        ] {
            let a = rand(m * k, 7);
            let b = rand(k * n, 8);
            let mut spaced = vec![f32::NAN; k * pitch];
            for l in 0..k {
                spaced[l * pitch..l * pitch + n].copy_from_slice(&b[l * n..(l + 1) * n]);
            }
            let want = naive(m, n, k, &a, &b);
            let pa = Packed::pack_a(m, k, row_major(&a, k));
            let bv = MatView {
                data: &spaced,
                rs: pitch,
                cs: 1,
            };
            let mut c = vec![f32::NAN; m * n];
            let ep = Epilogue::default();
            sgemm(
                &th,
                m,
                n,
                k,
                &ASrc::Packed(&pa),
                &BSrc::View(bv),
                &mut c,
                n,
                &ep,
            )
            .unwrap();
            for (i, (x, y)) in c.iter().zip(&want).enumerate() {
                assert!(
                    (x - y).abs() <= 1e-5 * (k as f32).sqrt() + 1e-5 * y.abs(),
                    "{m}x{n}x{k} threads {th:?} at {i}: {x} vs {y}"
                );
            }
        }
    }
}
