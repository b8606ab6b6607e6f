//! `backplane.SessionOptions`: what a session is created with, beyond the model and the
//! backends. Attribute names follow ONNX Runtime's where it has the same setting.

use crate::errors::{Error, Result};
use backplane::runtime::DynamicBackendsOption;
use backplane::{BackendId, BackendOptions, RuntimeOptions};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Options of an :class:`InferenceSession`, read when the session is created.
///
/// Attributes:
///     intra_op_num_threads: threads per operator for backends that use several (CpuAcc);
///         0, the default, means every hardware thread.
///     dynamic_backends_path: load dynamic backends (``<vendor>_<name>_backend.so``) from
///         this directory only, instead of the directories built into backplane.
///     use_dynamic_backends: ``False`` loads no dynamic backend at all.
///     max_loop_iterations: fail a Loop that runs this many iterations (default 2**24).
#[pyclass(module = "backplane", from_py_object)]
#[derive(Debug, Clone, Default)]
pub struct SessionOptions {
    /// Intra-op threads (0: the backend's default).
    #[pyo3(get)]
    pub intra_op_num_threads: usize,
    /// One directory of dynamic backends, instead of the build-time ones.
    #[pyo3(get, set)]
    pub dynamic_backends_path: Option<PathBuf>,
    /// Whether to load dynamic backends at all.
    pub no_dynamic_backends: bool,
    /// The Loop iteration limit.
    #[pyo3(get, set)]
    pub max_loop_iterations: Option<u64>,
    /// Per-layer backend overrides: layer name or op type → backend, in order.
    pub layer_backends: Vec<(String, String)>,
    /// Values of symbolic dimensions, by name.
    pub free_dimensions: Vec<(String, usize)>,
}

#[pymethods]
impl SessionOptions {
    #[new]
    fn py_new() -> Self {
        SessionOptions::default()
    }

    #[setter]
    fn set_intra_op_num_threads(&mut self, n: i64) -> Result<()> {
        self.intra_op_num_threads = usize::try_from(n).map_err(|_| {
            Error::invalid(format!(
                "intra_op_num_threads must be 0 (the default) or a positive number, got {n}"
            ))
        })?;
        Ok(())
    }

    #[getter]
    fn use_dynamic_backends(&self) -> bool {
        !self.no_dynamic_backends
    }

    #[setter]
    fn set_use_dynamic_backends(&mut self, on: bool) {
        self.no_dynamic_backends = !on;
    }

    /// The per-layer backend overrides, ``{layer name or op type: backend}``: the optimizer
    /// tries that backend first for the layer (by name, then by op type), before the
    /// session's providers.
    #[getter]
    fn layer_backends<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (k, v) in &self.layer_backends {
            d.set_item(k, v)?;
        }
        Ok(d)
    }

    #[setter]
    fn set_layer_backends(&mut self, overrides: &Bound<'_, PyDict>) -> Result<()> {
        let mut list = Vec::new();
        for (layer, backend) in overrides.iter() {
            let (Ok(layer), Ok(backend)) = (layer.extract::<String>(), backend.extract::<String>())
            else {
                return Err(Error::invalid(
                    "layer_backends must map layer names or op types to backend names",
                ));
            };
            check_backend_name(&backend)?;
            list.push((layer, backend));
        }
        self.layer_backends = list;
        Ok(())
    }

    /// Run the layer named ``layer`` (or every layer of op type ``layer``, e.g. ``"Conv"``)
    /// on ``backend`` first.
    fn add_layer_backend(&mut self, layer: String, backend: String) -> Result<()> {
        check_backend_name(&backend)?;
        self.layer_backends.retain(|(l, _)| *l != layer);
        self.layer_backends.push((layer, backend));
        Ok(())
    }

    /// Give the symbolic dimension ``dim_name`` (an input's ``dim_param``) a fixed value, as
    /// ONNX Runtime's method of that name: inputs must then have that size there, and a
    /// model whose every dimension is then known is loaded when the session is created.
    fn add_free_dimension_override_by_name(&mut self, dim_name: String, value: i64) -> Result<()> {
        let value = usize::try_from(value).map_err(|_| {
            Error::invalid(format!(
                "the value of dimension '{dim_name}' must not be negative, got {value}"
            ))
        })?;
        self.free_dimensions.retain(|(n, _)| *n != dim_name);
        self.free_dimensions.push((dim_name, value));
        Ok(())
    }

    /// The symbolic dimensions given values with
    /// :meth:`add_free_dimension_override_by_name`.
    #[getter]
    fn free_dimension_overrides<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (k, v) in &self.free_dimensions {
            d.set_item(k, v)?;
        }
        Ok(d)
    }

    fn __repr__(&self) -> String {
        format!(
            "SessionOptions(intra_op_num_threads={}, dynamic_backends_path={}, \
             use_dynamic_backends={}, max_loop_iterations={}, layer_backends={{{}}}, \
             free_dimension_overrides={{{}}})",
            self.intra_op_num_threads,
            self.dynamic_backends_path
                .as_ref()
                .map_or_else(|| "None".into(), |p| format!("'{}'", p.display())),
            if self.no_dynamic_backends {
                "False"
            } else {
                "True"
            },
            self.max_loop_iterations
                .map_or_else(|| "None".into(), |n| n.to_string()),
            self.layer_backends
                .iter()
                .map(|(k, v)| format!("'{k}': '{v}'"))
                .collect::<Vec<_>>()
                .join(", "),
            self.free_dimensions
                .iter()
                .map(|(k, v)| format!("'{k}': {v}"))
                .collect::<Vec<_>>()
                .join(", "),
        )
    }
}

fn check_backend_name(name: &str) -> Result<BackendId> {
    BackendId::new(name).map_err(Error::invalid)
}

impl SessionOptions {
    /// Where dynamic backends come from. A relative directory is taken from the current
    /// directory, now.
    pub fn dynamic_backends(&self) -> DynamicBackendsOption {
        if self.no_dynamic_backends {
            DynamicBackendsOption::Disabled
        } else if let Some(dir) = &self.dynamic_backends_path {
            DynamicBackendsOption::Path(std::path::absolute(dir).unwrap_or_else(|_| dir.clone()))
        } else {
            DynamicBackendsOption::BuildTimePaths
        }
    }

    /// The runtime options: dynamic backends, the loop limit, and per backend its options
    /// (`per_backend`, from the providers) with CpuAcc's `threads` from
    /// `intra_op_num_threads` unless the provider options set it.
    pub fn runtime_options(
        &self,
        per_backend: &[(BackendId, BTreeMap<String, String>)],
    ) -> Result<RuntimeOptions> {
        let mut options = RuntimeOptions {
            dynamic_backends: self.dynamic_backends(),
            max_loop_iterations: self.max_loop_iterations,
            ..RuntimeOptions::default()
        };
        if self.intra_op_num_threads > 0 {
            let cpu_acc = check_backend_name("CpuAcc")?;
            let mut threads = BackendOptions::default();
            threads
                .values
                .insert("threads".into(), self.intra_op_num_threads.to_string());
            options.backend_options.insert(cpu_acc, threads);
        }
        for (id, values) in per_backend {
            let entry = options.backend_options.entry(id.clone()).or_default();
            for (k, v) in values {
                entry.values.insert(k.clone(), v.clone());
            }
        }
        Ok(options)
    }

    /// The per-layer overrides as the optimizer takes them.
    pub fn overrides(&self) -> Result<Vec<(String, BackendId)>> {
        self.layer_backends
            .iter()
            .map(|(l, b)| Ok((l.clone(), check_backend_name(b)?)))
            .collect()
    }
}
