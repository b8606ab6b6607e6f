//! Integer forms of quantized operators whose rounding a model format defines (TFLite's
//! int8 HARD_SWISH and AVERAGE_POOL_2D, issue 31): a byte table lookup ([`Op::Lookup`]) and
//! an integer average pool ([`Op::IntegerAveragePool`]). An importer lowers to them where the
//! format's integer rule differs from dequantize → f32 → quantize (round half to even), so
//! that every backend computes the format's bytes; ONNX models keep their f32 chains.
//!
//! [`Op::Lookup`]: super::Op::Lookup
//! [`Op::IntegerAveragePool`]: super::Op::IntegerAveragePool

use super::nn::{PoolDesc, PoolKind};
use crate::error::{CoreError, Result};
use crate::{DataType, TensorInfo};

/// Entries of a lookup table: one per byte.
pub const LOOKUP_ENTRIES: usize = 256;

/// The table index of an 8-bit value: its byte (an int8 value by its two's-complement byte,
/// so -1 reads entry 255).
pub fn lookup_index(dtype: DataType, v: i32) -> usize {
    match dtype {
        DataType::I8 => usize::from(v as i8 as u8),
        _ => usize::from(v as u8),
    }
}

/// `sum / count` rounded to the nearest integer, ties away from zero: TFLite's integer
/// average pooling (its reference and optimized kernels, and what LiteRT's default
/// interpreter computes; `scripts/probe_tflite_q8_rules.py`). `count` must be positive.
pub fn div_round_half_away(sum: i64, count: i64) -> i64 {
    let half = count / 2;
    if sum >= 0 {
        (sum + half) / count
    } else {
        -((-sum + half) / count)
    }
}

fn is_8bit(dt: DataType) -> bool {
    matches!(dt, DataType::I8 | DataType::U8)
}

/// Lookup: X (8-bit), table (1-D, 256 entries of an 8-bit type) → X's shape, the table's type.
pub(crate) fn infer_lookup(inputs: &[&TensorInfo]) -> Result<Vec<TensorInfo>> {
    let (x, t) = (inputs[0], inputs[1]);
    if !is_8bit(x.dtype) {
        return Err(CoreError::op(
            "Lookup",
            format!("the input must be int8 or uint8, got {}", x.dtype),
        ));
    }
    if !is_8bit(t.dtype) || t.shape.dims() != [LOOKUP_ENTRIES] {
        return Err(CoreError::op(
            "Lookup",
            format!(
                "the table must be 256 int8 or uint8 values, got {} {}",
                t.dtype, t.shape
            ),
        ));
    }
    Ok(vec![TensorInfo::new(t.dtype, x.shape.clone())])
}

/// IntegerAveragePool: an average pool over 8-bit integers, shaped as [`PoolDesc`]'s.
pub(crate) fn infer_integer_average_pool(
    p: &PoolDesc,
    inputs: &[&TensorInfo],
) -> Result<Vec<TensorInfo>> {
    let x = inputs[0];
    if p.kind != PoolKind::Average {
        return Err(CoreError::op(
            "IntegerAveragePool",
            "the pool kind must be Average",
        ));
    }
    if !is_8bit(x.dtype) {
        return Err(CoreError::op(
            "IntegerAveragePool",
            format!("the input must be int8 or uint8, got {}", x.dtype),
        ));
    }
    p.infer(inputs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ties_round_away_from_zero() {
        assert_eq!(div_round_half_away(2, 4), 1); // 0.5
        assert_eq!(div_round_half_away(-2, 4), -1); // -0.5
        assert_eq!(div_round_half_away(6, 4), 2); // 1.5
        assert_eq!(div_round_half_away(-6, 4), -2);
        assert_eq!(div_round_half_away(5, 4), 1); // 1.25
        assert_eq!(div_round_half_away(-5, 4), -1);
        assert_eq!(div_round_half_away(7, 4), 2); // 1.75
        assert_eq!(div_round_half_away(-7, 4), -2);
        assert_eq!(div_round_half_away(4, 9), 0); // 0.44
        assert_eq!(div_round_half_away(5, 9), 1); // 0.56
        assert_eq!(div_round_half_away(-5, 9), -1);
        assert_eq!(div_round_half_away(-127, 1), -127);
    }

    #[test]
    fn shapes_and_types_are_checked() {
        use crate::ops::{AutoPad, Op, Window};
        let x = TensorInfo::new(DataType::I8, vec![1, 3, 5, 4]);
        let table = TensorInfo::new(DataType::U8, vec![256]);
        let out = Op::Lookup.infer(&[&x, &table]).unwrap();
        assert_eq!(out, vec![TensorInfo::new(DataType::U8, vec![1, 3, 5, 4])]);
        let short = TensorInfo::new(DataType::U8, vec![255]);
        assert!(Op::Lookup.infer(&[&x, &short]).is_err());
        let wide = TensorInfo::new(DataType::I16, vec![256]);
        assert!(Op::Lookup.infer(&[&x, &wide]).is_err());
        let f = TensorInfo::new(DataType::F32, vec![1, 3, 5, 4]);
        assert!(Op::Lookup.infer(&[&f, &table]).is_err());
        let mut p = PoolDesc {
            kind: PoolKind::Average,
            window: Window {
                kernel: vec![2, 2],
                strides: vec![2, 2],
                dilations: Vec::new(),
                pads: Vec::new(),
                auto_pad: AutoPad::SameUpper,
            },
            ceil_mode: false,
            count_include_pad: false,
        };
        let out = Op::IntegerAveragePool(p.clone()).infer(&[&x]).unwrap();
        assert_eq!(out, vec![TensorInfo::new(DataType::I8, vec![1, 3, 3, 2])]);
        assert!(Op::IntegerAveragePool(p.clone()).infer(&[&f]).is_err());
        p.kind = PoolKind::Max;
        assert!(Op::IntegerAveragePool(p).infer(&[&x]).is_err());
    }

    #[test]
    fn int8_values_index_by_their_byte() {
        assert_eq!(lookup_index(DataType::I8, -1), 255);
        assert_eq!(lookup_index(DataType::I8, -128), 128);
        assert_eq!(lookup_index(DataType::I8, 127), 127);
        assert_eq!(lookup_index(DataType::U8, 200), 200);
    }
}
