//! int8/uint8 HARD_SWISH and AVERAGE_POOL_2D by TFLite's integer rules (issue 31), where the
//! dequantize → f32 → quantize chain the other quantized operators use rounds differently
//! (by one quantum in a few percent of elements, which grows through a network's layers).
//! `scripts/probe_tflite_q8_rules.py` found the rules against LiteRT (its default interpreter
//! and its reference kernels agree on every probed case) and recorded the cases under
//! `testdata/tflite/q8_rules/`.
//!
//! - HARD_SWISH becomes a [`Op::Lookup`] whose 256-entry table is [`hard_swish_table`]:
//!   TFLite's 16-bit fixed-point evaluation (`reference_ops::HardSwish` with the multipliers
//!   its `Prepare` derives from the scales).
//! - AVERAGE_POOL_2D becomes an [`Op::IntegerAveragePool`] on the stored integers (TFLite
//!   requires one quantization on both sides): the window's sum over its in-input taps,
//!   rounded half away from zero.

use super::{Cx, Tx};
use backplane_core::ops::LOOKUP_ENTRIES;
use backplane_core::{DataType, Op, Tensor, TensorId};

/// `m = q · 2^e` with `q` in [0.5, 1) for a positive finite normal `m` (C's `frexp`); `None`
/// otherwise.
fn frexp(m: f64) -> Option<(f64, i32)> {
    if !(m.is_finite() && m > 0.0 && m.is_normal()) {
        return None;
    }
    let bits = m.to_bits();
    let e = ((bits >> 52) & 0x7ff) as i32 - 1022;
    let q = f64::from_bits((bits & !(0x7ffu64 << 52)) | (1022u64 << 52));
    Some((q, e))
}

/// TFLite's `QuantizeMultiplier`: `m ≈ q / 2³¹ · 2^e` with a 31-bit `q` rounded half away
/// from zero; multipliers below 2⁻³¹ give (0, 0). `None` for a multiplier that is not a
/// positive finite number or that needs an exponent above 30.
fn quantize_multiplier(m: f64) -> Option<(i64, i32)> {
    let (q, mut e) = frexp(m)?;
    let mut fixed = (q * 2f64.powi(31)).round() as i64;
    if fixed == 1 << 31 {
        fixed /= 2;
        e += 1;
    }
    if e < -31 {
        return Some((0, 0));
    }
    (e <= 30).then_some((fixed, e))
}

/// TFLite's `DownScaleInt32ToInt16Multiplier`: the top 16 bits, rounded, saturated.
fn to_16bit(m: i64) -> i32 {
    if m >= i64::from(i32::MAX) - (1 << 15) {
        i32::from(i16::MAX)
    } else {
        ((m + (1 << 15)) >> 16) as i32
    }
}

/// C's integer division (truncating toward zero).
fn div_trunc(a: i32, b: i32) -> i32 {
    a / b
}

/// gemmlowp's 16-bit `SaturatingRoundingDoublingHighMul`: `a·b / 2¹⁵` rounded half away
/// from zero.
fn rounding_doubling_high_mul(a: i32, b: i32) -> i32 {
    if a == b && a == i32::from(i16::MIN) {
        return i32::from(i16::MAX);
    }
    let ab = a * b;
    let nudge = if ab >= 0 { 1 << 14 } else { 1 - (1 << 14) };
    div_trunc(ab + nudge, 1 << 15)
}

/// TFLite's 16-bit `SaturatingDoublingHighMul`: `a·b / 2¹⁵` truncated toward zero.
fn doubling_high_mul(a: i32, b: i32) -> i32 {
    if a == b && a == i32::from(i16::MIN) {
        return i32::from(i16::MAX);
    }
    div_trunc(a * b, 1 << 15)
}

/// gemmlowp's `RoundingDivideByPOT`: `x / 2^e` rounded half away from zero.
fn rounding_divide_by_pot(x: i32, e: i32) -> i32 {
    let mask = (1i32 << e) - 1;
    let remainder = x & mask;
    let threshold = (mask >> 1) + i32::from(x < 0);
    (x >> e) + i32::from(remainder > threshold)
}

/// `v · 2^shift` saturated to 16 bits.
fn saturating_shl16(v: i32, shift: i32) -> i32 {
    (i64::from(v) << shift).clamp(i64::from(i16::MIN), i64::from(i16::MAX)) as i32
}

/// The multipliers TFLite's HARD_SWISH `Prepare` derives from the scales: (output multiplier,
/// its exponent, "relu-ish" multiplier, its exponent), 16-bit. `None` where TFLite refuses
/// the scales (an output multiplier needing a left shift) or they are not usable.
fn hard_swish_params(sx: f32, sy: f32) -> Option<(i32, i32, i32, i32)> {
    let hires = (1.0f32 / 128.0) * sx;
    let (om, oe) = quantize_multiplier(f64::from(hires / sy))?;
    let (rm, re) = quantize_multiplier(f64::from(hires / (3.0f32 / 32768.0)))?;
    (oe <= 0).then_some((to_16bit(om), oe, to_16bit(rm), re))
}

/// TFLite's integer HARD_SWISH of one stored value `q`, on input `(scale, zero point)` `x`
/// and output `y`, clamped to `[lo, hi]`.
fn hard_swish_one(q: i32, zx: i32, zy: i32, p: (i32, i32, i32, i32), (lo, hi): (i32, i32)) -> i32 {
    let (om, oe, rm, re) = p;
    // The input on a scale 128 times finer, exact in 16 bits (|q - zx| ≤ 255).
    let hires = (q - zx) * 128;
    let preshift_out = rounding_doubling_high_mul(hires, om);
    // x / 3 on a 16-bit scale where 3 is 32768, saturated to [-1, 1].
    let mut reluish = hires;
    if re > 0 {
        reluish = saturating_shl16(reluish, re - 1);
    }
    reluish = rounding_doubling_high_mul(reluish, rm);
    if re > 0 {
        reluish = saturating_shl16(reluish, 1);
    }
    if re < 0 {
        reluish = rounding_divide_by_pot(reluish, -re);
    }
    // [-1, 1] → [0, 1].
    reluish = (reluish + (1 << 15)) >> 1;
    let out = doubling_high_mul(reluish, preshift_out);
    (rounding_divide_by_pot(out, -oe) + zy).clamp(lo, hi)
}

/// The lookup table of TFLite's integer HARD_SWISH from `dt` values quantized `(sx, zx)` to
/// `dt` values quantized `(sy, zy)`, indexed by the input byte; `None` where TFLite refuses
/// the scales.
pub(crate) fn hard_swish_table(
    dt: DataType,
    (sx, zx): (f32, i32),
    (sy, zy): (f32, i32),
) -> Option<Vec<u8>> {
    let p = hard_swish_params(sx, sy)?;
    let signed = match dt {
        DataType::I8 => true,
        DataType::U8 => false,
        _ => return None,
    };
    let range = if signed { (-128, 127) } else { (0, 255) };
    let table = (0..LOOKUP_ENTRIES)
        .map(|b| {
            let q = if signed {
                i32::from(b as u8 as i8)
            } else {
                b as i32
            };
            hard_swish_one(q, zx, zy, p, range) as u8
        })
        .collect();
    Some(table)
}

/// An 8-bit type with the (scale, zero point) of an input and of an output.
type EightBit = (DataType, (f32, i32), (f32, i32));

/// The 8-bit type and per-tensor quantizations of `x` and `out` when both are 8-bit
/// quantized tensors of one type; `None` otherwise (the f32 chain applies).
fn eight_bit(cx: &Cx<'_, '_, '_>, x: usize, out: usize) -> Tx<Option<EightBit>> {
    let dt = cx.dtype(x)?;
    if !matches!(dt, DataType::I8 | DataType::U8)
        || cx.dtype(out)? != dt
        || !cx.quantized(x)
        || !cx.quantized(out)
    {
        return Ok(None);
    }
    let (Ok(qx), Ok(qy)) = (cx.per_tensor(x), cx.per_tensor(out)) else {
        return Ok(None);
    };
    Ok(Some((dt, qx, qy)))
}

/// HARD_SWISH of 8-bit tensors as a table lookup; `false` when the operator is not one
/// (float, int16, or scales TFLite refuses), for the f32 chain.
pub(super) fn hard_swish(cx: &mut Cx<'_, '_, '_>) -> Tx<bool> {
    let (x, out) = (cx.input(0)?, cx.output(0)?);
    let Some((dt, qx, qy)) = eight_bit(cx, x, out)? else {
        return Ok(false);
    };
    let Some(table) = hard_swish_table(dt, qx, qy) else {
        return Ok(false);
    };
    let table = if dt == DataType::I8 {
        Tensor::from_vec(
            vec![LOOKUP_ENTRIES],
            table.into_iter().map(|b| b as i8).collect::<Vec<i8>>(),
        )?
    } else {
        Tensor::from_vec(vec![LOOKUP_ENTRIES], table)?
    };
    let (id, nchw) = cx.any(x)?;
    let t = cx.g.constant("hard_swish_table", table)?;
    let name = cx.fresh("Lookup");
    let y = cx.g.layer(&name, Op::Lookup, &[id, t])?;
    cx.emit(out, y, nchw)?;
    Ok(true)
}

/// The channels-first 8-bit input of an AVERAGE_POOL_2D that pools its stored integers
/// ([`Op::IntegerAveragePool`]): both sides 8-bit with one quantization and no fused
/// activation. `None` otherwise, for the f32 chain.
pub(super) fn integer_pool_input(
    cx: &mut Cx<'_, '_, '_>,
    x: usize,
    out: usize,
    activation: i8,
) -> Tx<Option<TensorId>> {
    let Some((_, qx, qy)) = eight_bit(cx, x, out)? else {
        return Ok(None);
    };
    // A fused activation clamps in output units (not carried yet: the f32 chain).
    if qx != qy || activation != crate::schema::activation::NONE {
        return Ok(None);
    }
    Ok(Some(cx.form(x, true)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multipliers_are_tflites() {
        assert_eq!(frexp(1.0), Some((0.5, 1)));
        assert_eq!(frexp(0.75), Some((0.75, 0)));
        assert_eq!(frexp(0.0), None);
        assert_eq!(quantize_multiplier(0.5), Some((1 << 30, 0)));
        assert_eq!(quantize_multiplier(1.0), Some((1 << 30, 1)));
        // Rounds up to 2³¹: halved, exponent up.
        assert_eq!(quantize_multiplier(1.0 - 1e-12), Some((1 << 30, 1)));
        assert_eq!(quantize_multiplier(1e-12), Some((0, 0)));
        assert_eq!(to_16bit(1 << 30), 1 << 14);
        assert_eq!(to_16bit(i64::from(i32::MAX)), 32767);
    }

    /// The HARD_SWISH cases `scripts/probe_tflite_q8_rules.py` recorded: the table equals
    /// LiteRT's output (default interpreter and reference kernels) on every int8 input.
    #[test]
    fn hard_swish_tables_equal_litert() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../testdata/tflite/q8_rules/cases.json"
        );
        let text = std::fs::read_to_string(path).unwrap();
        let cases: serde_json::Value = serde_json::from_str(&text).unwrap();
        let pair =
            |v: &serde_json::Value| (v[0].as_f64().unwrap() as f32, v[1].as_i64().unwrap() as i32);
        let ints = |v: &serde_json::Value| -> Vec<i64> {
            v.as_array()
                .unwrap()
                .iter()
                .map(|e| e.as_i64().unwrap())
                .collect()
        };
        let mut checked = 0;
        for case in cases.as_array().unwrap() {
            if case["op"] != "HARD_SWISH" {
                continue;
            }
            let (qx, qy) = (pair(&case["in"]), pair(&case["out"]));
            let table = hard_swish_table(DataType::I8, qx, qy).unwrap();
            // Inputs -128..127 in order: byte b holds the value b as i8.
            let ours: Vec<i64> = (-128i32..128)
                .map(|q| i64::from(table[usize::from(q as i8 as u8)] as i8))
                .collect();
            assert_eq!(ours, ints(&case["y"]), "{qx:?} → {qy:?}");
            assert_eq!(ours, ints(&case["y_ref"]), "{qx:?} → {qy:?}");
            checked += 1;
        }
        assert_eq!(checked, 6);
    }

    #[test]
    fn uint8_tables_clamp_to_the_unsigned_range() {
        // Scale 1/16 around 128: inputs -8..8 in real units; the output's zero point 0
        // cannot hold negatives, which clamp to 0.
        let t = hard_swish_table(DataType::U8, (1.0 / 16.0, 128), (1.0 / 32.0, 0)).unwrap();
        assert_eq!(t[128], 0); // 0 → 0
        assert_eq!(t[0], 0); // -8 → 0
        assert_eq!(t[127], 0); // -0.0625 → -0.03 → 0
        assert_eq!(t[255], 254); // 7.94 → 254 units
        assert_eq!(t[160], 53); // 2 → 2 · 5/6 = 1.67 → 53.3 units
        let t = hard_swish_table(DataType::U8, (1.0 / 16.0, 128), (1.0 / 64.0, 0)).unwrap();
        assert_eq!(t[255], 255); // 508 units saturate
        assert!(hard_swish_table(DataType::I16, (1.0, 0), (1.0, 0)).is_none());
    }

    #[test]
    fn fixed_point_helpers_round_as_gemmlowp() {
        assert_eq!(rounding_divide_by_pot(5, 1), 3); // 2.5 → 3
        assert_eq!(rounding_divide_by_pot(-5, 1), -3); // -2.5 → -3
        assert_eq!(rounding_divide_by_pot(-4, 1), -2);
        assert_eq!(rounding_doubling_high_mul(16384, 16384), 8192);
        assert_eq!(rounding_doubling_high_mul(-32768, -32768), 32767);
        assert_eq!(doubling_high_mul(-3, 16384), -1); // -1.5 truncates toward zero
        assert_eq!(saturating_shl16(20000, 1), 32767);
        assert_eq!(saturating_shl16(-20000, 1), -32768);
    }
}
