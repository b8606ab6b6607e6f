//! Every integer GEMM tier this CPU has (AVX-512 VNNI, AVX-512BW, AVX2, portable) against
//! exact sums and against the portable tier, through the entry points (`qgemm_on`,
//! `qgemm_requantized_on`): row counts around both tile heights, odd and large depths,
//! partial panels, extreme operands, i8 and u8 output ranges.
//!
//! A tier the CPU lacks is skipped, and said so; `BACKPLANE_REQUIRE_AVX512_INT8=1` (or
//! `=vnni`) turns a missing AVX-512BW (or AVX-512 VNNI) into a failure, so that a run on a
//! machine meant to exercise them cannot pass by skipping them.

use super::fused_tests::ranges;
use super::*;

/// The variable that makes a missing AVX-512 integer tier a failure: `1` requires
/// AVX-512BW, `vnni` AVX-512 VNNI too.
const REQUIRE: &str = "BACKPLANE_REQUIRE_AVX512_INT8";

/// The tiers this CPU runs, each named on stderr (with `--nocapture` a run shows which
/// paths its tests took).
fn tiers(test: &str) -> Vec<Int8Isa> {
    let (have, lack): (Vec<Int8Isa>, Vec<Int8Isa>) =
        Int8Isa::ALL.into_iter().partition(|t| t.available());
    let names = |v: &[Int8Isa]| v.iter().map(|t| t.name()).collect::<Vec<_>>().join(" ");
    eprintln!(
        "int8 tiers {test}: tested {}; not on this CPU: {}",
        names(&have),
        if lack.is_empty() {
            "-".into()
        } else {
            names(&lack)
        }
    );
    have
}

/// Deterministic centered 8-bit values in `lo ..= lo + span - 1`.
fn values(n: usize, seed: u64, lo: i32, span: u64) -> Vec<i16> {
    let mut s = seed.wrapping_mul(0x2545_f491_4f6c_dd1d).wrapping_add(99);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (lo + ((s >> 33) % span) as i32) as i16
        })
        .collect()
}

/// A (rows of `lda`, zeros past `k`) and B for one shape; `fill` picks the operands:
/// 0 random over ±255, 1 all +255 against −255, 2 alternating ±255 against ±255.
fn operands(m: usize, k: usize, n: usize, fill: u8) -> (Vec<i16>, Vec<i16>) {
    let seed = (m * 1009 + k * 31 + n) as u64;
    match fill {
        0 => (
            values(m * k, seed, -255, 511),
            values(k * n, seed + 1, -255, 511),
        ),
        1 => (vec![255; m * k], vec![-255; k * n]),
        _ => (
            (0..m * k)
                .map(|i| if i % 2 == 0 { 255 } else { -255 })
                .collect(),
            (0..k * n)
                .map(|i| if (i / n).is_multiple_of(2) { 255 } else { -255 })
                .collect(),
        ),
    }
}

fn padded_a(a_raw: &[i16], m: usize, k: usize, lda: usize) -> Vec<i16> {
    let mut a = vec![0i16; m * lda];
    for i in 0..m {
        a[i * lda..i * lda + k].copy_from_slice(&a_raw[i * k..(i + 1) * k]);
    }
    a
}

const ROWS: [usize; 16] = [1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 17, 23, 24, 29];
const DEPTHS: [usize; 8] = [1, 2, 3, 7, 16, 31, 64, 1153];
const COLS: [usize; 6] = [1, 15, 16, 17, 33, 40];

/// `qgemm_on` on every tier against the exact sums (i64) and the portable tier's; the
/// columns past `n` (the C pitch is wider) stay untouched.
#[test]
fn every_tier_sums_exactly() {
    let tiers = tiers("every_tier_sums_exactly");
    let mut cases = 0;
    for m in ROWS {
        for k in DEPTHS {
            for n in COLS {
                // Random operands everywhere, the extremes on a few shapes.
                let fills: &[u8] = if k >= 64 && n >= 16 { &[0, 1, 2] } else { &[0] };
                for &fill in fills {
                    let (a_raw, b_raw) = operands(m, k, n, fill);
                    let b = QPackedB::pack(k, n, |kk, j| b_raw[kk * n + j]).expect("pack");
                    let lda = b.depth_padded() + 3;
                    let a = padded_a(&a_raw, m, k, lda);
                    let ldc = n + 2;
                    let mut want = vec![0i32; m * ldc];
                    for i in 0..m {
                        for j in 0..n {
                            let s: i64 = (0..k)
                                .map(|kk| {
                                    i64::from(a_raw[i * k + kk]) * i64::from(b_raw[kk * n + j])
                                })
                                .sum();
                            want[i * ldc + j] = i32::try_from(s).expect("sum fits i32");
                        }
                        want[i * ldc + n..(i + 1) * ldc].fill(-7);
                    }
                    for &isa in &tiers {
                        let mut c = vec![-7i32; m * ldc];
                        assert!(qgemm_on(isa, &a, lda, m, &b, &mut c, ldc));
                        assert!(
                            c == want,
                            "{}: {m}x{k}x{n} fill {fill} differs from the exact sums",
                            isa.name()
                        );
                        cases += 1;
                    }
                }
            }
        }
    }
    assert!(cases >= ROWS.len() * DEPTHS.len() * COLS.len() * tiers.len());
}

#[test]
fn every_tier_requantizes_as_the_portable_tier() {
    let tiers = tiers("every_tier_requantizes_as_the_portable_tier");
    for m in ROWS {
        for k in DEPTHS {
            for n in COLS {
                let fills: &[u8] = if k >= 64 && n >= 16 { &[0, 1, 2] } else { &[0] };
                for &fill in fills {
                    let (a_raw, b_raw) = operands(m, k, n, fill);
                    let b = QPackedB::pack(k, n, |kk, j| b_raw[kk * n + j]).expect("pack");
                    let lda = b.depth_padded() + 1;
                    let a = padded_a(&a_raw, m, k, lda);
                    let bias: Vec<i32> = (0..n as i32).map(|j| (j * 977) % 3001 - 1500).collect();
                    // Scales that spread the outputs over the range, some past the clamps;
                    // larger ones for the extreme fills.
                    let spread = if fill == 0 { 40.0 } else { 2000.0 };
                    let scale: Vec<f32> = (0..n)
                        .map(|j| 1.0 / (spread * (k as f32).sqrt() * (1.0 + (j % 5) as f32)))
                        .collect();
                    let mut sums = vec![0i32; m * n];
                    assert!(qgemm_on(Int8Isa::Portable, &a, lda, m, &b, &mut sums, n));
                    let panels = n.div_ceil(QNR);
                    for r in ranges() {
                        let rq = ColumnRequant::new(&bias, &scale, r).expect("requant");
                        let mut want = vec![0u8; m * n];
                        for (s, w) in sums.chunks(n).zip(want.chunks_mut(n)) {
                            requantize_channels(s, w, &bias, &scale, r);
                        }
                        for start in [0, 1].into_iter().filter(|&s| s < panels) {
                            let first = start * QNR;
                            let width = n - first;
                            let ldo = width + 3;
                            let mut portable = vec![0xa5u8; m * ldo];
                            assert!(qgemm_requantized_on(
                                Int8Isa::Portable,
                                &a,
                                lda,
                                m,
                                &b,
                                start..panels,
                                &rq,
                                &mut portable,
                                ldo
                            ));
                            for i in 0..m {
                                assert_eq!(
                                    &portable[i * ldo..i * ldo + width],
                                    &want[i * n + first..(i + 1) * n],
                                    "portable: {m}x{k}x{n} row {i}"
                                );
                                assert!(portable[i * ldo + width..(i + 1) * ldo]
                                    .iter()
                                    .all(|&v| v == 0xa5));
                            }
                            for &isa in &tiers {
                                let mut out = vec![0xa5u8; m * ldo];
                                assert!(qgemm_requantized_on(
                                    isa,
                                    &a,
                                    lda,
                                    m,
                                    &b,
                                    start..panels,
                                    &rq,
                                    &mut out,
                                    ldo
                                ));
                                assert!(
                                    out == portable,
                                    "{}: {m}x{k}x{n} fill {fill} panels {start}.. range {r:?}",
                                    isa.name()
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The entry points refuse a tier this CPU lacks (computing nothing) and keep refusing
/// short slices on every tier.
#[test]
fn entry_points_refuse_what_they_cannot_run() {
    let b = QPackedB::pack(3, 2, |_, _| 1).expect("pack");
    let rq = ColumnRequant::new(
        &[0, 0],
        &[1.0, 1.0],
        RequantRange {
            zero: 0.0,
            lo: -128.0,
            hi: 127.0,
        },
    )
    .expect("requant");
    for isa in Int8Isa::ALL {
        let mut c = vec![-1i32; 4];
        let ok = qgemm_on(isa, &[1i16; 8], 4, 2, &b, &mut c, 2);
        assert_eq!(ok, isa.available(), "{}", isa.name());
        assert_eq!(c == [3, 3, 3, 3], isa.available(), "{}", isa.name());
        assert!(!qgemm_on(isa, &[0i16; 5], 4, 2, &b, &mut c, 2));
        let mut out = vec![0u8; 4];
        let ok = qgemm_requantized_on(isa, &[1i16; 8], 4, 2, &b, 0..1, &rq, &mut out, 2);
        assert_eq!(ok, isa.available(), "{}", isa.name());
        assert!(!qgemm_requantized_on(
            isa,
            &[1i16; 8],
            4,
            2,
            &b,
            0..1,
            &rq,
            &mut out[..3],
            2
        ));
    }
}

/// The tier in use is the best one under the f32 family in use (the AVX-512 integer tiers
/// only with AVX-512 kernels, so `isa=avx2` turns them off); and where
/// `BACKPLANE_REQUIRE_AVX512_INT8` asks for them, this CPU has them (so the tests above ran
/// them).
#[test]
fn avx512_int8_tiers_are_present_where_required() {
    let tier = crate::isa::kernels();
    let best_under = Int8Isa::ALL
        .into_iter()
        .find(|&t| {
            t.available()
                && match tier.isa {
                    crate::isa::Isa::Avx512 => true,
                    crate::isa::Isa::Avx2 => matches!(t, Int8Isa::Avx2 | Int8Isa::Portable),
                    crate::isa::Isa::Portable => t == Int8Isa::Portable,
                }
        })
        .unwrap_or(Int8Isa::Portable);
    assert_eq!(tier.int8, best_under);
    eprintln!(
        "int8 tier in use: {} (f32 kernels {})",
        tier.int8.name(),
        tier.isa.name()
    );
    let want = std::env::var(REQUIRE).unwrap_or_default();
    let need = match want.as_str() {
        "" | "0" => None,
        "vnni" => Some(Int8Isa::Avx512Vnni),
        _ => Some(Int8Isa::Avx512Bw),
    };
    if let Some(need) = need {
        assert!(
            need.available(),
            "{REQUIRE}={want}: this CPU lacks {} (tiers it has: {})",
            need.name(),
            Int8Isa::ALL
                .into_iter()
                .filter(|t| t.available())
                .map(|t| t.name())
                .collect::<Vec<_>>()
                .join(" ")
        );
        eprintln!("{REQUIRE}={want}: {} present and tested", need.name());
    } else if !Int8Isa::Avx512Bw.available() {
        eprintln!("int8: no AVX-512BW on this CPU, its tiles were not run (set {REQUIRE}=1 to fail instead)");
    }
}
