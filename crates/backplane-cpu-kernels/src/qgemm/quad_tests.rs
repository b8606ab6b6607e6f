//! The byte GEMM ([`super::quads`]) on every tier this CPU has: its int32 sums against exact
//! ones (i64), and its requantized bytes against the 16-bit pair GEMM's on the centered
//! operands (the path the layers used before, and still use on the other tiers), for u8 and
//! i8 activations with zero points at the ends of their ranges, odd and large shapes,
//! partial panels and the extreme operands.

use super::fused_tests::ranges;
use super::quads::quad_gemm_sums_on as quad_sums_on;
use super::*;

const ROWS: [usize; 7] = [1, 2, 5, 11, 12, 13, 97];
const COLS: [usize; 7] = [1, 3, 15, 16, 17, 33, 100];
const DEPTHS: [usize; 9] = [1, 3, 4, 5, 16, 27, 31, 257, 1152];

/// The tiers this CPU runs, named on stderr; the one with a vector tile said so.
fn tiers(test: &str) -> Vec<Int8Isa> {
    let have: Vec<Int8Isa> = Int8Isa::ALL.into_iter().filter(|t| t.available()).collect();
    eprintln!(
        "quad tiers {test}: {} (vector tile: {})",
        have.iter().map(|t| t.name()).collect::<Vec<_>>().join(" "),
        have.iter()
            .filter(|&&t| has_quad_tile(t))
            .map(|t| t.name())
            .collect::<Vec<_>>()
            .join(" ")
    );
    have
}

/// Deterministic values in `lo ..= lo + span − 1`.
fn values(n: usize, seed: u64, lo: i32, span: u64) -> Vec<i32> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(7);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            lo + ((s >> 33) % span) as i32
        })
        .collect()
}

/// Unsigned A (`m × k`) and signed B (`k × n`) for a fill: 0 random over the full ranges,
/// 1 all 255 against all −128 (the largest products), 2 weights only at ±127 and −128,
/// activations only at 0 and 255.
fn operands(m: usize, k: usize, n: usize, fill: u8) -> (Vec<i32>, Vec<i32>) {
    let seed = (m * 7919 + k * 131 + n) as u64;
    match fill {
        0 => (
            values(m * k, seed, 0, 256),
            values(k * n, seed + 1, -128, 256),
        ),
        1 => (vec![255; m * k], vec![-128; k * n]),
        _ => (
            values(m * k, seed, 0, 2).iter().map(|v| v * 255).collect(),
            values(k * n, seed + 2, 0, 3)
                .iter()
                .map(|v| [127, -127, -128][*v as usize])
                .collect(),
        ),
    }
}

/// The fills of a shape: the extremes on the larger ones.
fn fills(k: usize, n: usize) -> &'static [u8] {
    if k >= 16 && n >= 15 {
        &[0, 1, 2]
    } else {
        &[0]
    }
}

#[test]
fn quad_sums_are_exact_on_every_tier() {
    let tiers = tiers("quad_sums_are_exact_on_every_tier");
    let mut cases = 0;
    for m in ROWS {
        for k in DEPTHS {
            for n in COLS {
                for &fill in fills(k, n) {
                    let (a_raw, b_raw) = operands(m, k, n, fill);
                    let b =
                        QuadPackedB::pack(k, n, |kk, j| b_raw[kk * n + j] as i16).expect("pack");
                    let kq = b.depth_padded();
                    assert_eq!(kq % 4, 0);
                    assert!(kq >= k && kq < k + 4);
                    // Rows wider than the padded depth, junk past the depth: those bytes
                    // meet zero weights.
                    let lda = kq + 5;
                    let mut a = vec![0xffu8; m * lda];
                    for i in 0..m {
                        for kk in 0..k {
                            a[i * lda + kk] = a_raw[i * k + kk] as u8;
                        }
                    }
                    let ldc = n + 3;
                    let mut want = vec![-9i32; m * ldc];
                    for i in 0..m {
                        for j in 0..n {
                            let s: i64 = (0..k)
                                .map(|kk| i64::from(a_raw[i * k + kk] * b_raw[kk * n + j]))
                                .sum();
                            want[i * ldc + j] = i32::try_from(s).expect("sum fits i32");
                        }
                    }
                    let col: Vec<i32> = (0..n)
                        .map(|j| (0..k).map(|kk| b_raw[kk * n + j]).sum())
                        .collect();
                    assert_eq!(b.column_sums(), &col[..]);
                    for &isa in &tiers {
                        let mut c = vec![-9i32; m * ldc];
                        let all = n.div_ceil(QNR);
                        assert!(quad_sums_on(isa, &a, lda, m, &b, 0..all, &mut c, ldc));
                        assert!(
                            c == want,
                            "{}: {m}x{k}x{n} fill {fill} differs from the exact sums",
                            isa.name()
                        );
                        // The panels from the second on, written from column 0.
                        if all > 1 {
                            let mut part = vec![-9i32; m * ldc];
                            assert!(quad_sums_on(isa, &a, lda, m, &b, 1..all, &mut part, ldc));
                            for i in 0..m {
                                let got = &part[i * ldc..][..n - QNR];
                                assert_eq!(
                                    got,
                                    &want[i * ldc + QNR..][..n - QNR],
                                    "{}",
                                    isa.name()
                                );
                            }
                        }
                        cases += 1;
                    }
                }
            }
        }
    }
    assert!(cases >= ROWS.len() * DEPTHS.len() * COLS.len() * tiers.len());
}

/// The bytes of the byte GEMM (uncentered A, folded bias) equal the pair GEMM's on the
/// centered operands (portable tier), for u8 and i8 activations with zero points at the
/// ends, every output range, partial panel ranges; the bytes past the columns untouched.
#[test]
fn quads_requantize_as_the_pair_gemm() {
    let tiers = tiers("quads_requantize_as_the_pair_gemm");
    // (signed activations, zero point)
    let zeros = [
        (false, 0),
        (false, 255),
        (true, -128),
        (true, 127),
        (false, 131),
    ];
    let mut cases = 0;
    for m in ROWS {
        for k in DEPTHS {
            for n in COLS {
                for &fill in fills(k, n) {
                    let (a_u, w) = operands(m, k, n, fill);
                    let zi = (m + k + n + fill as usize) % zeros.len();
                    let (signed, za) = zeros[zi];
                    // The activations as stored: i8 values are the flipped bytes less 128.
                    let x: Vec<i32> = a_u
                        .iter()
                        .map(|&v| if signed { v - 128 } else { v })
                        .collect();
                    let pair_b = QPackedB::pack(k, n, |kk, j| w[kk * n + j] as i16).expect("pack");
                    let kp = pair_b.depth_padded();
                    let mut a16 = vec![0i16; m * kp];
                    for i in 0..m {
                        for kk in 0..k {
                            a16[i * kp + kk] = (x[i * k + kk] - za) as i16;
                        }
                    }
                    let quad_b =
                        QuadPackedB::pack(k, n, |kk, j| w[kk * n + j] as i16).expect("pack");
                    let kq = quad_b.depth_padded();
                    let mut a8 = vec![0x5au8; m * kq];
                    for i in 0..m {
                        for kk in 0..k {
                            let v = x[i * k + kk];
                            // u8 as it is; i8's byte flipped (x ^ 0x80 = x + 128).
                            a8[i * kq + kk] = if signed {
                                (v as i8 as u8) ^ 0x80
                            } else {
                                v as u8
                            };
                        }
                    }
                    let zu = if signed { za + 128 } else { za };
                    let bias: Vec<i32> = (0..n as i32).map(|j| (j * 977) % 3001 - 1500).collect();
                    let folded = quad_b.folded_bias(&bias, zu).expect("fold");
                    let spread = if fill == 0 { 20.0 } else { 2000.0 };
                    let scale: Vec<f32> = (0..n)
                        .map(|j| 1.0 / (spread * (k as f32).sqrt() * (1.0 + (j % 5) as f32)))
                        .collect();
                    let panels = n.div_ceil(QNR);
                    for r in ranges() {
                        let rq = ColumnRequant::new(&bias, &scale, r).expect("requant");
                        let rq_q = ColumnRequant::new(&folded, &scale, r).expect("requant");
                        for start in [0, 1].into_iter().filter(|&s| s < panels) {
                            let width = n - start * QNR;
                            let ldo = width + 2;
                            let mut want = vec![0xa5u8; m * ldo];
                            assert!(qgemm_requantized_on(
                                Int8Isa::Portable,
                                &a16,
                                kp,
                                m,
                                &pair_b,
                                start..panels,
                                &rq,
                                &mut want,
                                ldo
                            ));
                            for &isa in &tiers {
                                let mut out = vec![0xa5u8; m * ldo];
                                assert!(quad_gemm_requantized_on(
                                    isa,
                                    &a8,
                                    kq,
                                    m,
                                    &quad_b,
                                    start..panels,
                                    &rq_q,
                                    &mut out,
                                    ldo
                                ));
                                assert!(
                                    out == want,
                                    "{}: {m}x{k}x{n} fill {fill} signed {signed} zero {za} \
                                     panels {start}.. range {r:?}",
                                    isa.name()
                                );
                                cases += 1;
                            }
                        }
                    }
                }
            }
        }
    }
    assert!(cases >= ROWS.len() * DEPTHS.len() * COLS.len() * tiers.len() * 3);
}

/// Weights past i8 are refused (the layer keeps the pair GEMM); the entry point refuses a
/// tier this CPU lacks, short slices, a narrow output pitch and panels past the columns.
#[test]
fn quads_refuse_what_they_cannot_run() {
    assert!(QuadPackedB::pack(3, 2, |_, _| 128).is_none());
    assert!(QuadPackedB::pack(3, 2, |_, _| -129).is_none());
    assert!(QuadPackedB::pack(3, 2, |k, _| if k == 2 { 200 } else { 1 }).is_none());
    let b = QuadPackedB::pack(3, 2, |_, _| 1).expect("pack");
    assert_eq!(b.depth_padded(), 4);
    assert!(b.folded_bias(&[0], 1).is_none());
    assert_eq!(b.folded_bias(&[10, -4], 2).expect("fold"), vec![4, -10]);
    let range = RequantRange {
        zero: 0.0,
        lo: -128.0,
        hi: 127.0,
    };
    let rq = ColumnRequant::new(&[0, 0], &[1.0, 1.0], range).expect("requant");
    for isa in Int8Isa::ALL {
        let mut out = vec![0u8; 4];
        // Two rows of 4 bytes (the fourth meets a zero weight): sums 3.
        let ok = quad_gemm_requantized_on(isa, &[1u8; 8], 4, 2, &b, 0..1, &rq, &mut out, 2);
        assert_eq!(ok, isa.available(), "{}", isa.name());
        assert_eq!(out == [3, 3, 3, 3], isa.available(), "{}", isa.name());
        let short = quad_gemm_requantized_on(isa, &[1u8; 7], 4, 2, &b, 0..1, &rq, &mut out, 2);
        assert!(!short);
        let narrow = quad_gemm_requantized_on(isa, &[1u8; 8], 4, 2, &b, 0..1, &rq, &mut out, 1);
        assert!(!narrow);
        let past = quad_gemm_requantized_on(isa, &[1u8; 8], 4, 2, &b, 0..2, &rq, &mut out, 2);
        assert!(!past);
        let small = quad_gemm_requantized_on(isa, &[1u8; 8], 4, 2, &b, 0..1, &rq, &mut out[..3], 2);
        assert!(!small);
    }
}

/// Rows read in place at a pitch of the depth itself (a u8 layer's pixels, C not a multiple
/// of 4): each row's padded depth runs into the next row, whose bytes meet zero weights, so
/// the bytes are those of zero-padded rows.
#[test]
fn quads_read_rows_that_run_into_the_next() {
    let tiers = tiers("quads_read_rows_that_run_into_the_next");
    let range = ranges()[2];
    for (m, k, n) in [(50, 6, 20), (13, 13, 33), (97, 30, 16), (5, 1, 3)] {
        let (a_u, w) = operands(m, k, n, 0);
        let b = QuadPackedB::pack(k, n, |kk, j| w[kk * n + j] as i16).expect("pack");
        let kq = b.depth_padded();
        // The pixels back to back, and the readable bytes past the last row's depth.
        let mut packed: Vec<u8> = a_u.iter().map(|&v| v as u8).collect();
        packed.resize(m * k + (kq - k), 0xee);
        let mut padded = vec![0u8; m * kq];
        for i in 0..m {
            for kk in 0..k {
                padded[i * kq + kk] = a_u[i * k + kk] as u8;
            }
        }
        let bias: Vec<i32> = (0..n as i32).map(|j| j * 31 - 200).collect();
        let scale: Vec<f32> = (0..n).map(|j| 1.0 / (30.0 + j as f32)).collect();
        let rq = ColumnRequant::new(&bias, &scale, range).expect("requant");
        let panels = 0..n.div_ceil(QNR);
        for &isa in &tiers {
            let mut want = vec![0u8; m * n];
            let mut got = vec![1u8; m * n];
            assert!(quad_gemm_requantized_on(
                isa,
                &padded,
                kq,
                m,
                &b,
                panels.clone(),
                &rq,
                &mut want,
                n
            ));
            assert!(quad_gemm_requantized_on(
                isa,
                &packed,
                k,
                m,
                &b,
                panels.clone(),
                &rq,
                &mut got,
                n
            ));
            assert!(got == want, "{}: {m}x{k}x{n}", isa.name());
        }
    }
}

/// Rows past one block of A (the panels run down each block in turn) and a panel range past
/// B's or a pitch past the slice: the sums against a plain loop, and the refusals.
#[test]
fn quad_sums_of_many_rows_are_exact() {
    let (m, k, n) = (300usize, 1152usize, 40usize);
    let a: Vec<u8> = (0..m * k).map(|i| (i * 7 % 256) as u8).collect();
    let w = |kk: usize, j: usize| ((kk * 13 + j * 5) % 255) as i16 - 127;
    let b = QuadPackedB::pack(k, n, w).expect("pack");
    let kq = b.depth_padded();
    let mut rows = vec![0u8; m * kq];
    for (dst, src) in rows.chunks_exact_mut(kq).zip(a.chunks_exact(k)) {
        dst[..k].copy_from_slice(src);
    }
    for isa in Int8Isa::ALL.into_iter().filter(|t| t.available()) {
        let mut c = vec![0i32; m * n];
        assert!(quad_sums_on(
            isa,
            &rows,
            kq,
            m,
            &b,
            0..n.div_ceil(QNR),
            &mut c,
            n
        ));
        for i in (0..m).step_by(37) {
            for j in 0..n {
                let s: i32 = (0..k)
                    .map(|kk| i32::from(a[i * k + kk]) * i32::from(w(kk, j)))
                    .sum();
                assert_eq!(c[i * n + j], s, "{}: row {i} column {j}", isa.name());
            }
        }
        assert!(!quad_sums_on(
            isa,
            &rows,
            kq,
            m,
            &b,
            0..n.div_ceil(QNR) + 1,
            &mut c,
            n
        ));
        // A pitch whose extent overflows is refused, not wrapped around.
        assert!(!quad_sums_on(
            isa,
            &rows,
            usize::MAX / 2,
            3,
            &b,
            0..1,
            &mut c,
            n
        ));
    }
}
