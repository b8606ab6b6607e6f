//! backplane's Python module (`backplane._backplane`, re-exported by the `backplane` package):
//! an ONNX Runtime-like `InferenceSession` over the facade, NumPy arrays in and out, and
//! `DynamicNetwork`, one loaded model for every input shape.
//!
//! Built into a wheel by maturin (see `pyproject.toml`); `scripts/python_tests.sh` builds it,
//! installs it into a local virtual environment and runs the tests in `tests/`.

mod arrays;
mod backends;
mod dynamic;
mod errors;
mod model;
mod options;
mod session;

use pyo3::prelude::*;

/// backplane: a neural-network inference runtime with pluggable backends.
#[pymodule]
fn _backplane(m: &Bound<'_, PyModule>) -> PyResult<()> {
    errors::register(m)?;
    m.add_class::<session::InferenceSession>()?;
    m.add_class::<session::NodeArg>()?;
    m.add_class::<dynamic::DynamicNetwork>()?;
    m.add_class::<options::SessionOptions>()?;
    m.add_class::<backends::BackendInfo>()?;
    m.add_function(wrap_pyfunction!(backends::backends, m)?)?;
    m.add_function(wrap_pyfunction!(backends::get_available_providers, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add(
        "DEFAULT_PROVIDERS",
        backplane::DEFAULT_BACKENDS.split(',').collect::<Vec<_>>(),
    )?;
    m.add("MAX_SPECIALIZATIONS", session::MAX_SPECIALIZATIONS)?;
    Ok(())
}
