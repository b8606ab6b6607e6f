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

/// Values from TFLite's reference `QuantizeMultiplier` and `MultiplyByQuantizedMultiplier`.
#[test]
fn multipliers_follow_tflite() {
    let q = QuantizedMultiplier::new(0.5).expect("0.5");
    assert_eq!((q.multiplier, q.shift), (1 << 30, 0));
    let q = QuantizedMultiplier::new(1.0).expect("1");
    assert_eq!((q.multiplier, q.shift), (1 << 30, 1));
    let q = QuantizedMultiplier::new(0.25).expect("0.25");
    assert_eq!((q.multiplier, q.shift), (1 << 30, -1));
    // A mantissa that rounds up to 2^31 moves to the next exponent.
    let q = QuantizedMultiplier::new(1.0 - 1e-12).expect("just under 1");
    assert_eq!((q.multiplier, q.shift), (1 << 30, 1));
    assert_eq!(QuantizedMultiplier::new(-1.0), None);
    assert_eq!(QuantizedMultiplier::new(f64::NAN), None);
    assert_eq!(
        QuantizedMultiplier::new(1e-12).map(|q| q.multiplier),
        Some(0)
    );
    // x · 0.5: the doubling high multiply rounds its ties up (toward +∞).
    let half = QuantizedMultiplier::new(0.5).expect("0.5");
    assert_eq!(half.apply(3), 2);
    assert_eq!(half.apply(-3), -1);
    assert_eq!(half.apply(5), 3);
    assert_eq!(half.apply(-5), -2);
    assert_eq!(half.apply(4), 2);
    // x · 0.25: the high multiply rounds once, the right shift again (ties away from zero),
    // so 5 · 0.25 becomes 2.5 → 3, then 1.5 → 2, as in TFLite.
    let quarter = QuantizedMultiplier::new(0.25).expect("0.25");
    assert_eq!(quarter.apply(6), 2);
    assert_eq!(quarter.apply(-6), -2);
    assert_eq!(quarter.apply(5), 2);
    assert_eq!(quarter.apply(-5), -1);
    assert_eq!(quarter.apply(4), 1);
    let three = QuantizedMultiplier::new(3.0).expect("3");
    assert_eq!(three.apply(-7), -21);
}

#[test]
fn multiplied_sums_are_within_half_a_unit_of_the_real_product() {
    for (i, &scale) in [0.0003_f64, 0.0123, 0.1, 0.7019, 0.999, 1.5, 17.25]
        .iter()
        .enumerate()
    {
        let q = QuantizedMultiplier::new(scale).expect("scale");
        for x in (-200_000..200_000).step_by(997 + i) {
            let got = q.apply(x);
            let real = f64::from(x) * scale;
            // Two roundings: at most half a unit, plus half a unit of the first one scaled
            // down by the shift.
            let bound = 0.5 + 0.5 * 2f64.powi(q.shift.min(0)) + 1e-6 * real.abs().max(1.0);
            assert!(
                (f64::from(got) - real).abs() <= bound,
                "{x} · {scale}: {got} vs {real}"
            );
        }
    }
}

#[test]
fn portable_tile_matches_the_vector_tile() {
    let (r, k) = (3, 37);
    let b_raw = values(k * QNR, 9);
    let b = QPackedB::pack(k, QNR, |kk, j| b_raw[kk * QNR + j]).expect("pack");
    let kp = b.depth_padded();
    let mut a = values(r * kp, 10);
    for row in a.chunks_mut(kp) {
        row[k..].fill(0);
    }
    let mut portable = [[0i32; QNR]; QMR];
    portable_tile(&a, kp, r, kp, b.panel(0), &mut portable);
    let mut dispatched = [[0i32; QNR]; QMR];
    tile_sums(
        crate::isa::avx2_in_use(),
        &a,
        kp,
        r,
        kp,
        b.panel(0),
        &mut dispatched,
    );
    assert_eq!(portable, dispatched);
    for (rr, sums) in portable.iter().enumerate().take(r) {
        for (j, &s) in sums.iter().enumerate() {
            let want: i32 = (0..k)
                .map(|kk| i32::from(a[rr * kp + kk]) * i32::from(b_raw[kk * QNR + j]))
                .sum();
            assert_eq!(s, want);
        }
    }
}
