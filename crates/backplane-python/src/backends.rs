//! `backplane.backends()` and `backplane.get_available_providers()`: what a session could use.

use crate::errors::Result;
use crate::options::SessionOptions;
use backplane::backend_api::CapabilityValue;
use backplane::runtime::BUILTIN;
use backplane::Runtime;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// A registered backend: ``id``, ``version``, ``api_version`` (the backend API it was built
/// against), ``kind`` (``"static"`` or ``"dynamic"``), ``file`` (the shared object of a
/// dynamic backend, else ``None``) and ``capabilities`` (a dict).
#[pyclass(module = "backplane", frozen)]
pub struct BackendInfo {
    #[pyo3(get)]
    id: String,
    #[pyo3(get)]
    version: String,
    #[pyo3(get)]
    api_version: String,
    #[pyo3(get)]
    kind: String,
    #[pyo3(get)]
    file: Option<String>,
    capabilities: Vec<(String, CapabilityValue)>,
}

#[pymethods]
impl BackendInfo {
    /// The backend's capabilities: ``{name: bool | int | str}``.
    #[getter]
    fn capabilities<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (k, v) in &self.capabilities {
            match v {
                CapabilityValue::Bool(b) => d.set_item(k, *b)?,
                CapabilityValue::Int(i) => d.set_item(k, *i)?,
                CapabilityValue::Text(s) => d.set_item(k, s)?,
            }
        }
        Ok(d)
    }

    fn __repr__(&self) -> String {
        format!(
            "BackendInfo(id='{}', version='{}', api_version='{}', kind='{}', file={}, \
             capabilities={{{}}})",
            self.id,
            self.version,
            self.api_version,
            self.kind,
            self.file
                .as_ref()
                .map_or_else(|| "None".into(), |f| format!("'{f}'")),
            self.capabilities
                .iter()
                .map(|(k, v)| match v {
                    CapabilityValue::Text(s) => format!("'{k}': '{s}'"),
                    CapabilityValue::Bool(b) => {
                        format!("'{k}': {}", if *b { "True" } else { "False" })
                    }
                    CapabilityValue::Int(i) => format!("'{k}': {i}"),
                })
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
}

fn runtime(options: Option<&SessionOptions>) -> Result<Runtime> {
    let options = options.cloned().unwrap_or_default();
    Ok(Runtime::new(
        backplane::builtin_registry(),
        options.runtime_options(&[])?,
    )?)
}

/// Every registered backend: the static ones (CpuRef, CpuAcc, the internal ``Builtin``) and
/// the dynamic ones found where ``options`` says (``dynamic_backends_path``), or in the
/// directories built into backplane.
#[pyfunction]
#[pyo3(signature = (options=None))]
pub fn backends(py: Python<'_>, options: Option<SessionOptions>) -> PyResult<Vec<BackendInfo>> {
    let infos = py.detach(|| -> Result<Vec<BackendInfo>> {
        let runtime = runtime(options.as_ref())?;
        let report = runtime.dynamic_backends();
        let mut infos = Vec::new();
        for id in runtime.registry().ids() {
            let backend = runtime.backend(&id)?;
            let dynamic = report.backend(&id);
            infos.push(BackendInfo {
                id: id.to_string(),
                version: backend.version(),
                api_version: backend.api_version().to_string(),
                kind: if dynamic.is_some() {
                    "dynamic"
                } else {
                    "static"
                }
                .into(),
                file: dynamic.map(|d| d.file.display().to_string()),
                capabilities: backend.capabilities().0.into_iter().collect(),
            });
        }
        Ok(infos)
    })?;
    Ok(infos)
}

/// The backends a session can be given as providers (every registered backend but the
/// internal ``Builtin`` one), like ONNX Runtime's function of that name.
#[pyfunction]
#[pyo3(signature = (options=None))]
pub fn get_available_providers(
    py: Python<'_>,
    options: Option<SessionOptions>,
) -> PyResult<Vec<String>> {
    let ids = py.detach(|| -> Result<Vec<String>> {
        let runtime = runtime(options.as_ref())?;
        Ok(runtime
            .registry()
            .ids()
            .into_iter()
            .map(|id| id.to_string())
            .filter(|id| id != BUILTIN)
            .collect())
    })?;
    Ok(ids)
}
