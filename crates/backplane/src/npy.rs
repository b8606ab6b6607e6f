//! Reading and writing NumPy `.npy` files (format 1.0–3.0, little-endian, C order).

use backplane_core::{DataType, Tensor, TensorInfo};
use std::path::{Path, PathBuf};

/// What can go wrong with a .npy file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NpyError {
    /// The file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a valid .npy file or uses a feature not supported.
    #[error("{path}: {message}")]
    Format {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
}

fn bad(path: &str, message: impl Into<String>) -> NpyError {
    NpyError::Format {
        path: path.to_string(),
        message: message.into(),
    }
}

/// The largest .npy file read: the importer's tensor limit
/// ([`backplane_onnx::DEFAULT_MAX_TENSOR_BYTES`]) plus room for the header.
pub const MAX_FILE_BYTES: u64 = backplane_onnx::DEFAULT_MAX_TENSOR_BYTES as u64 + (1 << 20);

/// Read a .npy file into a tensor. Only regular files of at most [`MAX_FILE_BYTES`] are read
/// (a FIFO or a device such as `/dev/zero` is refused at once).
pub fn read_file(path: &Path) -> Result<Tensor, NpyError> {
    let bytes =
        backplane_onnx::read_regular_file(path, MAX_FILE_BYTES).map_err(|source| NpyError::Io {
            path: path.to_path_buf(),
            source,
        })?;
    parse(&bytes, &path.display().to_string())
}

fn dtype_of(descr: &str) -> Option<DataType> {
    Some(match descr {
        "<f4" => DataType::F32,
        "<f2" => DataType::F16,
        "<f8" => DataType::F64,
        "<i2" => DataType::I16,
        "<u2" => DataType::U16,
        "<u4" => DataType::U32,
        "<u8" => DataType::U64,
        "|i1" | "<i1" => DataType::I8,
        "|u1" | "<u1" => DataType::U8,
        "<i4" => DataType::I32,
        "<i8" => DataType::I64,
        "|b1" => DataType::Bool,
        _ => return None,
    })
}

/// The type a tensor is written as: its own, or for the storage-only low-precision types
/// (which .npy has no standard type for) the narrowest standard type holding every value
/// exactly: f32 for bf16 and float8, i8 for int4, u8 for uint4.
fn stored_dtype(dtype: DataType) -> DataType {
    match dtype {
        DataType::I4 => DataType::I8,
        DataType::U4 => DataType::U8,
        d if d.is_low_precision() => DataType::F32,
        d => d,
    }
}

fn descr_of(dtype: DataType) -> &'static str {
    match stored_dtype(dtype) {
        DataType::F32 => "<f4",
        DataType::F16 => "<f2",
        DataType::F64 => "<f8",
        DataType::I16 => "<i2",
        DataType::U16 => "<u2",
        DataType::U32 => "<u4",
        DataType::U64 => "<u8",
        DataType::I8 => "|i1",
        DataType::U8 => "|u1",
        DataType::I32 => "<i4",
        DataType::I64 => "<i8",
        DataType::Bool => "|b1",
        // stored_dtype maps the low-precision types to the ones above.
        DataType::BF16
        | DataType::F8E4M3Fn
        | DataType::F8E4M3Fnuz
        | DataType::F8E5M2
        | DataType::F8E5M2Fnuz
        | DataType::I4
        | DataType::U4 => "<f4",
    }
}

/// Value of `'key': value` in the header dict, as raw text.
fn field<'a>(header: &'a str, key: &str) -> Option<&'a str> {
    let start = header.find(&format!("'{key}'"))? + key.len() + 2;
    let rest = header[start..].trim_start().strip_prefix(':')?.trim_start();
    let end = if rest.starts_with('(') {
        rest.find(')')? + 1
    } else {
        rest.find([',', '}']).unwrap_or(rest.len())
    };
    Some(rest[..end].trim())
}

/// Parse the bytes of a .npy file; `name` is used in messages.
pub fn parse(bytes: &[u8], name: &str) -> Result<Tensor, NpyError> {
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err(bad(name, "not a .npy file (bad magic)"));
    }
    let major = bytes[6];
    let (header_len, start) = match major {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10usize),
        2 | 3 => {
            if bytes.len() < 12 {
                return Err(bad(name, "truncated header"));
            }
            (
                u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
                12,
            )
        }
        v => return Err(bad(name, format!("unsupported .npy version {v}"))),
    };
    let end = start
        .checked_add(header_len)
        .filter(|&e| e <= bytes.len())
        .ok_or_else(|| bad(name, "truncated header"))?;
    let header =
        std::str::from_utf8(&bytes[start..end]).map_err(|_| bad(name, "header is not text"))?;
    let descr = field(header, "descr").ok_or_else(|| bad(name, "header has no 'descr'"))?;
    let descr = descr.trim_matches(|c| c == '\'' || c == '"');
    let dtype = dtype_of(descr).ok_or_else(|| {
        bad(name, format!("unsupported dtype '{descr}' (supported: f4, f2, i1, u1, i4, i8, b1, little-endian)"))
    })?;
    if field(header, "fortran_order") != Some("False") {
        return Err(bad(
            name,
            "Fortran-order arrays are not supported; save with C order",
        ));
    }
    let shape_text = field(header, "shape").ok_or_else(|| bad(name, "header has no 'shape'"))?;
    let dims = shape_text
        .trim_matches(|c| c == '(' || c == ')')
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<usize>()
                .map_err(|_| bad(name, format!("bad shape {shape_text}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let info = TensorInfo::new(dtype, dims);
    let expected = info.num_bytes().map_err(|e| bad(name, e.to_string()))?;
    let data = &bytes[end..];
    if data.len() != expected {
        return Err(bad(
            name,
            format!("{} data bytes, but {} needs {expected}", data.len(), info),
        ));
    }
    Tensor::from_bytes(info, data).map_err(|e| bad(name, e.to_string()))
}

/// Encode a tensor as .npy (format 1.0). bf16 and float8 tensors are written as f32, int4 as
/// i8 and uint4 as u8 (exactly; reading the file back gives that wider type).
pub fn to_bytes(tensor: &Tensor) -> Vec<u8> {
    let stored = stored_dtype(tensor.dtype());
    if stored != tensor.dtype() {
        let info = TensorInfo::new(stored, tensor.shape().clone());
        // The values are exact in the wider type, so this conversion cannot fail.
        if let Ok(wide) = Tensor::from_f64_values(info, &tensor.to_f64_vec()) {
            return to_bytes(&wide);
        }
    }
    let dims = tensor.shape().dims();
    let shape = match dims.len() {
        0 => "()".to_string(),
        1 => format!("({},)", dims[0]),
        _ => format!(
            "({})",
            dims.iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut header = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': {shape}, }}",
        descr_of(tensor.dtype())
    );
    // Pad so that the data starts on a 64-byte boundary, header ends with '\n'.
    let total = 10 + header.len() + 1;
    header.push_str(&" ".repeat((64 - total % 64) % 64));
    header.push('\n');
    let mut out = Vec::with_capacity(10 + header.len() + tensor.bytes().len());
    out.extend_from_slice(b"\x93NUMPY\x01\x00");
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(tensor.bytes());
    out
}

/// Write a tensor to a .npy file.
pub fn write_file(path: &Path, tensor: &Tensor) -> Result<(), NpyError> {
    std::fs::write(path, to_bytes(tensor)).map_err(|source| NpyError::Io {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn round_trip_every_dtype_and_rank() {
        let cases = vec![
            Tensor::from_vec(vec![2, 3], vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap(),
            Tensor::from_vec(vec![3], vec![1i64, -2, 3]).unwrap(),
            Tensor::from_vec(vec![1], vec![7i32]).unwrap(),
            Tensor::from_vec(vec![2, 1, 2], vec![1u8, 2, 3, 4]).unwrap(),
            Tensor::from_vec(vec![2], vec![-1i8, 1]).unwrap(),
            Tensor::from_bools(vec![2], &[true, false]).unwrap(),
            Tensor::scalar(2.5f32),
        ];
        for t in cases {
            let bytes = to_bytes(&t);
            assert_eq!((bytes.len() - t.bytes().len()) % 64, 0);
            assert_eq!(parse(&bytes, "t").unwrap(), t);
        }
    }

    #[test]
    fn low_precision_tensors_are_written_widened() {
        let info = TensorInfo::new(DataType::F8E5M2, vec![3]);
        let t = Tensor::from_f64_values(info, &[1.5, -0.25, 57344.0]).unwrap();
        let back = parse(&to_bytes(&t), "t").unwrap();
        assert_eq!(back.dtype(), DataType::F32);
        assert_eq!(back.to_f64_vec(), vec![1.5, -0.25, 57344.0]);
        let info = TensorInfo::new(DataType::I4, vec![2]);
        let t = Tensor::from_f64_values(info, &[-8.0, 7.0]).unwrap();
        let back = parse(&to_bytes(&t), "t").unwrap();
        assert_eq!(back.dtype(), DataType::I8);
        assert_eq!(back.to_f64_vec(), vec![-8.0, 7.0]);
        let b = Tensor::from_vec(vec![1], vec![half::bf16::from_f32(-3.0)]).unwrap();
        assert_eq!(parse(&to_bytes(&b), "b").unwrap().to_f64_vec(), vec![-3.0]);
    }

    #[test]
    fn malformed_files_are_errors() {
        assert!(parse(b"hello", "x").is_err());
        let t = Tensor::from_vec(vec![4], vec![1.0f32; 4]).unwrap();
        let bytes = to_bytes(&t);
        let err = parse(&bytes[..bytes.len() - 1], "x").unwrap_err();
        assert!(err.to_string().contains("needs 16"), "{err}");
        let mut big_endian = bytes.clone();
        let at = big_endian.windows(3).position(|w| w == b"<f4").unwrap();
        big_endian[at] = b'>';
        assert!(parse(&big_endian, "x").is_err());
    }
}
