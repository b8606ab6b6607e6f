//! NumPy arrays as the runtime's inputs and outputs: borrowed in place when contiguous and
//! aligned (one copy otherwise), and output arrays allocated so that the network writes into
//! them directly.

use crate::errors::{Error, Result};
use backplane::{DataType, Tensor, TensorInfo};
use half::f16;
use numpy::{
    IxDyn, PyArrayDescrMethods, PyArrayDyn, PyArrayMethods, PyReadonlyArrayDyn,
    PyReadwriteArrayDyn, PyUntypedArray, PyUntypedArrayMethods,
};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

/// The backplane type of a NumPy dtype (native byte order), if backplane has one.
pub fn dtype_of(array: &Bound<'_, PyUntypedArray>) -> Option<DataType> {
    let descr = array.dtype();
    if descr.is_native_byteorder() == Some(false) {
        return None;
    }
    Some(match (descr.kind(), descr.itemsize()) {
        (b'f', 4) => DataType::F32,
        (b'f', 8) => DataType::F64,
        (b'f', 2) => DataType::F16,
        (b'i', 1) => DataType::I8,
        (b'i', 2) => DataType::I16,
        (b'i', 4) => DataType::I32,
        (b'i', 8) => DataType::I64,
        (b'u', 1) => DataType::U8,
        (b'u', 2) => DataType::U16,
        (b'u', 4) => DataType::U32,
        (b'u', 8) => DataType::U64,
        (b'b', 1) => DataType::Bool,
        _ => return None,
    })
}

/// How an array's dtype reads in messages: backplane's name when it has the type, NumPy's
/// otherwise.
pub fn dtype_name(array: &Bound<'_, PyUntypedArray>) -> String {
    match dtype_of(array) {
        Some(d) => d.to_string(),
        None => array
            .dtype()
            .str()
            .map_or_else(|_| "an unknown dtype".into(), |s| s.to_string()),
    }
}

fn numpy_function<'py>(
    py: Python<'py>,
    cell: &'static PyOnceLock<Py<PyAny>>,
    name: &str,
) -> PyResult<Bound<'py, PyAny>> {
    cell.get_or_try_init(py, || {
        Ok::<_, PyErr>(py.import("numpy")?.getattr(name)?.unbind())
    })
    .map(|f| f.bind(py).clone())
}

/// The value as a NumPy array: itself when it is one, else `numpy.asarray(value)` (lists and
/// scalars, as ONNX Runtime takes them).
pub fn as_array<'py>(value: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyUntypedArray>> {
    if let Ok(array) = value.cast::<PyUntypedArray>() {
        return Ok(array.clone());
    }
    static ASARRAY: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let converted = numpy_function(value.py(), &ASARRAY, "asarray")?.call1((value,))?;
    Ok(converted.cast_into::<PyUntypedArray>()?)
}

/// The array itself when it is C-contiguous and aligned, else a C-contiguous, aligned copy.
fn contiguous<'py>(array: &Bound<'py, PyUntypedArray>) -> PyResult<Bound<'py, PyUntypedArray>> {
    if array.is_c_contiguous() && array.is_aligned() {
        return Ok(array.clone());
    }
    static REQUIRE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let copy =
        numpy_function(array.py(), &REQUIRE, "require")?.call1((array, array.py().None(), "CA"))?;
    Ok(copy.cast_into::<PyUntypedArray>()?)
}

/// The NumPy element types backplane reads and writes directly, with their backplane types.
macro_rules! numpy_types {
    ($m:ident) => {
        $m! {
            F32 f32, F64 f64, F16 f16, I8 i8, I16 i16, I32 i32, I64 i64,
            U8 u8, U16 u16, U32 u32, U64 u64, Bool bool
        }
    };
}

macro_rules! input_borrow {
    ($($variant:ident $ty:ty),*) => {
        /// A read-only borrow of an input array's data.
        pub enum Input<'py> {
            $(
                #[allow(missing_docs)]
                $variant(PyReadonlyArrayDyn<'py, $ty>),
            )*
        }

        impl<'py> Input<'py> {
            /// Borrow `array` (of backplane type `dtype`, contiguous or copied so).
            pub fn borrow(array: &Bound<'py, PyUntypedArray>, dtype: DataType) -> Result<Self> {
                let array = contiguous(array).map_err(|e| Error::fail(e.to_string()))?;
                let refused = |e: &dyn std::fmt::Display| {
                    Error::fail(format!("cannot read an input array: {e}"))
                };
                match dtype {
                    $(
                        DataType::$variant => Ok(Input::$variant(
                            array
                                .cast::<PyArrayDyn<$ty>>()
                                .map_err(|e| refused(&e))?
                                .try_readonly()
                                .map_err(|e| refused(&e))?,
                        )),
                    )*
                    other => Err(Error::unsupported(format!(
                        "NumPy has no {other} type; inputs of that type cannot be given from \
                         Python"
                    ))),
                }
            }

            /// The data as bytes.
            pub fn bytes(&self) -> Result<&[u8]> {
                let not_contiguous = |_| Error::fail("an input array is not contiguous");
                match self {
                    $(
                        Input::$variant(a) => {
                            a.as_slice().map(bytemuck::cast_slice).map_err(not_contiguous)
                        }
                    )*
                }
            }
        }
    };
}

numpy_types!(input_borrow);

macro_rules! output_buffer {
    ($($variant:ident $ty:ty),*) => {
        /// A writable borrow of a fresh output array.
        enum Writable<'py> {
            $(
                $variant(PyReadwriteArrayDyn<'py, $ty>),
            )*
        }

        impl Writable<'_> {
            fn bytes(&mut self) -> Result<&mut [u8]> {
                let not_contiguous = |_| Error::fail("an output array is not contiguous");
                match self {
                    $(
                        Writable::$variant(a) => a
                            .as_slice_mut()
                            .map(bytemuck::cast_slice_mut)
                            .map_err(not_contiguous),
                    )*
                }
            }
        }

        /// A new zero-filled array of `dtype` and `dims` with a writable borrow of it.
        fn new_writable<'py>(
            py: Python<'py>,
            dtype: DataType,
            dims: &[usize],
        ) -> Result<Option<(Bound<'py, PyAny>, Writable<'py>)>> {
            let refused = |e: &dyn std::fmt::Display| {
                Error::fail(format!("cannot write an output array: {e}"))
            };
            match dtype {
                $(
                    DataType::$variant => {
                        let a = PyArrayDyn::<$ty>::zeros(py, IxDyn(dims), false);
                        let w = a.try_readwrite().map_err(|e| refused(&e))?;
                        Ok(Some((a.into_any(), Writable::$variant(w))))
                    }
                )*
                _ => Ok(None),
            }
        }
    };
}

// Booleans are written as bytes (0 or 1) into a uint8 array, then viewed as bool: a bool slice
// cannot be handed out as bytes (not every byte is a valid bool).
macro_rules! output_types {
    ($m:ident) => {
        $m! {
            F32 f32, F64 f64, F16 f16, I8 i8, I16 i16, I32 i32, I64 i64,
            U8 u8, U16 u16, U32 u32, U64 u64
        }
    };
}

output_types!(output_buffer);

/// Where one output goes.
enum Target<'py> {
    /// Straight into a NumPy array; `as_bool` when it is a uint8 array to view as bool.
    Array {
        array: Bound<'py, PyAny>,
        writable: Writable<'py>,
        as_bool: bool,
    },
    /// Into a tensor first, for types NumPy lacks (bfloat16, float8, int4), widened after.
    Widened(Tensor),
}

/// The outputs of one execution: arrays the network writes into.
pub struct Outputs<'py> {
    targets: Vec<Target<'py>>,
}

impl<'py> Outputs<'py> {
    /// Allocate one output per description.
    pub fn allocate<'a>(
        py: Python<'py>,
        infos: impl Iterator<Item = &'a TensorInfo>,
    ) -> Result<Self> {
        let mut targets = Vec::new();
        for info in infos {
            let (dtype, as_bool) = match info.dtype {
                DataType::Bool => (DataType::U8, true),
                d => (d, false),
            };
            targets.push(match new_writable(py, dtype, info.shape.dims())? {
                Some((array, writable)) => Target::Array {
                    array,
                    writable,
                    as_bool,
                },
                None => Target::Widened(
                    Tensor::zeros(info.clone()).map_err(|e| Error::fail(e.to_string()))?,
                ),
            });
        }
        Ok(Outputs { targets })
    }

    /// The byte buffers, in order.
    pub fn buffers(&mut self) -> Result<Vec<&mut [u8]>> {
        self.targets
            .iter_mut()
            .map(|t| match t {
                Target::Array { writable, .. } => writable.bytes(),
                Target::Widened(tensor) => Ok(tensor.bytes_mut()),
            })
            .collect()
    }

    /// The finished arrays, in order (the borrows end here).
    pub fn finish(self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let mut arrays = Vec::with_capacity(self.targets.len());
        for target in self.targets {
            arrays.push(match target {
                Target::Array {
                    array,
                    writable,
                    as_bool,
                } => {
                    drop(writable);
                    if as_bool {
                        array.call_method1("view", (numpy::dtype::<bool>(py),))?
                    } else {
                        array
                    }
                }
                Target::Widened(tensor) => widened(py, &tensor)?,
            });
        }
        Ok(arrays)
    }
}

/// A tensor of a type NumPy lacks, as the .npy writer widens it: float32 for bfloat16 and
/// the float8 types, int8 for int4, uint8 for uint4.
fn widened<'py>(py: Python<'py>, tensor: &Tensor) -> PyResult<Bound<'py, PyAny>> {
    let dims = IxDyn(tensor.shape().dims());
    let values = tensor.to_f64_vec();
    let shaped = |e: numpy::ndarray::ShapeError| Error::fail(e.to_string());
    Ok(match tensor.dtype() {
        DataType::I4 => {
            let v: Vec<i8> = values.iter().map(|&x| x as i8).collect();
            let a = numpy::ndarray::ArrayD::from_shape_vec(dims, v).map_err(shaped)?;
            numpy::PyArray::from_owned_array(py, a).into_any()
        }
        DataType::U4 => {
            let v: Vec<u8> = values.iter().map(|&x| x as u8).collect();
            let a = numpy::ndarray::ArrayD::from_shape_vec(dims, v).map_err(shaped)?;
            numpy::PyArray::from_owned_array(py, a).into_any()
        }
        _ => {
            let v: Vec<f32> = values.iter().map(|&x| x as f32).collect();
            let a = numpy::ndarray::ArrayD::from_shape_vec(dims, v).map_err(shaped)?;
            numpy::PyArray::from_owned_array(py, a).into_any()
        }
    })
}
