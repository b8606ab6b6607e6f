//! ONNX tensors (`TensorProto`) to backplane tensors: element types, the typed fields, raw data
//! and external data files.

use crate::proto::tensor_proto::{DataLocation, DataType as OnnxType};
use crate::proto::TensorProto;
use crate::OnnxError;
use backplane_core::{DataType, Tensor, TensorInfo};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Component, Path, PathBuf};

/// The backplane type for an ONNX `TensorProto.DataType` code, if backplane has one.
pub(crate) fn map_dtype(code: i32) -> Option<DataType> {
    DataType::from_onnx_code(i64::from(code))
}

/// The ONNX name of a type code (`FLOAT`, `DOUBLE`, ... or `<code N>`).
pub(crate) fn dtype_name(code: i32) -> String {
    match OnnxType::try_from(code) {
        Ok(t) => t.as_str_name().to_string(),
        Err(_) => format!("<unknown type code {code}>"),
    }
}

/// Turn ONNX dims into a checked shape.
pub(crate) fn checked_dims(dims: &[i64], what: &str) -> Result<Vec<usize>, OnnxError> {
    dims.iter()
        .map(|&d| {
            usize::try_from(d)
                .map_err(|_| OnnxError::invalid(format!("{what} has a negative dimension {d}")))
        })
        .collect()
}

/// Check that a tensor of `dims` x `dtype` stays below the byte limit; returns its byte size.
pub(crate) fn check_size(
    name: &str,
    dims: &[usize],
    elem_size: usize,
    limit: usize,
) -> Result<usize, OnnxError> {
    let bytes = backplane_core::shape::checked_product(dims).and_then(|n| n.checked_mul(elem_size));
    match bytes {
        Some(b) if b <= limit => Ok(b),
        _ => Err(OnnxError::TensorTooLarge {
            name: name.to_string(),
            bytes,
            limit,
        }),
    }
}

/// A decoded constant: a backplane tensor, or a type backplane cannot hold.
#[derive(Debug, Clone)]
pub(crate) enum Decoded {
    /// A backplane tensor.
    Tensor(Tensor),
    /// An element type backplane has no tensor for; `values` holds the numbers where they are
    /// cheap to read (DOUBLE), so that such constants can still serve as operator parameters.
    Unsupported {
        /// Why it cannot be a tensor.
        reason: String,
        /// The ONNX element type name.
        dtype: String,
        /// The values as f64, when readable.
        values: Option<Vec<f64>>,
    },
}

/// Where external data files are looked up, and the size limit.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Loader<'a> {
    pub base_dir: Option<&'a Path>,
    pub max_bytes: usize,
}

fn expect_len(name: &str, what: &str, got: usize, want: usize) -> Result<(), OnnxError> {
    if got == want {
        Ok(())
    } else {
        Err(OnnxError::invalid(format!(
            "tensor '{name}' has {got} values in {what} but its shape needs {want}"
        )))
    }
}

impl Loader<'_> {
    /// Decode a tensor, taking its data out of `tp` to avoid a copy.
    pub(crate) fn decode(&self, tp: &mut TensorProto, name: &str) -> Result<Decoded, OnnxError> {
        let what = format!("tensor '{name}'");
        let dims = checked_dims(&tp.dims, &what)?;
        let code = tp.data_type.unwrap_or(0);
        if tp.segment.is_some() {
            return Err(OnnxError::invalid(format!(
                "{what} is segmented, which is not supported"
            )));
        }
        let Some(dtype) = map_dtype(code) else {
            let reason = format!("{what} has element type {}", dtype_name(code));
            let values = if code == OnnxType::Double as i32 {
                self.decode_doubles(tp, name, &dims).ok()
            } else {
                None
            };
            return Ok(Decoded::Unsupported {
                reason,
                dtype: dtype_name(code),
                values,
            });
        };
        let bytes = check_size(name, &dims, dtype.size(), self.max_bytes)?;
        let count = bytes / dtype.size();
        let info = TensorInfo::new(dtype, dims);
        let core = |e| OnnxError::core(name, e);
        let external = tp.data_location == Some(DataLocation::External as i32);
        if matches!(dtype, DataType::I4 | DataType::U4) {
            return self.decode_4bit(tp, name, info, count, external);
        }
        let mut t = if external {
            let mut t = Tensor::zeros(info).map_err(core)?;
            self.read_external(tp, name, t.bytes_mut())?;
            t
        } else if let Some(raw) = tp.raw_data.take() {
            expect_len(name, "raw_data (bytes)", raw.len(), bytes)?;
            Tensor::from_bytes(info, &raw).map_err(core)?
        } else {
            let mut t = Tensor::zeros(info).map_err(core)?;
            let out = t.bytes_mut();
            match dtype {
                DataType::F32 => {
                    expect_len(name, "float_data", tp.float_data.len(), count)?;
                    for (o, v) in out.chunks_exact_mut(4).zip(&tp.float_data) {
                        o.copy_from_slice(&v.to_le_bytes());
                    }
                }
                DataType::I16 | DataType::U16 => {
                    // One int32 per element; the low 16 bits are the value.
                    expect_len(name, "int32_data", tp.int32_data.len(), count)?;
                    for (o, &v) in out.chunks_exact_mut(2).zip(&tp.int32_data) {
                        o.copy_from_slice(&(v as u16).to_le_bytes());
                    }
                }
                DataType::U32 => {
                    expect_len(name, "uint64_data", tp.uint64_data.len(), count)?;
                    for (o, &v) in out.chunks_exact_mut(4).zip(&tp.uint64_data) {
                        o.copy_from_slice(&(v as u32).to_le_bytes());
                    }
                }
                DataType::U64 => {
                    expect_len(name, "uint64_data", tp.uint64_data.len(), count)?;
                    for (o, v) in out.chunks_exact_mut(8).zip(&tp.uint64_data) {
                        o.copy_from_slice(&v.to_le_bytes());
                    }
                }
                DataType::F64 => {
                    expect_len(name, "double_data", tp.double_data.len(), count)?;
                    for (o, v) in out.chunks_exact_mut(8).zip(&tp.double_data) {
                        o.copy_from_slice(&v.to_le_bytes());
                    }
                }
                DataType::I64 => {
                    expect_len(name, "int64_data", tp.int64_data.len(), count)?;
                    for (o, v) in out.chunks_exact_mut(8).zip(&tp.int64_data) {
                        o.copy_from_slice(&v.to_le_bytes());
                    }
                }
                DataType::I32 => {
                    expect_len(name, "int32_data", tp.int32_data.len(), count)?;
                    for (o, v) in out.chunks_exact_mut(4).zip(&tp.int32_data) {
                        o.copy_from_slice(&v.to_le_bytes());
                    }
                }
                DataType::F16 | DataType::BF16 => {
                    // Each int32 holds the 16 bits of one half float in its low half.
                    expect_len(name, "int32_data", tp.int32_data.len(), count)?;
                    for (o, &v) in out.chunks_exact_mut(2).zip(&tp.int32_data) {
                        o.copy_from_slice(&(v as u16).to_le_bytes());
                    }
                }
                DataType::I8
                | DataType::U8
                | DataType::Bool
                | DataType::F8E4M3Fn
                | DataType::F8E4M3Fnuz
                | DataType::F8E5M2
                | DataType::F8E5M2Fnuz => {
                    // One int32 per element; the low byte is the value (two's complement for
                    // i8, the bit pattern for float8).
                    expect_len(name, "int32_data", tp.int32_data.len(), count)?;
                    for (o, &v) in out.iter_mut().zip(&tp.int32_data) {
                        *o = if dtype == DataType::Bool {
                            u8::from(v != 0)
                        } else {
                            v as u8
                        };
                    }
                }
                // Handled by decode_4bit above.
                DataType::I4 | DataType::U4 => {}
            }
            return Ok(Decoded::Tensor(t));
        };
        if t.dtype() == DataType::Bool {
            for b in t.bytes_mut() {
                *b = u8::from(*b != 0);
            }
        }
        Ok(Decoded::Tensor(t))
    }

    /// int4 / uint4: ONNX packs two elements per byte (raw data, external data, and the low
    /// byte of each int32 of int32_data), the first in the low nibble; backplane stores one
    /// per byte.
    fn decode_4bit(
        &self,
        tp: &mut TensorProto,
        name: &str,
        info: TensorInfo,
        count: usize,
        external: bool,
    ) -> Result<Decoded, OnnxError> {
        let signed = info.dtype == DataType::I4;
        let packed_len = count.div_ceil(2);
        let packed = if external {
            let mut packed = vec![0u8; packed_len];
            self.read_external(tp, name, &mut packed)?;
            packed
        } else if let Some(raw) = tp.raw_data.take() {
            expect_len(name, "raw_data (bytes)", raw.len(), packed_len)?;
            raw
        } else {
            expect_len(name, "int32_data", tp.int32_data.len(), packed_len)?;
            tp.int32_data.iter().map(|&v| v as u8).collect()
        };
        let values = backplane_core::lowp::unpack_4bit(&packed, count, signed)
            .ok_or_else(|| OnnxError::invalid(format!("tensor '{name}': truncated 4-bit data")))?;
        Tensor::from_bytes(info, &values)
            .map(Decoded::Tensor)
            .map_err(|e| OnnxError::core(name, e))
    }

    fn decode_doubles(
        &self,
        tp: &TensorProto,
        name: &str,
        dims: &[usize],
    ) -> Result<Vec<f64>, OnnxError> {
        let bytes = check_size(name, dims, 8, self.max_bytes)?;
        if let Some(raw) = &tp.raw_data {
            expect_len(name, "raw_data (bytes)", raw.len(), bytes)?;
            Ok(raw
                .chunks_exact(8)
                .map(|c| {
                    let mut a = [0u8; 8];
                    a.copy_from_slice(c);
                    f64::from_le_bytes(a)
                })
                .collect())
        } else {
            expect_len(name, "double_data", tp.double_data.len(), bytes / 8)?;
            Ok(tp.double_data.clone())
        }
    }

    fn read_external(&self, tp: &TensorProto, name: &str, out: &mut [u8]) -> Result<(), OnnxError> {
        let mut location = None;
        let mut offset = 0u64;
        let mut length = None;
        for kv in &tp.external_data {
            let key = kv.key.as_deref().unwrap_or("");
            let value = kv.value.as_deref().unwrap_or("");
            let num = |v: &str| {
                v.trim()
                    .parse::<u64>()
                    .map_err(|_| OnnxError::ExternalData {
                        path: PathBuf::from(location.unwrap_or("")),
                        reason: format!(
                            "tensor '{name}': {key} '{v}' is not a non-negative integer"
                        ),
                    })
            };
            match key {
                "location" => location = Some(value),
                "offset" => offset = num(value)?,
                "length" => length = Some(num(value)?),
                _ => {}
            }
        }
        let location = location.filter(|l| !l.is_empty()).ok_or_else(|| {
            OnnxError::invalid(format!(
                "tensor '{name}' is stored externally but gives no location"
            ))
        })?;
        let err = |reason: String| OnnxError::ExternalData {
            path: PathBuf::from(location),
            reason: format!("tensor '{name}': {reason}"),
        };
        let base = self.base_dir.ok_or_else(|| {
            err(
                "the model refers to an external data file, but it was not loaded from a \
                 file and no base directory was given"
                    .into(),
            )
        })?;
        let rel = Path::new(location);
        if rel
            .components()
            .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
        {
            return Err(err(
                "the location must be a relative path inside the model's folder \
                 (absolute paths and '..' are rejected)"
                    .into(),
            ));
        }
        let full = base.join(rel);
        let io = |path: &Path, source| OnnxError::Io {
            path: path.to_path_buf(),
            source,
        };
        // Follow links and make sure the file still lies inside the model's folder.
        let canon_base = base.canonicalize().map_err(|e| io(base, e))?;
        let canon = full.canonicalize().map_err(|e| io(&full, e))?;
        if !canon.starts_with(&canon_base) {
            return Err(err("the location leads outside the model's folder".into()));
        }
        let want = out.len() as u64;
        if let Some(len) = length {
            if len != want {
                return Err(err(format!(
                    "length is {len} bytes but the tensor's shape needs {want}"
                )));
            }
        }
        // Only regular files: a FIFO would block the open for ever.
        crate::check_regular_file(&canon, u64::MAX).map_err(|e| io(&full, e))?;
        let mut file = std::fs::File::open(&canon).map_err(|e| io(&full, e))?;
        let file_len = file.metadata().map_err(|e| io(&full, e))?.len();
        let end = offset
            .checked_add(want)
            .ok_or_else(|| err("offset + length overflows".into()))?;
        if end > file_len {
            return Err(err(format!(
                "needs bytes {offset}..{end} but the file has only {file_len} bytes"
            )));
        }
        file.seek(SeekFrom::Start(offset))
            .map_err(|e| io(&full, e))?;
        file.read_exact(out).map_err(|e| io(&full, e))?;
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn loader() -> Loader<'static> {
        Loader {
            base_dir: None,
            max_bytes: 1 << 20,
        }
    }

    fn tp(dims: Vec<i64>, dtype: OnnxType) -> TensorProto {
        TensorProto {
            dims,
            data_type: Some(dtype as i32),
            ..Default::default()
        }
    }

    fn tensor(d: Decoded) -> Tensor {
        match d {
            Decoded::Tensor(t) => t,
            other => panic!("not a tensor: {other:?}"),
        }
    }

    #[test]
    fn typed_fields() {
        let mut p = tp(vec![2], OnnxType::Float);
        p.float_data = vec![1.5, -2.0];
        let t = tensor(loader().decode(&mut p, "f").unwrap());
        assert_eq!(t.as_slice::<f32>().unwrap(), &[1.5, -2.0]);

        let mut p = tp(vec![3], OnnxType::Int8);
        p.int32_data = vec![-1, 127, -128];
        let t = tensor(loader().decode(&mut p, "i8").unwrap());
        assert_eq!(t.as_slice::<i8>().unwrap(), &[-1, 127, -128]);

        let mut p = tp(vec![2], OnnxType::Uint8);
        p.int32_data = vec![255, 7];
        let t = tensor(loader().decode(&mut p, "u8").unwrap());
        assert_eq!(t.as_slice::<u8>().unwrap(), &[255, 7]);

        let mut p = tp(vec![3], OnnxType::Bool);
        p.int32_data = vec![1, 0, 5];
        let t = tensor(loader().decode(&mut p, "b").unwrap());
        assert_eq!(t.bytes(), &[1, 0, 1]);

        let mut p = tp(vec![2], OnnxType::Float16);
        p.int32_data = vec![0x3c00, 0xc000]; // 1.0, -2.0
        let t = tensor(loader().decode(&mut p, "h").unwrap());
        assert_eq!(t.to_f64_vec(), vec![1.0, -2.0]);

        let mut p = tp(vec![], OnnxType::Int64);
        p.int64_data = vec![-9];
        let t = tensor(loader().decode(&mut p, "s").unwrap());
        assert_eq!(t.shape().rank(), 0);
        assert_eq!(t.as_slice::<i64>().unwrap(), &[-9]);

        let mut p = tp(vec![2], OnnxType::Int32);
        p.int32_data = vec![3, -4];
        let t = tensor(loader().decode(&mut p, "i32").unwrap());
        assert_eq!(t.as_slice::<i32>().unwrap(), &[3, -4]);
    }

    #[test]
    fn raw_data_and_doubles() {
        let mut p = tp(vec![2, 1], OnnxType::Int32);
        p.raw_data = Some([7i32.to_le_bytes(), (-1i32).to_le_bytes()].concat());
        let t = tensor(loader().decode(&mut p, "r").unwrap());
        assert_eq!(t.as_slice::<i32>().unwrap(), &[7, -1]);
        assert_eq!(t.shape().dims(), &[2, 1]);

        let mut p = tp(vec![2], OnnxType::Double);
        p.double_data = vec![0.25, 4.0];
        let t = tensor(loader().decode(&mut p, "d").unwrap());
        assert_eq!(t.as_slice::<f64>().unwrap(), &[0.25, 4.0]);
        let mut p = tp(vec![1], OnnxType::Double);
        p.raw_data = Some((-1.5f64).to_le_bytes().to_vec());
        let t = tensor(loader().decode(&mut p, "d_raw").unwrap());
        assert_eq!(t.as_slice::<f64>().unwrap(), &[-1.5]);

        // 16-bit integers travel in int32_data, unsigned 32/64-bit ones in uint64_data.
        let mut p = tp(vec![2], OnnxType::Int16);
        p.int32_data = vec![-2, 300];
        let t = tensor(loader().decode(&mut p, "i16").unwrap());
        assert_eq!(t.as_slice::<i16>().unwrap(), &[-2, 300]);
        let mut p = tp(vec![2], OnnxType::Uint64);
        p.uint64_data = vec![u64::MAX, 5];
        let t = tensor(loader().decode(&mut p, "u64").unwrap());
        assert_eq!(t.as_slice::<u64>().unwrap(), &[u64::MAX, 5]);

        // A type backplane does not have is reported, not decoded.
        let mut p = tp(vec![1], OnnxType::Complex64);
        p.float_data = vec![3.0, 1.0];
        match loader().decode(&mut p, "c64").unwrap() {
            Decoded::Unsupported { reason, .. } => {
                assert!(reason.contains("COMPLEX64"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn low_precision_types() {
        // bf16: the low 16 bits of each int32, or two little-endian bytes of raw data.
        let mut p = tp(vec![2], OnnxType::Bfloat16);
        p.int32_data = vec![0x3FC0, 0xC000];
        let t = tensor(loader().decode(&mut p, "bf16").unwrap());
        assert_eq!(t.dtype(), DataType::BF16);
        assert_eq!(t.to_f64_vec(), vec![1.5, -2.0]);
        let mut p = tp(vec![1], OnnxType::Bfloat16);
        p.raw_data = Some(vec![0xC0, 0x3F]);
        assert_eq!(
            tensor(loader().decode(&mut p, "bf16").unwrap()).to_f64_vec(),
            vec![1.5]
        );

        // float8: one int32 (or one raw byte) per element holding the bit pattern.
        let mut p = tp(vec![3], OnnxType::Float8e4m3fn);
        p.int32_data = vec![0x38, 0xC4, 0x7E];
        let t = tensor(loader().decode(&mut p, "f8").unwrap());
        assert_eq!(t.dtype(), DataType::F8E4M3Fn);
        assert_eq!(t.bytes(), &[0x38, 0xC4, 0x7E]);
        assert_eq!(t.to_f64_vec(), vec![1.0, -3.0, 448.0]);
        let mut p = tp(vec![2], OnnxType::Float8e5m2fnuz);
        p.raw_data = Some(vec![0x40, 0x80]);
        let v = tensor(loader().decode(&mut p, "f8").unwrap()).to_f64_vec();
        assert_eq!(v[0], 1.0);
        assert!(v[1].is_nan());

        // int4: two per byte, low nibble first; an odd count leaves a padding nibble.
        let mut p = tp(vec![3], OnnxType::Int4);
        p.raw_data = Some(vec![0x8F, 0x07]);
        let t = tensor(loader().decode(&mut p, "i4").unwrap());
        assert_eq!(t.dtype(), DataType::I4);
        assert_eq!(t.as_slice::<i8>().unwrap(), &[-1, -8, 7]);
        let mut p = tp(vec![2, 2], OnnxType::Uint4);
        p.int32_data = vec![0x21, 0xF0];
        let t = tensor(loader().decode(&mut p, "u4").unwrap());
        assert_eq!(t.as_slice::<u8>().unwrap(), &[1, 2, 0, 15]);
        // The packed length is checked.
        let mut p = tp(vec![5], OnnxType::Uint4);
        p.raw_data = Some(vec![0x21, 0x43]);
        assert!(matches!(
            loader().decode(&mut p, "short"),
            Err(OnnxError::InvalidModel(_))
        ));
    }

    #[test]
    fn bad_tensors_are_errors() {
        let mut p = tp(vec![3], OnnxType::Float);
        p.float_data = vec![1.0];
        assert!(matches!(
            loader().decode(&mut p, "short"),
            Err(OnnxError::InvalidModel(_))
        ));
        let mut p = tp(vec![-1], OnnxType::Float);
        assert!(matches!(
            loader().decode(&mut p, "neg"),
            Err(OnnxError::InvalidModel(_))
        ));
        let mut p = tp(vec![1 << 40, 1 << 40], OnnxType::Float);
        assert!(matches!(
            loader().decode(&mut p, "huge"),
            Err(OnnxError::TensorTooLarge { bytes: None, .. })
        ));
        let mut p = tp(vec![1 << 20], OnnxType::Float);
        assert!(matches!(
            loader().decode(&mut p, "big"),
            Err(OnnxError::TensorTooLarge {
                bytes: Some(4194304),
                ..
            })
        ));
        let mut p = tp(vec![1], OnnxType::Float);
        p.data_location = Some(DataLocation::External as i32);
        p.external_data = vec![crate::proto::StringStringEntryProto {
            key: Some("location".into()),
            value: Some("w.bin".into()),
        }];
        assert!(matches!(
            loader().decode(&mut p, "ext"),
            Err(OnnxError::ExternalData { .. })
        ));
    }
}
