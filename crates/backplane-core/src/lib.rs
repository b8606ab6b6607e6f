//! backplane-core: the vocabulary every other crate speaks.
//!
//! It owns the element types ([`DataType`]), shapes ([`Shape`]), tensor descriptions
//! ([`TensorInfo`], with [`Quantization`]), owned tensors ([`Tensor`]) and the borrowed views
//! kernels work on ([`TensorView`], [`TensorViewMut`]), the operator set ([`Op`]) with its shape
//! inference, and the [`Network`] graph that importers build and the optimizer transforms.
//!
//! **Architecture invariant:** nothing here knows about backends. A [`Network`] that passes
//! [`Network::validate`] has static shapes on every tensor, a producer for every non-input,
//! non-constant tensor, and no cycles; kernels may rely on that.

pub mod dtype;
pub mod erf;
pub mod error;
pub mod lowp;
pub mod network;
pub mod ops;
pub mod quant;
pub mod scalar;
pub mod shape;
pub mod structure;
pub mod symbolic;
pub mod tensor;

pub use dtype::DataType;
pub use error::{CoreError, Result};
pub use network::{Layer, LayerId, Network, TensorEntry, TensorId, TensorKind};
pub use ops::Op;
pub use quant::Quantization;
pub use shape::Shape;
pub use structure::{ShapeAttributes, StructuralKey};
pub use tensor::{Tensor, TensorInfo, TensorView, TensorViewMut};
