//! The fused GEMM + requantization against the two-step route (int32 sums by [`qgemm`], then
//! [`requantize_channels`]), on odd shapes, panel ranges, i8 and u8 ranges, both tiers.

use super::fused::{qgemm_requantized, tile_bytes, ColumnRequant};
use super::*;

/// Deterministic centered 8-bit values (−255 ..= 255).
fn values(n: usize, seed: u64) -> Vec<i16> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(7);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 33) % 511) as i16 - 255
        })
        .collect()
}

/// The output ranges of an int8 (zero −3, and a ReLU6-like clamp) and a uint8 output; the
/// tier tests use them too.
pub(super) fn ranges() -> [RequantRange; 3] {
    [
        RequantRange {
            zero: -3.0,
            lo: -125.0,
            hi: 130.0,
        },
        RequantRange {
            zero: -128.0,
            lo: 0.0,
            hi: 97.0,
        },
        RequantRange {
            zero: 200.0,
            lo: -200.0,
            hi: 55.0,
        },
    ]
}

struct Case {
    a: Vec<i16>,
    lda: usize,
    b: QPackedB,
    bias: Vec<i32>,
    scale: Vec<f32>,
}

fn case(m: usize, k: usize, n: usize) -> Case {
    let b_raw = values(k * n, 3 + (k * 7 + n) as u64);
    let b = QPackedB::pack(k, n, |kk, j| b_raw[kk * n + j]).expect("pack");
    let lda = b.depth_padded() + 2;
    let raw = values(m * k, 5 + (m * 11 + k) as u64);
    let mut a = vec![0i16; m * lda];
    for i in 0..m {
        a[i * lda..i * lda + k].copy_from_slice(&raw[i * k..(i + 1) * k]);
    }
    // Scales that put the outputs across the whole range, some clamped.
    let bias = (0..n as i32).map(|j| (j * 977) % 3001 - 1500).collect();
    let scale = (0..n)
        .map(|j| 1.0 / (40.0 * (k as f32).sqrt() * (1.0 + (j % 5) as f32)))
        .collect();
    Case {
        a,
        lda,
        b,
        bias,
        scale,
    }
}

/// The bytes of the two-step route for every column.
fn two_step(c: &Case, m: usize, n: usize, r: RequantRange) -> Vec<u8> {
    let mut sums = vec![0i32; m * n];
    assert!(qgemm(&c.a, c.lda, m, &c.b, &mut sums, n));
    let mut want = vec![0u8; m * n];
    for (s, w) in sums.chunks(n).zip(want.chunks_mut(n)) {
        requantize_channels(s, w, &c.bias, &c.scale, r);
    }
    want
}

#[test]
fn fused_requantization_equals_sums_then_requantization() {
    for &(m, k, n) in &[
        (1, 1, 1),
        (1, 8, 16),
        (3, 7, 5),
        (4, 16, 24),
        (5, 17, 17),
        (13, 31, 33),
        (9, 320, 97),
        (37, 12, 40),
        (64, 576, 16),
    ] {
        let c = case(m, k, n);
        for r in ranges() {
            let want = two_step(&c, m, n, r);
            let rq = ColumnRequant::new(&c.bias, &c.scale, r).expect("requant");
            let ldo = n + 3;
            let mut out = vec![0xa5u8; m * ldo];
            assert!(qgemm_requantized(
                &c.a,
                c.lda,
                m,
                &c.b,
                0..n.div_ceil(QNR),
                &rq,
                &mut out,
                ldo
            ));
            for i in 0..m {
                assert_eq!(
                    &out[i * ldo..i * ldo + n],
                    &want[i * n..(i + 1) * n],
                    "{m}x{k}x{n} row {i}"
                );
                assert!(
                    out[i * ldo + n..(i + 1) * ldo].iter().all(|&v| v == 0xa5),
                    "wrote past the columns"
                );
            }
        }
    }
}

/// Every split of the panels into two ranges (how threads share the columns of a layer of
/// few pixels) writes the same bytes as one call.
#[test]
fn panel_ranges_write_their_columns_from_the_start() {
    let (m, k, n) = (7, 24, 53);
    let c = case(m, k, n);
    let r = ranges()[0];
    let want = two_step(&c, m, n, r);
    let rq = ColumnRequant::new(&c.bias, &c.scale, r).expect("requant");
    let panels = n.div_ceil(QNR);
    for split in 0..=panels {
        for range in [0..split, split..panels] {
            let first = range.start * QNR;
            let width = (range.end * QNR).min(n).saturating_sub(first);
            let mut out = vec![0u8; m * width.max(1)];
            assert!(qgemm_requantized(
                &c.a,
                c.lda,
                m,
                &c.b,
                range.clone(),
                &rq,
                &mut out,
                width.max(1)
            ));
            for i in (0..m).filter(|_| width > 0) {
                assert_eq!(
                    &out[i * width.max(1)..][..width],
                    &want[i * n + first..][..width],
                    "panels {range:?} row {i}"
                );
            }
        }
    }
    let mut out = vec![0u8; m * n];
    assert!(!qgemm_requantized(
        &c.a,
        c.lda,
        m,
        &c.b,
        0..panels + 1,
        &rq,
        &mut out,
        n
    ));
    assert!(!qgemm_requantized(
        &c.a,
        c.lda,
        m,
        &c.b,
        0..panels,
        &rq,
        &mut out[..m * n - 1],
        n
    ));
    let short = ColumnRequant::new(&c.bias[..16], &c.scale[..16], r).expect("requant");
    assert!(!qgemm_requantized(
        &c.a,
        c.lda,
        m,
        &c.b,
        0..panels,
        &short,
        &mut out,
        n
    ));
}

/// The portable tile and each tier's tile give the same bytes, at the extremes of the
/// operands (all ±255 against all ±255: sums of ±255²·K) where the clamps decide.
#[test]
fn portable_and_vector_tiles_agree_at_the_extremes() {
    let k = 1001;
    for (av, bv) in [(255i16, 255i16), (-255, 255), (255, -255), (-128, 127)] {
        let b = QPackedB::pack(k, QNR, |_, j| if j % 3 == 0 { bv } else { -bv }).expect("pack");
        let kp = b.depth_padded();
        let mut a = vec![0i16; MR_MAX * kp];
        for row in a.chunks_mut(kp) {
            row[..k].fill(av);
        }
        let bias: Vec<i32> = (0..QNR as i32).map(|j| j * 1000 - 8000).collect();
        let scale: Vec<f32> = (0..QNR).map(|j| 1e-5 * (1 + j) as f32).collect();
        for r in ranges() {
            let rq = ColumnRequant::new(&bias, &scale, r).expect("requant");
            let mut portable = [[0u8; QNR]; MR_MAX];
            let all = MR_MAX;
            tile_bytes(
                Int8Isa::Portable,
                &a,
                kp,
                all,
                kp,
                b.panel(0),
                &rq,
                0,
                &mut portable,
            );
            for isa in Int8Isa::ALL.into_iter().filter(|t| t.available()) {
                let rows = tile_rows(isa);
                let mut tier = [[0u8; QNR]; MR_MAX];
                tile_bytes(isa, &a, kp, rows, kp, b.panel(0), &rq, 0, &mut tier);
                assert_eq!(
                    portable[..rows],
                    tier[..rows],
                    "{} a {av} b {bv}",
                    isa.name()
                );
            }
            let sum = i32::from(av) * i32::from(bv) * k as i32;
            for (j, &got) in portable[0].iter().enumerate() {
                let s = if j % 3 == 0 { sum } else { -sum };
                let mut one = [0u8];
                requantize_channels(&[s], &mut one, &bias[j..=j], &scale[j..=j], r);
                assert_eq!(got, one[0], "a {av} b {bv} column {j}");
            }
        }
    }
}
