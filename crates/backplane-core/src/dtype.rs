//! Element data types.

use std::fmt;

/// The element type of a tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DataType {
    /// 32-bit IEEE float.
    F32,
    /// 16-bit IEEE float.
    F16,
    /// Signed 8-bit integer (also quantized data).
    I8,
    /// Unsigned 8-bit integer (also quantized data).
    U8,
    /// Signed 32-bit integer.
    I32,
    /// Signed 64-bit integer (ONNX shapes and indices).
    I64,
    /// Boolean, one byte per element (0 or 1).
    Bool,
    /// 64-bit IEEE float (ONNX DOUBLE).
    F64,
    /// Signed 16-bit integer.
    I16,
    /// Unsigned 16-bit integer.
    U16,
    /// Unsigned 32-bit integer.
    U32,
    /// Unsigned 64-bit integer (kernels that widen to i64 wrap values above `i64::MAX`).
    U64,
    /// bfloat16 (8 exponent bits, 7 mantissa bits), stored as [`half::bf16`]. Storage only:
    /// Cast, QuantizeLinear / DequantizeLinear and data movement take it, arithmetic does not.
    BF16,
    /// float8 E4M3FN: 4 exponent bits (bias 7), 3 mantissa bits, no infinities, NaN is
    /// `S.1111.111`; one byte holding the bit pattern (see [`crate::lowp`]). Storage only.
    F8E4M3Fn,
    /// float8 E4M3FNUZ: 4 exponent bits (bias 8), 3 mantissa bits, no infinities, no -0, the
    /// only NaN is `0x80`; one byte holding the bit pattern. Storage only.
    F8E4M3Fnuz,
    /// float8 E5M2: 5 exponent bits (bias 15), 2 mantissa bits, IEEE-like infinities and
    /// NaNs; one byte holding the bit pattern. Storage only.
    F8E5M2,
    /// float8 E5M2FNUZ: 5 exponent bits (bias 16), 2 mantissa bits, no infinities, no -0, the
    /// only NaN is `0x80`; one byte holding the bit pattern. Storage only.
    F8E5M2Fnuz,
    /// Signed 4-bit integer (-8..=7), stored *unpacked*: one element per byte, an `i8` in
    /// range (ONNX packs two per byte; the importer unpacks). Storage only.
    I4,
    /// Unsigned 4-bit integer (0..=15), stored *unpacked*: one element per byte, a `u8` in
    /// range. Storage only.
    U4,
}

impl DataType {
    /// All data types, in declaration order: the [`DataType::ORDINARY`] ones, then the
    /// [`DataType::LOW_PRECISION`] ones.
    pub const ALL: [DataType; 19] = {
        let mut all = [DataType::F32; 19];
        let mut i = 0;
        while i < all.len() {
            all[i] = if i < 12 {
                DataType::ORDINARY[i]
            } else {
                DataType::LOW_PRECISION[i - 12]
            };
            i += 1;
        }
        all
    };

    /// Every type except the storage-only low-precision ones (bf16, float8, int4/uint4):
    /// what ops that compare or select values take.
    pub const ORDINARY: [DataType; 12] = [
        DataType::F32,
        DataType::F16,
        DataType::I8,
        DataType::U8,
        DataType::I32,
        DataType::I64,
        DataType::Bool,
        DataType::F64,
        DataType::I16,
        DataType::U16,
        DataType::U32,
        DataType::U64,
    ];

    /// The storage-only low-precision types: what only Cast, QuantizeLinear,
    /// DequantizeLinear and data movement take.
    pub const LOW_PRECISION: [DataType; 7] = [
        DataType::BF16,
        DataType::F8E4M3Fn,
        DataType::F8E4M3Fnuz,
        DataType::F8E5M2,
        DataType::F8E5M2Fnuz,
        DataType::I4,
        DataType::U4,
    ];

    /// The float8 types.
    pub const FLOAT8: [DataType; 4] = [
        DataType::F8E4M3Fn,
        DataType::F8E4M3Fnuz,
        DataType::F8E5M2,
        DataType::F8E5M2Fnuz,
    ];

    /// Every number type (no Bool): what arithmetic and comparisons take.
    pub const NUMERIC: [DataType; 11] = [
        DataType::F32,
        DataType::F16,
        DataType::F64,
        DataType::I8,
        DataType::U8,
        DataType::I16,
        DataType::U16,
        DataType::I32,
        DataType::U32,
        DataType::I64,
        DataType::U64,
    ];

    /// The signed number types: what Neg, Abs-like and sign-sensitive ops take.
    pub const SIGNED: [DataType; 7] = [
        DataType::F32,
        DataType::F16,
        DataType::F64,
        DataType::I8,
        DataType::I16,
        DataType::I32,
        DataType::I64,
    ];

    /// The integer types: what bitwise ops take.
    pub const INTEGERS: [DataType; 8] = [
        DataType::I8,
        DataType::U8,
        DataType::I16,
        DataType::U16,
        DataType::I32,
        DataType::U32,
        DataType::I64,
        DataType::U64,
    ];

    /// Size of one element in bytes.
    pub fn size(self) -> usize {
        match self {
            DataType::F32 | DataType::I32 | DataType::U32 => 4,
            DataType::F16 | DataType::I16 | DataType::U16 | DataType::BF16 => 2,
            DataType::I8
            | DataType::U8
            | DataType::Bool
            | DataType::F8E4M3Fn
            | DataType::F8E4M3Fnuz
            | DataType::F8E5M2
            | DataType::F8E5M2Fnuz
            | DataType::I4
            | DataType::U4 => 1,
            DataType::I64 | DataType::F64 | DataType::U64 => 8,
        }
    }

    /// The lowercase name used in messages and on the command line (`f32`, `i64`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DataType::F32 => "f32",
            DataType::F16 => "f16",
            DataType::I8 => "i8",
            DataType::U8 => "u8",
            DataType::I32 => "i32",
            DataType::I64 => "i64",
            DataType::Bool => "bool",
            DataType::F64 => "f64",
            DataType::I16 => "i16",
            DataType::U16 => "u16",
            DataType::U32 => "u32",
            DataType::U64 => "u64",
            DataType::BF16 => "bf16",
            DataType::F8E4M3Fn => "f8e4m3fn",
            DataType::F8E4M3Fnuz => "f8e4m3fnuz",
            DataType::F8E5M2 => "f8e5m2",
            DataType::F8E5M2Fnuz => "f8e5m2fnuz",
            DataType::I4 => "i4",
            DataType::U4 => "u4",
        }
    }

    /// True for F32, F16 and F64 (the float types kernels compute in; see also
    /// [`DataType::is_low_precision`]).
    pub fn is_float(self) -> bool {
        matches!(self, DataType::F32 | DataType::F16 | DataType::F64)
    }

    /// True for the float8 types.
    pub fn is_float8(self) -> bool {
        DataType::FLOAT8.contains(&self)
    }

    /// True for the storage-only low-precision types: bf16, float8, int4 and uint4.
    pub fn is_low_precision(self) -> bool {
        !DataType::ORDINARY.contains(&self)
    }

    /// The ONNX `TensorProto.DataType` number (FLOAT = 1, UINT8 = 2, ... FLOAT16 = 10), used by
    /// the importer, the plugin ABI and attribute serialization.
    pub fn onnx_code(self) -> i64 {
        match self {
            DataType::F32 => 1,
            DataType::U8 => 2,
            DataType::I8 => 3,
            DataType::I32 => 6,
            DataType::I64 => 7,
            DataType::Bool => 9,
            DataType::F16 => 10,
            DataType::F64 => 11,
            DataType::U16 => 4,
            DataType::I16 => 5,
            DataType::U32 => 12,
            DataType::U64 => 13,
            DataType::BF16 => 16,
            DataType::F8E4M3Fn => 17,
            DataType::F8E4M3Fnuz => 18,
            DataType::F8E5M2 => 19,
            DataType::F8E5M2Fnuz => 20,
            DataType::U4 => 21,
            DataType::I4 => 22,
        }
    }

    /// The data type of an ONNX `TensorProto.DataType` number, if backplane has it.
    pub fn from_onnx_code(code: i64) -> Option<DataType> {
        DataType::ALL.into_iter().find(|d| d.onnx_code() == code)
    }

    /// True for the integer types (not Bool, not the 4-bit storage types).
    pub fn is_integer(self) -> bool {
        matches!(
            self,
            DataType::I8
                | DataType::U8
                | DataType::I16
                | DataType::U16
                | DataType::I32
                | DataType::U32
                | DataType::I64
                | DataType::U64
        )
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for DataType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "f32" | "float32" | "float" => DataType::F32,
            "f16" | "float16" => DataType::F16,
            "i8" | "int8" => DataType::I8,
            "u8" | "uint8" => DataType::U8,
            "i32" | "int32" => DataType::I32,
            "i64" | "int64" => DataType::I64,
            "bool" => DataType::Bool,
            "f64" | "float64" | "double" => DataType::F64,
            "i16" | "int16" => DataType::I16,
            "u16" | "uint16" => DataType::U16,
            "u32" | "uint32" => DataType::U32,
            "u64" | "uint64" => DataType::U64,
            "bf16" | "bfloat16" => DataType::BF16,
            "f8e4m3fn" | "float8e4m3fn" => DataType::F8E4M3Fn,
            "f8e4m3fnuz" | "float8e4m3fnuz" => DataType::F8E4M3Fnuz,
            "f8e5m2" | "float8e5m2" => DataType::F8E5M2,
            "f8e5m2fnuz" | "float8e5m2fnuz" => DataType::F8E5M2Fnuz,
            "i4" | "int4" => DataType::I4,
            "u4" | "uint4" => DataType::U4,
            other => return Err(format!("unknown data type '{other}'")),
        })
    }
}

/// Rust element types that can live in a tensor.
pub trait Element: bytemuck::Pod + Copy + Send + Sync + 'static {
    /// The matching [`DataType`].
    const DTYPE: DataType;
}

impl Element for f32 {
    const DTYPE: DataType = DataType::F32;
}
impl Element for half::f16 {
    const DTYPE: DataType = DataType::F16;
}
impl Element for i8 {
    const DTYPE: DataType = DataType::I8;
}
impl Element for u8 {
    const DTYPE: DataType = DataType::U8;
}
impl Element for i32 {
    const DTYPE: DataType = DataType::I32;
}
impl Element for i64 {
    const DTYPE: DataType = DataType::I64;
}
impl Element for f64 {
    const DTYPE: DataType = DataType::F64;
}
impl Element for i16 {
    const DTYPE: DataType = DataType::I16;
}
impl Element for u16 {
    const DTYPE: DataType = DataType::U16;
}
impl Element for u32 {
    const DTYPE: DataType = DataType::U32;
}
impl Element for u64 {
    const DTYPE: DataType = DataType::U64;
}
impl Element for half::bf16 {
    const DTYPE: DataType = DataType::BF16;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_codes_and_sizes_round_trip() {
        for d in DataType::ALL {
            assert_eq!(d.name().parse::<DataType>(), Ok(d));
            assert_eq!(DataType::from_onnx_code(d.onnx_code()), Some(d));
        }
        assert_eq!(DataType::BF16.size(), 2);
        assert_eq!(DataType::F8E5M2.size(), 1);
        // 4-bit types are stored one element per byte.
        assert_eq!(DataType::I4.size(), 1);
        assert_eq!(DataType::from_onnx_code(21), Some(DataType::U4));
        assert_eq!(DataType::from_onnx_code(22), Some(DataType::I4));
        assert_eq!(DataType::from_onnx_code(8), None);
        assert_eq!("float8e4m3fnuz".parse(), Ok(DataType::F8E4M3Fnuz));
    }

    #[test]
    fn low_precision_types_stay_out_of_the_arithmetic_groups() {
        for d in DataType::ALL {
            let low = d.is_low_precision();
            assert_eq!(low, !DataType::ORDINARY.contains(&d), "{d}");
            if low {
                assert!(!DataType::NUMERIC.contains(&d), "{d}");
                assert!(!DataType::SIGNED.contains(&d), "{d}");
                assert!(!DataType::INTEGERS.contains(&d), "{d}");
                assert!(!d.is_float() && !d.is_integer(), "{d}");
            }
        }
        assert!(DataType::F8E4M3Fn.is_float8() && !DataType::BF16.is_float8());
    }
}
