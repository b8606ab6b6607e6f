use super::*;

/// A deterministic generator of centered 8-bit values.
fn values(n: usize, seed: u64) -> Vec<i16> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 33) % 511) as i16 - 255
        })
        .collect()
}

fn check(m: usize, k: usize, n: usize) {
    let a_raw = values(m * k, 1 + (m * 31 + k * 7 + n) as u64);
    let b_raw = values(k * n, 2 + (m + k * 13 + n * 5) as u64);
    let b = QPackedB::pack(k, n, |kk, j| b_raw[kk * n + j]).expect("pack");
    let lda = b.depth_padded() + 3;
    let mut a = vec![0i16; m * lda];
    for i in 0..m {
        a[i * lda..i * lda + k].copy_from_slice(&a_raw[i * k..(i + 1) * k]);
    }
    let ldc = n + 2;
    let mut c = vec![-7i32; m * ldc];
    assert!(qgemm(&a, lda, m, &b, &mut c, ldc));
    for i in 0..m {
        for j in 0..n {
            let want: i32 = (0..k)
                .map(|kk| i32::from(a_raw[i * k + kk]) * i32::from(b_raw[kk * n + j]))
                .sum();
            assert_eq!(c[i * ldc + j], want, "m {m} k {k} n {n} at ({i}, {j})");
        }
        for j in n..ldc {
            assert_eq!(c[i * ldc + j], -7, "wrote past column {n}");
        }
    }
}

#[test]
fn sums_are_exact_on_odd_shapes() {
    for &(m, k, n) in &[
        (1, 1, 1),
        (1, 2, 16),
        (3, 7, 5),
        (4, 16, 16),
        (5, 17, 17),
        (13, 31, 33),
        (2, 576, 1),
        (37, 288, 40),
        (64, 1152, 97),
    ] {
        check(m, k, n);
    }
}

#[test]
fn extreme_operands_do_not_saturate() {
    let (m, k, n) = (5, 1001, 19);
    let b = QPackedB::pack(k, n, |_, _| -255).expect("pack");
    let a = vec![-255i16; m * b.depth_padded()];
    let a = a
        .chunks(b.depth_padded())
        .flat_map(|r| {
            r.iter()
                .enumerate()
                .map(|(i, &v)| if i < k { v } else { 0 })
        })
        .collect::<Vec<_>>();
    let mut c = vec![0i32; m * n];
    assert!(qgemm(&a, b.depth_padded(), m, &b, &mut c, n));
    assert!(c.iter().all(|&v| v == 255 * 255 * k as i32));
}

#[test]
fn short_slices_are_refused() {
    let b = QPackedB::pack(3, 2, |_, _| 1).expect("pack");
    let mut c = vec![0i32; 4];
    assert!(!qgemm(&[0i16; 5], 4, 2, &b, &mut c, 2));
    assert!(!qgemm(&[0i16; 8], 4, 2, &b, &mut c[..3], 2));
    assert!(!qgemm(&[0i16; 8], 3, 2, &b, &mut c, 2));
}

/// Every tier's tile (those this CPU has) gives the portable tile's sums, for every row
/// count a tile takes.
#[test]
fn portable_tile_matches_the_vector_tiles() {
    let k = 37;
    let b_raw = values(k * QNR, 9);
    let b = QPackedB::pack(k, QNR, |kk, j| b_raw[kk * QNR + j]).expect("pack");
    let kp = b.depth_padded();
    let mut a = values(MR_MAX * kp, 10);
    for row in a.chunks_mut(kp) {
        row[k..].fill(0);
    }
    for isa in Int8Isa::ALL.into_iter().filter(|t| t.available()) {
        for r in 1..=tile_rows(isa) {
            let mut portable = [[0i32; QNR]; MR_MAX];
            portable_tile(&a, kp, r, kp, b.panel(0), &mut portable);
            let mut dispatched = [[-1i32; QNR]; MR_MAX];
            tile_sums(isa, &a, kp, r, kp, b.panel(0), &mut dispatched);
            assert_eq!(portable[..r], dispatched[..r], "{} rows {r}", isa.name());
            assert!(
                dispatched[r..].iter().flatten().all(|&v| v == -1),
                "{} wrote past row {r}",
                isa.name()
            );
            for (rr, sums) in portable.iter().enumerate().take(r) {
                for (j, &s) in sums.iter().enumerate() {
                    let want: i32 = (0..k)
                        .map(|kk| i32::from(a[rr * kp + kk]) * i32::from(b_raw[kk * QNR + j]))
                        .sum();
                    assert_eq!(s, want);
                }
            }
        }
    }
}

/// A B filled panel by panel through `zeroed`/`panels_mut`/`packed_at` (and reshaped to
/// other sizes, odd depths included) gives the sums of one packed by `pack`.
#[test]
fn panels_filled_in_place_match_pack() {
    let mut b = QPackedB::zeroed(1, 1).expect("zeroed");
    for (m, k, n) in [(1, 1, 1), (4, 3, 17), (5, 8, 16), (3, 37, 33), (2, 2, 1)] {
        let a_raw = values(m * k, 9 + k as u64);
        let b_raw = values(k * n, 11 + n as u64);
        // Stale values first, to check that reshaping zeroes the padding that matters.
        assert!(b.reshape(k + 5, n + 9));
        b.panels_mut().fill(77);
        assert!(b.reshape(k, n));
        let len = b.panel_len();
        for (p, panel) in b.panels_mut().chunks_mut(len).enumerate() {
            for kk in 0..k {
                for jj in 0..QNR {
                    let j = p * QNR + jj;
                    if j < n {
                        panel[packed_at(kk, jj)] = b_raw[kk * n + j];
                    }
                }
            }
        }
        let kp = b.depth_padded();
        let mut a = vec![0i16; m * kp];
        for i in 0..m {
            a[i * kp..i * kp + k].copy_from_slice(&a_raw[i * k..(i + 1) * k]);
        }
        let mut c = vec![0i32; m * n];
        assert!(qgemm(&a, kp, m, &b, &mut c, n));
        for i in 0..m {
            for j in 0..n {
                let want: i32 = (0..k)
                    .map(|kk| i32::from(a_raw[i * k + kk]) * i32::from(b_raw[kk * n + j]))
                    .sum();
                assert_eq!(c[i * n + j], want, "{m}x{k}x{n} at ({i}, {j})");
            }
        }
    }
}

/// The f32 requantization against the same arithmetic in f64 with `round_ties_even`, over
/// sums that land on and next to ties, for i8 and u8 ranges, with clamps.
#[test]
fn float_requantization_rounds_half_to_even_and_clamps() {
    let sums: Vec<i32> = (-2000..2000)
        .chain([i32::MIN / 2, 1 << 24, -(1 << 23) - 1])
        .collect();
    for (scale, zero, lo, hi) in [
        (0.5f32, 0i32, -128i32, 127i32),
        (0.25, 10, -128, 127),
        (0.0371, 128, 0, 255),
        (1.0 / 3.0, -5, -128, 6),
        (0.125, 100, 100, 255),
    ] {
        let p = FloatRequant {
            bias: 7,
            scale,
            zero: zero as f32,
            lo: (lo - zero) as f32,
            hi: (hi - zero) as f32,
        };
        let mut out = vec![0u8; sums.len()];
        requantize_f32(&sums, &mut out, p);
        for (&s, &o) in sums.iter().zip(&out) {
            let v = (s.wrapping_add(7) as f32 * scale).round_ties_even() as i64 + i64::from(zero);
            let want = v.clamp(i64::from(lo), i64::from(hi)) as i32;
            let got = if lo < 0 {
                i32::from(o as i8)
            } else {
                i32::from(o)
            };
            assert_eq!(got, want, "sum {s}, scale {scale}, zero {zero}");
        }
    }
}

/// One depthwise tap along a row: odd lengths (the vector body and its tail).
#[test]
fn taps_accumulate_along_a_row() {
    for n in [1usize, 7, 8, 9, 31, 100] {
        let src = values(n, n as u64);
        let mut acc: Vec<i32> = (0..n as i32).collect();
        accumulate_taps(&mut acc, &src, -255);
        for (i, (&a, &s)) in acc.iter().zip(&src).enumerate() {
            assert_eq!(a, i as i32 - 255 * i32::from(s));
        }
    }
}
