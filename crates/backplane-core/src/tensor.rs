//! Tensor descriptions, owned tensors and the borrowed views kernels work on.

use crate::dtype::Element;
use crate::{CoreError, DataType, Quantization, Result, Shape};

/// What a tensor is, without its data: element type, shape and quantization.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    /// Element type.
    pub dtype: DataType,
    /// Dimensions.
    pub shape: Shape,
    /// Quantization parameters ([`Quantization::None`] for plain tensors).
    pub quant: Quantization,
}

impl TensorInfo {
    /// A plain (unquantized) tensor description.
    pub fn new(dtype: DataType, shape: impl Into<Shape>) -> Self {
        TensorInfo {
            dtype,
            shape: shape.into(),
            quant: Quantization::None,
        }
    }

    /// Number of elements (overflow-checked).
    pub fn num_elements(&self) -> Result<usize> {
        self.shape.num_elements()
    }

    /// Size of the data in bytes (overflow-checked).
    pub fn num_bytes(&self) -> Result<usize> {
        self.num_elements()?
            .checked_mul(self.dtype.size())
            .ok_or_else(|| CoreError::SizeOverflow {
                shape: self.shape.0.clone(),
            })
    }

    /// Same dtype and shape (quantization ignored).
    pub fn same_layout(&self, other: &TensorInfo) -> bool {
        self.dtype == other.dtype && self.shape == other.shape
    }
}

impl std::fmt::Display for TensorInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{}", self.dtype, self.shape)
    }
}

/// A tensor that owns its data. The buffer is 8-byte aligned so that it can be viewed as any
/// element type without copying.
#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    info: TensorInfo,
    storage: Vec<u64>,
    len: usize,
}

fn words_for(bytes: usize) -> usize {
    bytes.div_ceil(8)
}

impl Tensor {
    /// A zero-filled tensor. A tensor whose memory cannot be allocated is an error
    /// ([`CoreError::OutOfMemory`]), not an abort.
    pub fn zeros(info: TensorInfo) -> Result<Self> {
        let len = info.num_bytes()?;
        let words = words_for(len);
        let mut storage = Vec::new();
        storage
            .try_reserve_exact(words)
            .map_err(|_| CoreError::OutOfMemory {
                shape: info.shape.0.clone(),
                bytes: len,
            })?;
        storage.resize(words, 0u64);
        Ok(Tensor { info, storage, len })
    }

    /// A tensor from raw little-endian bytes; the length must match the description.
    pub fn from_bytes(info: TensorInfo, bytes: &[u8]) -> Result<Self> {
        let mut t = Tensor::zeros(info)?;
        if bytes.len() != t.len {
            return Err(CoreError::DataLength {
                shape: t.info.shape.0.clone(),
                dtype: t.info.dtype,
                expected: t.len,
                actual: bytes.len(),
            });
        }
        t.bytes_mut().copy_from_slice(bytes);
        Ok(t)
    }

    /// A tensor from typed values; the count must match the shape.
    pub fn from_vec<T: Element>(shape: impl Into<Shape>, values: Vec<T>) -> Result<Self> {
        let info = TensorInfo::new(T::DTYPE, shape);
        Tensor::from_bytes(info, bytemuck::cast_slice(&values))
    }

    /// A boolean tensor.
    pub fn from_bools(shape: impl Into<Shape>, values: &[bool]) -> Result<Self> {
        let bytes: Vec<u8> = values.iter().map(|&b| u8::from(b)).collect();
        Tensor::from_bytes(TensorInfo::new(DataType::Bool, shape), &bytes)
    }

    /// A rank-0 tensor holding one value.
    pub fn scalar<T: Element>(value: T) -> Self {
        let mut t = Tensor {
            info: TensorInfo::new(T::DTYPE, Shape::scalar()),
            storage: vec![0u64; 1],
            len: T::DTYPE.size(),
        };
        t.bytes_mut().copy_from_slice(bytemuck::bytes_of(&value));
        t
    }

    /// The description.
    pub fn info(&self) -> &TensorInfo {
        &self.info
    }

    /// The element type.
    pub fn dtype(&self) -> DataType {
        self.info.dtype
    }

    /// The shape.
    pub fn shape(&self) -> &Shape {
        &self.info.shape
    }

    /// Replace the description by one with the same byte size (e.g. a reshape).
    pub fn reinterpret(mut self, info: TensorInfo) -> Result<Self> {
        let len = info.num_bytes()?;
        if len != self.len {
            return Err(CoreError::DataLength {
                shape: info.shape.0.clone(),
                dtype: info.dtype,
                expected: len,
                actual: self.len,
            });
        }
        self.info = info;
        Ok(self)
    }

    /// The raw bytes.
    pub fn bytes(&self) -> &[u8] {
        &bytemuck::cast_slice::<u64, u8>(&self.storage)[..self.len]
    }

    /// The raw bytes, writable.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut bytemuck::cast_slice_mut::<u64, u8>(&mut self.storage)[..self.len]
    }

    /// The elements as `T`; fails if `T` is not the tensor's type.
    pub fn as_slice<T: Element>(&self) -> Result<&[T]> {
        self.view().as_slice()
    }

    /// The elements as `T`, writable; fails if `T` is not the tensor's type.
    pub fn as_mut_slice<T: Element>(&mut self) -> Result<&mut [T]> {
        check_dtype(T::DTYPE, self.info.dtype)?;
        Ok(bytemuck::cast_slice_mut(self.bytes_mut()))
    }

    /// A borrowed view.
    pub fn view(&self) -> TensorView<'_> {
        TensorView {
            info: &self.info,
            data: self.bytes(),
        }
    }

    /// A borrowed writable view.
    pub fn view_mut(&mut self) -> TensorViewMut<'_> {
        let len = self.len;
        TensorViewMut {
            info: &self.info,
            data: &mut bytemuck::cast_slice_mut::<u64, u8>(&mut self.storage)[..len],
        }
    }

    /// The values converted to f64 (for printing and comparisons in tools and tests).
    pub fn to_f64_vec(&self) -> Vec<f64> {
        self.view().to_f64_vec()
    }

    /// A tensor of `info` from f64 values, converted to its type (integers truncate toward
    /// zero and saturate; bool is `value != 0`). The inverse of [`Tensor::to_f64_vec`].
    pub fn from_f64_values(info: TensorInfo, values: &[f64]) -> Result<Self> {
        let mut t = Tensor::zeros(info)?;
        let n = t.info.num_elements()?;
        if values.len() != n {
            return Err(CoreError::DataLength {
                shape: t.info.shape.0.clone(),
                dtype: t.info.dtype,
                expected: n * t.info.dtype.size(),
                actual: values.len() * t.info.dtype.size(),
            });
        }
        fn fill<T: Element>(t: &mut Tensor, values: &[f64], f: impl Fn(f64) -> T) -> Result<()> {
            for (d, &v) in t.as_mut_slice::<T>()?.iter_mut().zip(values) {
                *d = f(v);
            }
            Ok(())
        }
        match t.info.dtype {
            DataType::F32 => fill(&mut t, values, |v| v as f32)?,
            DataType::F64 => fill(&mut t, values, |v| v)?,
            DataType::I16 => fill(&mut t, values, |v| v as i16)?,
            DataType::U16 => fill(&mut t, values, |v| v as u16)?,
            DataType::U32 => fill(&mut t, values, |v| v as u32)?,
            DataType::U64 => fill(&mut t, values, |v| v as u64)?,
            DataType::F16 => fill(&mut t, values, half::f16::from_f64)?,
            DataType::I8 => fill(&mut t, values, |v| v as i8)?,
            DataType::U8 => fill(&mut t, values, |v| v as u8)?,
            DataType::I32 => fill(&mut t, values, |v| v as i32)?,
            DataType::I64 => fill(&mut t, values, |v| v as i64)?,
            DataType::Bool => {
                for (d, &v) in t.bytes_mut().iter_mut().zip(values) {
                    *d = u8::from(v != 0.0);
                }
            }
            DataType::BF16 => fill(&mut t, values, crate::lowp::f64_to_bf16)?,
            // float8: round to nearest even, saturating; 4-bit: truncate and saturate.
            dtype @ (DataType::F8E4M3Fn
            | DataType::F8E4M3Fnuz
            | DataType::F8E5M2
            | DataType::F8E5M2Fnuz) => {
                for (d, &v) in t.bytes_mut().iter_mut().zip(values) {
                    *d = crate::lowp::f64_to_float8(dtype, v, true).unwrap_or(0);
                }
            }
            DataType::I4 => {
                for (d, &v) in t.bytes_mut().iter_mut().zip(values) {
                    *d = (v.clamp(-8.0, 7.0) as i8) as u8;
                }
            }
            DataType::U4 => {
                for (d, &v) in t.bytes_mut().iter_mut().zip(values) {
                    *d = v.clamp(0.0, 15.0) as u8;
                }
            }
        }
        Ok(t)
    }
}

/// Whether a typed view of `expected` may read a tensor of `actual`: the same type, or one
/// byte per element reinterpreted: `u8` views read bool, uint4 and the float8 types (their
/// bit patterns, see [`crate::lowp`]), `i8` views read int4.
fn check_dtype(expected: DataType, actual: DataType) -> Result<()> {
    let byte_view = match expected {
        DataType::U8 => matches!(actual, DataType::Bool | DataType::U4) || actual.is_float8(),
        DataType::I8 => actual == DataType::I4,
        _ => false,
    };
    if expected == actual || byte_view {
        Ok(())
    } else {
        Err(CoreError::DataTypeMismatch { expected, actual })
    }
}

/// A read-only view of a tensor's data in host memory, as kernels receive their inputs.
#[derive(Debug, Clone, Copy)]
pub struct TensorView<'a> {
    /// The description.
    pub info: &'a TensorInfo,
    /// The raw bytes (8-byte aligned when the runtime allocated them).
    pub data: &'a [u8],
}

impl<'a> TensorView<'a> {
    /// The shape's dimensions.
    pub fn dims(&self) -> &'a [usize] {
        self.info.shape.dims()
    }

    /// The elements as `T` (U8 may also read Bool); fails on a type or alignment mismatch.
    pub fn as_slice<T: Element>(&self) -> Result<&'a [T]> {
        check_dtype(T::DTYPE, self.info.dtype)?;
        if self.data.is_empty() {
            // An empty tensor may sit at any address (e.g. a zero-byte arena region).
            return Ok(&[]);
        }
        bytemuck::try_cast_slice(self.data).map_err(|e| {
            CoreError::op(
                "view",
                format!("cannot view tensor data as {}: {e}", T::DTYPE),
            )
        })
    }

    /// The values converted to f64.
    pub fn to_f64_vec(&self) -> Vec<f64> {
        fn conv<T: Element>(v: &TensorView<'_>, f: impl Fn(T) -> f64) -> Vec<f64> {
            bytemuck::pod_collect_to_vec::<u8, T>(v.data)
                .into_iter()
                .map(f)
                .collect()
        }
        match self.info.dtype {
            DataType::F32 => conv::<f32>(self, f64::from),
            DataType::F64 => conv::<f64>(self, |x| x),
            DataType::I16 => conv::<i16>(self, f64::from),
            DataType::U16 => conv::<u16>(self, f64::from),
            DataType::U32 => conv::<u32>(self, f64::from),
            DataType::U64 => conv::<u64>(self, |x| x as f64),
            DataType::F16 => conv::<half::f16>(self, |x| f64::from(x.to_f32())),
            DataType::I8 => conv::<i8>(self, f64::from),
            DataType::U8 | DataType::Bool => conv::<u8>(self, f64::from),
            DataType::I32 => conv::<i32>(self, f64::from),
            DataType::I64 => conv::<i64>(self, |x| x as f64),
            DataType::BF16 => conv::<half::bf16>(self, f64::from),
            DataType::I4 => conv::<i8>(self, f64::from),
            DataType::U4 => conv::<u8>(self, f64::from),
            dtype @ (DataType::F8E4M3Fn
            | DataType::F8E4M3Fnuz
            | DataType::F8E5M2
            | DataType::F8E5M2Fnuz) => conv::<u8>(self, |b| {
                f64::from(crate::lowp::float8_to_f32(dtype, b).unwrap_or(f32::NAN))
            }),
        }
    }

    /// Copy into an owned tensor.
    pub fn to_tensor(&self) -> Result<Tensor> {
        Tensor::from_bytes(self.info.clone(), self.data)
    }
}

/// A writable view of a tensor's data in host memory, as kernels receive their outputs.
#[derive(Debug)]
pub struct TensorViewMut<'a> {
    /// The description.
    pub info: &'a TensorInfo,
    /// The raw bytes.
    pub data: &'a mut [u8],
}

impl TensorViewMut<'_> {
    /// The shape's dimensions.
    pub fn dims(&self) -> &[usize] {
        self.info.shape.dims()
    }

    /// The elements as `T`, writable; fails on a type or alignment mismatch.
    pub fn as_mut_slice<T: Element>(&mut self) -> Result<&mut [T]> {
        check_dtype(T::DTYPE, self.info.dtype)?;
        if self.data.is_empty() {
            return Ok(&mut []);
        }
        bytemuck::try_cast_slice_mut(self.data).map_err(|e| {
            CoreError::op(
                "view",
                format!("cannot view tensor data as {}: {e}", T::DTYPE),
            )
        })
    }

    /// Reborrow as a read-only view.
    pub fn as_view(&self) -> TensorView<'_> {
        TensorView {
            info: self.info,
            data: self.data,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_round_trip() {
        let t = Tensor::from_vec(vec![2, 2], vec![1.0f32, 2.0, 3.0, 4.0]).unwrap();
        assert_eq!(t.as_slice::<f32>().unwrap(), &[1.0, 2.0, 3.0, 4.0]);
        assert!(t.as_slice::<i32>().is_err());
        assert_eq!(t.info().num_bytes().unwrap(), 16);
        let i = Tensor::from_vec(vec![3], vec![1i64, -2, 3]).unwrap();
        assert_eq!(i.to_f64_vec(), vec![1.0, -2.0, 3.0]);
    }

    #[test]
    fn f64_values_convert_to_every_type() {
        for dtype in DataType::ALL {
            let info = TensorInfo::new(dtype, vec![3]);
            let t = Tensor::from_f64_values(info, &[0.0, 1.0, 2.0]).unwrap();
            let expected = if dtype == DataType::Bool {
                vec![0.0, 1.0, 1.0]
            } else {
                vec![0.0, 1.0, 2.0]
            };
            assert_eq!(t.to_f64_vec(), expected, "{dtype}");
        }
        assert!(Tensor::from_f64_values(TensorInfo::new(DataType::F32, vec![2]), &[1.0]).is_err());
    }

    #[test]
    fn low_precision_values_and_byte_views() {
        let info = TensorInfo::new(DataType::F8E4M3Fn, vec![4]);
        let t = Tensor::from_f64_values(info, &[1.0, -2.5, 1e6, f64::NAN]).unwrap();
        // 1 = 0x38, -2.5 = 0xC2, 1e6 saturates to 448 (0x7E), NaN is 0x7F.
        assert_eq!(t.bytes(), &[0x38, 0xC2, 0x7E, 0x7F]);
        assert_eq!(t.as_slice::<u8>().unwrap(), &[0x38, 0xC2, 0x7E, 0x7F]);
        assert!(t.as_slice::<i8>().is_err());
        let v = t.to_f64_vec();
        assert_eq!(&v[..3], &[1.0, -2.5, 448.0]);
        assert!(v[3].is_nan());
        let i4 =
            Tensor::from_f64_values(TensorInfo::new(DataType::I4, vec![3]), &[-9.0, 7.0, -3.0])
                .unwrap();
        assert_eq!(i4.as_slice::<i8>().unwrap(), &[-8, 7, -3]);
        assert!(i4.as_slice::<u8>().is_err());
        let u4 =
            Tensor::from_f64_values(TensorInfo::new(DataType::U4, vec![2]), &[16.0, 3.0]).unwrap();
        assert_eq!(u4.to_f64_vec(), vec![15.0, 3.0]);
        let b = Tensor::from_vec(vec![1], vec![half::bf16::from_f32(0.5)]).unwrap();
        assert_eq!(b.dtype(), DataType::BF16);
        assert_eq!(b.to_f64_vec(), vec![0.5]);
    }

    #[test]
    fn wrong_length_is_an_error() {
        let err = Tensor::from_vec(vec![2, 3], vec![1.0f32; 5]).unwrap_err();
        assert!(matches!(
            err,
            CoreError::DataLength {
                expected: 24,
                actual: 20,
                ..
            }
        ));
    }

    #[test]
    fn odd_byte_lengths_are_kept_exact() {
        let t = Tensor::from_bools(vec![3], &[true, false, true]).unwrap();
        assert_eq!(t.bytes(), &[1, 0, 1]);
        let s = Tensor::scalar(7i32);
        assert_eq!(s.as_slice::<i32>().unwrap(), &[7]);
        assert_eq!(s.shape().rank(), 0);
    }
}
