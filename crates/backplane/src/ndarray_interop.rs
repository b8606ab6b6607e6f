//! Conversions between [`Tensor`](crate::Tensor) and `ndarray` arrays (feature `ndarray`).
//!
//! ```
//! let a = ndarray::ArrayD::from_shape_vec(vec![2, 2], vec![1.0f32, 2.0, 3.0, 4.0]).unwrap();
//! let t = backplane::ndarray_interop::from_array(a.clone()).unwrap();
//! assert_eq!(backplane::ndarray_interop::to_array::<f32>(&t).unwrap(), a);
//! ```

use backplane_core::dtype::Element;
use backplane_core::{CoreError, Tensor};
use ndarray::{ArrayD, IxDyn};

/// Copy a tensor into an array of `T`; fails if `T` is not the tensor's element type.
pub fn to_array<T: Element>(tensor: &Tensor) -> Result<ArrayD<T>, CoreError> {
    let values = tensor.as_slice::<T>()?.to_vec();
    ArrayD::from_shape_vec(IxDyn(tensor.shape().dims()), values)
        .map_err(|e| CoreError::op("ndarray", e.to_string()))
}

/// Turn an array into a tensor (in standard row-major order, copying if needed).
pub fn from_array<T: Element>(array: ArrayD<T>) -> Result<Tensor, CoreError> {
    let shape = array.shape().to_vec();
    let values: Vec<T> = array.iter().copied().collect();
    Tensor::from_vec(shape, values)
}
