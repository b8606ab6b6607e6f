//! The fixed-point requantization (LiteRT's builtin kernels' rule) in the fused pair GEMM
//! and the byte GEMM ([`ColumnRequant::fixed_point`]) and in the depthwise convolution
//! ([`DwWeights::with_fixed_point`]) on every integer tier this CPU has, against exact sums
//! requantized by backplane-core's `requantize_fixed_point` (CpuRef's rule): odd row, depth
//! and column counts, multipliers with left and right shifts, i8 and u8 ranges.

use super::fused_tests::ranges;
use super::*;
use backplane_core::quant::{quantize_multiplier, requantize_fixed_point};

/// Deterministic values in `lo ..= lo + span - 1`.
fn values(n: usize, seed: u64, lo: i32, span: u64) -> Vec<i32> {
    let mut s = seed.wrapping_mul(0x2545_f491_4f6c_dd1d).wrapping_add(7);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            lo + ((s >> 33) % span) as i32
        })
        .collect()
}

/// Per column a multiplier spreading sums of depth `k` over the output range, some with a
/// left shift (multipliers above 1), and ties of the rounding (powers of two).
fn multipliers(n: usize, k: usize) -> Vec<(i32, i32)> {
    (0..n)
        .map(|j| match j % 4 {
            0 => quantize_multiplier(1.0 / (40.0 * (k as f64).sqrt() * (1.0 + j as f64 % 5.0))),
            1 => quantize_multiplier(0.5f64.powi(1 + (j % 9) as i32)),
            2 => quantize_multiplier(1.75),
            _ => quantize_multiplier(0.013 + 0.001 * j as f64),
        })
        .collect()
}

/// The byte of output value `v` in range `r`'s type.
fn expect(sum: i32, bias: i32, m: (i32, i32), r: RequantRange) -> u8 {
    let zero = r.zero as i32;
    let (lo, hi) = (r.lo as i32 + zero, r.hi as i32 + zero);
    let v = requantize_fixed_point(i64::from(sum) + i64::from(bias), m, zero, lo, hi);
    v as u8
}

#[test]
fn fused_gemm_fixed_point_equals_the_core_rule_on_every_tier() {
    let tiers: Vec<Int8Isa> = Int8Isa::ALL.into_iter().filter(|t| t.available()).collect();
    eprintln!(
        "int8 tiers fixed point: {}",
        tiers.iter().map(|t| t.name()).collect::<Vec<_>>().join(" ")
    );
    let mut checked = 0usize;
    for m in [1, 3, 7, 12, 13, 113] {
        for k in [1, 3, 16, 17, 33, 144] {
            for n in [1, 3, 16, 17, 33] {
                let seed = (m * 1009 + k * 31 + n) as u64;
                let a_raw = values(m * k, seed, -255, 511);
                let b_raw = values(k * n, seed + 1, -255, 511);
                let b = QPackedB::pack(k, n, |kk, j| b_raw[kk * n + j] as i16).expect("pack");
                let lda = b.depth_padded();
                let mut a = vec![0i16; m * lda];
                for i in 0..m {
                    for kk in 0..k {
                        a[i * lda + kk] = a_raw[i * k + kk] as i16;
                    }
                }
                let bias: Vec<i32> = (0..n as i32).map(|j| (j * 977) % 3001 - 1500).collect();
                let mult = multipliers(n, k);
                for r in ranges() {
                    let rq = ColumnRequant::fixed_point(&bias, &mult, r).expect("requant");
                    assert!(rq.is_fixed_point());
                    let want = expected(m, n, &bias, &mult, r, |i, j| {
                        (0..k).map(|kk| a_raw[i * k + kk] * b_raw[kk * n + j]).sum()
                    });
                    for &isa in &tiers {
                        let mut got = vec![0xa5u8; m * n];
                        let panels = n.div_ceil(QNR);
                        assert!(qgemm_requantized_on(
                            isa,
                            &a,
                            lda,
                            m,
                            &b,
                            0..panels,
                            &rq,
                            &mut got,
                            n
                        ));
                        assert_eq!(got, want, "{}: {m}x{k}x{n} {r:?}", isa.name());
                        checked += got.len();
                    }
                }
            }
        }
    }
    assert!(checked > 100_000, "{checked}");
}

/// The `m×n` output bytes the core rule gives for the sums `sum(i, j)`, column `j`'s bias and
/// multiplier, in range `r`.
fn expected(
    m: usize,
    n: usize,
    bias: &[i32],
    mult: &[(i32, i32)],
    r: RequantRange,
    sum: impl Fn(usize, usize) -> i32,
) -> Vec<u8> {
    (0..m * n)
        .map(|ij| {
            let (i, j) = (ij / n, ij % n);
            expect(sum(i, j), bias[j], mult[j], r)
        })
        .collect()
}

/// The byte GEMM (i8 weights, unsigned activations, the zero point folded into the bias)
/// with the fixed-point rule equals the core rule on the centered sums, on every tier.
#[test]
fn quad_gemm_fixed_point_equals_the_core_rule_on_every_tier() {
    let tiers: Vec<Int8Isa> = Int8Isa::ALL.into_iter().filter(|t| t.available()).collect();
    let mut checked = 0usize;
    for m in [1, 3, 7, 13, 40, 113] {
        for k in [1, 3, 16, 17, 33, 144] {
            for n in [1, 3, 16, 17, 33, 80] {
                let seed = (m * 1013 + k * 37 + n) as u64;
                let a: Vec<u8> = values(m * k, seed, 0, 256)
                    .into_iter()
                    .map(|v| v as u8)
                    .collect();
                let w = values(k * n, seed + 1, -127, 255);
                let zx = 131;
                let b = QuadPackedB::pack(k, n, |kk, j| w[kk * n + j] as i16).expect("pack");
                let lda = b.depth_padded();
                let mut ap = vec![0u8; m * lda];
                for i in 0..m {
                    ap[i * lda..i * lda + k].copy_from_slice(&a[i * k..(i + 1) * k]);
                }
                let bias: Vec<i32> = (0..n as i32).map(|j| (j * 977) % 3001 - 1500).collect();
                let folded = b.folded_bias(&bias, zx).expect("folded");
                let mult = multipliers(n, k);
                for r in ranges() {
                    let rq = ColumnRequant::fixed_point(&folded, &mult, r).expect("requant");
                    let want = expected(m, n, &bias, &mult, r, |i, j| {
                        (0..k)
                            .map(|kk| (i32::from(a[i * k + kk]) - zx) * w[kk * n + j])
                            .sum()
                    });
                    for &isa in &tiers {
                        let mut got = vec![0xa5u8; m * n];
                        let panels = n.div_ceil(QNR);
                        assert!(quad_gemm_requantized_on(
                            isa,
                            &ap,
                            lda,
                            m,
                            &b,
                            0..panels,
                            &rq,
                            &mut got,
                            n
                        ));
                        assert_eq!(got, want, "{}: {m}x{k}x{n} {r:?}", isa.name());
                        checked += got.len();
                    }
                }
            }
        }
    }
    assert!(checked > 100_000, "{checked}");
}

#[test]
fn depthwise_fixed_point_equals_the_core_rule_on_every_tier() {
    let tiers: Vec<Int8Isa> = Int8Isa::ALL.into_iter().filter(|t| t.available()).collect();
    let mut checked = 0usize;
    for c in [1, 3, 16, 17, 33, 64, 96, 131] {
        for (kernel, stride, hw) in [(3, 1, 7), (3, 2, 11), (5, 1, 9), (5, 2, 6), (1, 1, 1)] {
            for x_signed in [true, false] {
                let taps = kernel * kernel;
                let seed = (c * 7919 + taps * 31 + hw) as u64 + u64::from(x_signed);
                let (x_lo, zx) = if x_signed { (-128, -5) } else { (0, 131) };
                let x: Vec<u8> = values(hw * hw * c, seed, x_lo, 256)
                    .into_iter()
                    .map(|v| v as u8)
                    .collect();
                // Symmetric int8 weights (TFLite's), centered already.
                let w = values(taps * c, seed + 3, -127, 255);
                let bias: Vec<i32> = (0..c as i32).map(|j| (j * 577) % 2001 - 1000).collect();
                let mult = multipliers(c, taps);
                let pad = kernel / 2;
                let o = (hw + 2 * pad - kernel) / stride + 1;
                let geo = DwGeometry {
                    n: 1,
                    h: hw,
                    w: hw,
                    oh: o,
                    ow: o,
                    kernel: [kernel, kernel],
                    strides: [stride, stride],
                    dilations: [1, 1],
                    pads: [pad, pad],
                };
                for r in ranges() {
                    let scale = vec![1.0f32; c];
                    let dw = DwWeights::new(
                        c,
                        taps,
                        |t, ch| w[t * c + ch] as i16,
                        &bias,
                        &scale,
                        r,
                        zx,
                        x_signed,
                    )
                    .and_then(|d| d.with_fixed_point(&mult))
                    .expect("weights");
                    let layer = DwLayer::new(dw, geo).expect("layer");
                    let xv = |iy: isize, ix: isize, ch: usize| -> i32 {
                        if iy < 0 || ix < 0 || iy >= hw as isize || ix >= hw as isize {
                            return 0;
                        }
                        let b = x[(iy as usize * hw + ix as usize) * c + ch];
                        let v = if x_signed {
                            i32::from(b as i8)
                        } else {
                            i32::from(b)
                        };
                        v - zx
                    };
                    let mut want = vec![0u8; o * o * c];
                    for oy in 0..o {
                        for ox in 0..o {
                            for ch in 0..c {
                                let mut s = 0;
                                for ky in 0..kernel {
                                    for kx in 0..kernel {
                                        let iy = (oy * stride + ky) as isize - pad as isize;
                                        let ix = (ox * stride + kx) as isize - pad as isize;
                                        s += w[(ky * kernel + kx) * c + ch] * xv(iy, ix, ch);
                                    }
                                }
                                want[(oy * o + ox) * c + ch] = expect(s, bias[ch], mult[ch], r);
                            }
                        }
                    }
                    for &isa in &tiers {
                        let mut got = vec![0xa5u8; o * o * c];
                        assert!(depthwise_rows_on(isa, &layer, &x, 0..o, &mut got));
                        assert_eq!(
                            got,
                            want,
                            "{}: c {c} k {kernel} s {stride} hw {hw}",
                            isa.name()
                        );
                        checked += got.len();
                    }
                }
            }
        }
    }
    assert!(checked > 20_000, "{checked}");
}

/// The recorded outputs of LiteRT's builtin int8 convolutions on mobilenet_v3_small's layers
/// (`testdata/tflite/q8_rules/builtin_conv.json`: each layer's exact sums, bias included,
/// and LiteRT's bytes) through the kernels' fixed-point requantization, the one every tier's
/// GEMM and depthwise layer applies: every byte equals LiteRT's.
#[test]
fn fixed_point_requantization_equals_recorded_litert_layers() {
    use backplane_core::quant::fixed_point_multiplier;
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/tflite/q8_rules/builtin_conv.json"
    );
    let text = std::fs::read_to_string(path).expect("recorded cases");
    let layers: serde_json::Value = serde_json::from_str(&text).expect("json");
    let f = |v: &serde_json::Value| v.as_f64().expect("number");
    let i = |v: &serde_json::Value| v.as_i64().expect("integer");
    let mut checked = 0;
    for layer in layers.as_array().expect("layers") {
        let x_scale = f(&layer["x_scale"]) as f32;
        let w_scales: Vec<f32> = layer["w_scales"]
            .as_array()
            .expect("w_scales")
            .iter()
            .map(|v| f(v) as f32)
            .collect();
        let (y_scale, y_zero) = (f(&layer["y"][0]) as f32, i(&layer["y"][1]) as i32);
        let (lo, hi) = (i(&layer["range"][0]) as i32, i(&layer["range"][1]) as i32);
        let r = RequantRange {
            zero: y_zero as f32,
            lo: (lo - y_zero) as f32,
            hi: (hi - y_zero) as f32,
        };
        let channels = i(&layer["channels"]) as usize;
        let sums = layer["sums"].as_array().expect("sums");
        let litert = layer["litert"].as_array().expect("litert");
        assert_eq!(sums.len(), litert.len());
        for (e, (s, want)) in sums.iter().zip(litert).enumerate() {
            let ch = e % channels;
            let w = if w_scales.len() == 1 {
                w_scales[0]
            } else {
                w_scales[ch]
            };
            let m = fixed_point_multiplier(x_scale, w, y_scale);
            let got = requant_fixed_one(i(s) as i32, 0, m, r);
            let got = if lo < 0 {
                i64::from(got as i8)
            } else {
                i64::from(got)
            };
            assert_eq!(got, i(want), "layer {} element {e}", layer["layer"]);
            checked += 1;
        }
    }
    assert!(checked > 10_000, "{checked}");
}

/// The AVX-512 depthwise body's fixed-point requantization of 16 lanes equals the scalar
/// rule on extreme operands: sums at i32's bounds and near zero, Q31 multipliers from 0 to
/// i32::MAX and negative, shifts from −31 (and past it) to +31, every lane its own.
#[cfg(target_arch = "x86_64")]
#[test]
fn fixed16_equals_the_scalar_rule_at_the_extremes() {
    use super::fixed_avx512::{fixed16, FixedConsts};
    use std::arch::x86_64::*;
    if !std::arch::is_x86_feature_detected!("avx512f") {
        return;
    }
    let sums = [
        i32::MIN,
        i32::MIN + 1,
        -(1 << 30),
        -65_536,
        -1,
        0,
        1,
        2,
        3,
        127,
        65_535,
        1 << 30,
        i32::MAX - 1,
        i32::MAX,
        -1_000_003,
        999_983,
    ];
    let qs = [
        0,
        1,
        1 << 30,
        i32::MAX,
        (1 << 30) + 12_345,
        1_518_500_250,
        -(1 << 30),
    ];
    let shifts = [-40, -31, -30, -17, -8, -1, 0, 1, 2, 8, 30, 31];
    let mut checked = 0;
    for r in ranges() {
        // SAFETY: AVX-512F is present (checked above).
        let k = unsafe { FixedConsts::new(r) };
        for i in 0..qs.len() {
            for j in 0..shifts.len() {
                // Each lane its own sum, and every fourth lane another multiplier and shift.
                let lane_q: [i32; 16] = std::array::from_fn(|l| qs[(i + l / 4) % qs.len()]);
                let lane_shift: [i32; 16] =
                    std::array::from_fn(|l| shifts[(j + l / 4) % shifts.len()]);
                let left = lane_shift.map(|s| s.clamp(0, 31));
                let right = lane_shift.map(|s| (-s).clamp(0, 31));
                // SAFETY: AVX-512F is present; each array holds 16 lanes.
                let got: [i32; 16] = unsafe {
                    let load = |a: &[i32; 16]| _mm512_loadu_si512(a.as_ptr().cast());
                    std::mem::transmute(fixed16(
                        load(&sums),
                        load(&lane_q),
                        load(&left),
                        load(&right),
                        &k,
                    ))
                };
                for l in 0..16 {
                    let want = requant_fixed_one(sums[l], 0, (lane_q[l], lane_shift[l]), r);
                    assert_eq!(
                        got[l] as u8, want,
                        "sum {} q {} shift {} {r:?}",
                        sums[l], lane_q[l], lane_shift[l]
                    );
                    checked += 1;
                }
            }
        }
    }
    assert!(checked > 1000, "{checked}");
}
