//! `backplane.DynamicNetwork`: one loaded model run on inputs of any shape its declaration
//! allows, over the facade's [`backplane::DynamicNetwork`].
//!
//! The facade keeps one plan per set of bound symbols (`batch=1, seq=7`) in a bounded cache
//! and splits plans at nodes whose output shapes depend on values (NonZero, NMS, ...). This
//! class owns its runtime through an `Arc` (a `DynamicNetwork<'static>`), so Python can keep
//! it as long as it likes, and shows the cache's counts (`stats()`, `total_stats()`).

use crate::arrays::{self, Input, Outputs};
use crate::errors::{Error, Result};
use crate::model::{self, Declared};
use crate::options::SessionOptions;
use crate::session::{new_runtime, parse_providers, NodeArg};
use backplane::core::symbolic::DimExpr;
use backplane::{NodeCacheStats, OptimizerOptions, PlanCacheStats, Tensor, TensorInfo};
use numpy::PyUntypedArrayMethods;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString};
use std::path::PathBuf;
use std::sync::Arc;

// The defaults of `capacity` and `node_cache` are written as literals (so that the Python
// signature shows them); they are the facade's default.
const _: () = assert!(backplane::dynamic_network::DEFAULT_PLAN_CAPACITY == 8);

/// A model served for every input shape that fits its symbolic signature, on one loaded
/// network: each new set of symbol values (``batch=2, seq=7``) is planned once and kept in a
/// bounded cache, and inputs whose shapes depend on values run through the data-dependent
/// path (the plan is cut at such a node).
///
/// Args:
///     path_or_bytes: the ONNX model, as a file path or the file's bytes.
///     sess_options: a :class:`SessionOptions` (loop limit, threads, dynamic backends,
///         per-layer backend overrides; symbolic dimension overrides do not apply: shapes
///         come from the inputs).
///     providers: backends in order of preference (default ``["CpuAcc", "CpuRef"]``).
///     provider_options: options per provider, parallel to ``providers``.
///     capacity: the most plans the cache keeps (at least 1; default 8).
///     node_cache: the most specialisations kept per node the plans are cut at (default 8;
///         0 re-imports the node at every run).
///     max_memory: the memory budget in bytes of the network's runtime (default: the memory
///         available): the caches evict their least recently used entries to stay within it,
///         and loads that would go over it are refused.
///
/// :meth:`run` releases the GIL while the model runs; the object may be shared by threads.
#[pyclass(module = "backplane", frozen)]
pub struct DynamicNetwork {
    net: backplane::DynamicNetwork<'static>,
    inputs: Vec<Declared>,
    outputs: Vec<Declared>,
}

/// A cache's counts as a dict.
fn stats_dict<'py>(py: Python<'py>, s: PlanCacheStats) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("size", s.size)?;
    d.set_item("capacity", s.capacity)?;
    d.set_item("networks", s.networks)?;
    d.set_item("hits", s.hits)?;
    d.set_item("misses", s.misses)?;
    d.set_item("evictions", s.evictions)?;
    d.set_item("bytes", s.bytes)?;
    d.set_item("optimizer_runs", s.optimizer_runs)?;
    d.set_item("plans_reshaped", s.plans_reshaped)?;
    d.set_item("same_structure", s.same_structure)?;
    d.set_item("same_decisions", s.same_decisions)?;
    Ok(d)
}

/// The cut nodes' cache counts as a dict.
fn node_stats_dict<'py>(py: Python<'py>, s: NodeCacheStats) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("size", s.size)?;
    d.set_item("capacity_per_node", s.capacity_per_node)?;
    d.set_item("hits", s.hits)?;
    d.set_item("misses", s.misses)?;
    d.set_item("evictions", s.evictions)?;
    d.set_item("bytes", s.bytes)?;
    Ok(d)
}

/// A symbolic shape as a list: ints for numbers, strings for symbols and derived expressions.
fn shape_list<'py>(py: Python<'py>, dims: &[DimExpr]) -> PyResult<Bound<'py, PyList>> {
    let items = dims.iter().map(|d| match d {
        DimExpr::Const(n) => match n.into_pyobject(py) {
            Ok(v) => v.into_any(),
            Err(never) => match never {},
        },
        other => PyString::new(py, &other.to_string()).into_any(),
    });
    PyList::new(py, items)
}

#[pymethods]
impl DynamicNetwork {
    #[new]
    #[pyo3(signature = (path_or_bytes, sess_options=None, providers=None, provider_options=None, *, capacity=8, node_cache=8, max_memory=None))]
    // One argument per Python keyword argument.
    #[allow(clippy::too_many_arguments)]
    fn py_new(
        py: Python<'_>,
        path_or_bytes: &Bound<'_, PyAny>,
        sess_options: Option<SessionOptions>,
        providers: Option<&Bound<'_, PyAny>>,
        provider_options: Option<&Bound<'_, PyAny>>,
        capacity: usize,
        node_cache: usize,
        max_memory: Option<usize>,
    ) -> PyResult<Self> {
        let options = sess_options.unwrap_or_default();
        let (providers, provider_options) = parse_providers(providers, provider_options)?;
        let source: std::result::Result<PathBuf, Vec<u8>> =
            if let Ok(bytes) = path_or_bytes.cast::<PyBytes>() {
                Err(bytes.as_bytes().to_vec())
            } else {
                Ok(path_or_bytes.extract::<PathBuf>().map_err(|_| {
                    Error::invalid("path_or_bytes must be a path (str or os.PathLike) or bytes")
                })?)
            };
        let built = py.detach(|| -> Result<DynamicNetwork> {
            let (model, base_dir) = match source {
                Ok(path) => (
                    backplane::onnx::decode_model_file(&path)?,
                    Some(backplane::onnx::model_base_dir(&path)),
                ),
                Err(bytes) => (backplane::onnx::decode_model(&bytes)?, None),
            };
            let (inputs, outputs) = model::declarations(&model);
            if let Some(v) = inputs.iter().chain(&outputs).find(|d| !d.is_tensor) {
                return Err(Error::unsupported(format!(
                    "'{}' is a {}: from Python, backplane runs models whose inputs and \
                     outputs are tensors",
                    v.name, v.type_string
                )));
            }
            let runtime = Arc::new(new_runtime(
                &options,
                &providers,
                &provider_options,
                max_memory,
            )?);
            let mut optimizer = OptimizerOptions::new(providers);
            optimizer.layer_backends = options.overrides()?;
            let net = backplane::DynamicNetwork::from_model(
                runtime,
                model,
                base_dir,
                &backplane::ImportOptions::default(),
                optimizer,
            )
            .with_capacity(capacity)
            .with_node_cache(node_cache);
            Ok(DynamicNetwork {
                net,
                inputs,
                outputs,
            })
        })?;
        Ok(built)
    }

    /// The model's inputs (initializers excluded), in the graph's order.
    fn get_inputs(&self) -> Vec<NodeArg> {
        self.inputs.iter().map(NodeArg::of).collect()
    }

    /// The model's outputs, in the graph's order.
    fn get_outputs(&self) -> Vec<NodeArg> {
        self.outputs.iter().map(NodeArg::of).collect()
    }

    /// The symbolic signature as shape inference finds it: ``{"inputs": {name: dims},
    /// "outputs": {name: dims}}``, each dimension an int or a string (``"seq"``,
    /// ``"batch*seq"``); ``None`` for a value with no known shape.
    fn signature<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let sig = self.net.signature();
        let d = PyDict::new(py);
        for (key, values) in [("inputs", &sig.inputs), ("outputs", &sig.outputs)] {
            let part = PyDict::new(py);
            for (name, shape) in values {
                match shape {
                    Some(dims) => part.set_item(name, shape_list(py, dims)?)?,
                    None => part.set_item(name, py.None())?,
                }
            }
            d.set_item(key, part)?;
        }
        Ok(d)
    }

    /// The plan cache's counts: ``size``, ``capacity``, ``networks`` (1), ``hits``,
    /// ``misses``, ``evictions``, ``bytes`` (the working memory of the plans held; plans
    /// are also evicted to keep the caches within the runtime's memory budget) and
    /// ``optimizer_runs`` (full optimizer runs: one per plan built that loads a network and
    /// was not re-shaped), ``plans_reshaped`` (plans of an earlier plan's structure built by
    /// replaying its optimization), ``same_structure`` (of the optimizer runs, those whose
    /// imported network had an earlier plan's structure: a replay refused) and
    /// ``same_decisions`` (of those, the runs that decided what an earlier plan's optimizer
    /// did).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        stats_dict(py, self.net.stats())
    }

    /// The bytes of initializer data the model kept for later plans' imports still holds: the
    /// model's weights until the first plan is built, 0 after it (the weights are then held
    /// once, decoded and shared by every plan).
    fn kept_weight_bytes(&self) -> usize {
        self.net.kept_weight_bytes()
    }

    /// :meth:`stats` summed over the nested networks that serve the rest of the model after
    /// each node a plan is cut at (``networks`` counts them, this one included).
    fn total_stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        stats_dict(py, self.net.total_stats())
    }

    /// The backend-support queries of this network's plans: ``asked`` (answered by the
    /// backends), ``replayed`` (answers a backend said hold at every shape, given again for
    /// another shape without asking), ``kept`` (such answers held); ``None`` when its plans
    /// share no answers.
    fn support_queries<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let Some(answers) = self.net.support_answers() else {
            return Ok(None);
        };
        let d = PyDict::new(py);
        d.set_item("asked", answers.asked())?;
        d.set_item("replayed", answers.replayed())?;
        d.set_item("kept", answers.len())?;
        Ok(Some(d))
    }

    /// The runtime's totals over every plan cache it serves (this network, the nested ones
    /// after its cuts, and their cut nodes): ``networks``, ``plans`` and ``nodes`` (each a
    /// dict of ``entries``, ``bytes``, ``hits``, ``misses``, ``evictions``), and
    /// ``optimizer_runs`` and ``plans_reshaped``; ``held_bytes`` is what the caches hold
    /// together against the memory budget they share.
    fn runtime_stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let t = self.net.runtime().plan_cache_stats();
        let counts = |c: backplane::CacheCounts| -> PyResult<Bound<'py, PyDict>> {
            let d = PyDict::new(py);
            d.set_item("entries", c.entries)?;
            d.set_item("bytes", c.bytes)?;
            d.set_item("hits", c.hits)?;
            d.set_item("misses", c.misses)?;
            d.set_item("evictions", c.evictions)?;
            Ok(d)
        };
        let d = PyDict::new(py);
        d.set_item("networks", t.networks)?;
        d.set_item("plans", counts(t.plans)?)?;
        d.set_item("nodes", counts(t.nodes)?)?;
        d.set_item("optimizer_runs", t.optimizer_runs)?;
        d.set_item("plans_reshaped", t.plans_reshaped)?;
        d.set_item("held_bytes", self.net.held_bytes())?;
        Ok(d)
    }

    /// The cut nodes' import cache (each node a plan is cut at is imported alone with the
    /// values it needs): ``size``, ``capacity_per_node``, ``hits``, ``misses`` (imports),
    /// ``evictions`` and ``bytes``, for this network's own cuts.
    fn node_stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        node_stats_dict(py, self.net.node_stats())
    }

    /// :meth:`node_stats` summed over the nested networks too.
    fn total_node_stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        node_stats_dict(py, self.net.total_node_stats())
    }

    /// The nodes plans were cut at (their output shapes depend on values): ``[{"node":
    /// label, "op_type": op}]`` in the order runs met them; empty for a model with no
    /// data-dependent shapes or before its first run.
    fn cuts<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        self.net
            .cuts()
            .into_iter()
            .map(|c| {
                let d = PyDict::new(py);
                d.set_item("node", c.label)?;
                d.set_item("op_type", c.op_type)?;
                Ok(d)
            })
            .collect()
    }

    /// Run the model on ``input_feed`` (``{input name: array}``, every input, of any shape
    /// the model's signature allows); returns the outputs named in ``output_names`` (all of
    /// them in the graph's order when ``None`` or empty) as NumPy arrays.
    ///
    /// Raises:
    ///     InvalidArgument: an unknown input or output name, a missing input, an input of
    ///         the wrong dtype, or shapes that do not fit the signature (a fixed dimension
    ///         that differs, one symbol given two values).
    ///     Fail: the execution failed.
    #[pyo3(signature = (output_names, input_feed))]
    fn run<'py>(
        &self,
        py: Python<'py>,
        output_names: Option<Vec<String>>,
        input_feed: &Bound<'py, PyAny>,
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let feed = input_feed
            .cast::<PyDict>()
            .map_err(|_| Error::invalid("input_feed must be a dict of input names to arrays"))?;
        let wanted: Vec<String> = match output_names {
            Some(names) if !names.is_empty() => {
                if let Some(n) = names
                    .iter()
                    .find(|n| !self.outputs.iter().any(|d| d.name == **n))
                {
                    return Err(Error::invalid(format!(
                        "'{n}' is not an output of the model; its outputs are: {}",
                        model::all_names(&self.outputs)
                    ))
                    .into());
                }
                names
            }
            _ => self.outputs.iter().map(|d| d.name.clone()).collect(),
        };
        let mut tensors: Vec<(String, Tensor)> = Vec::with_capacity(self.inputs.len());
        for (key, value) in feed.iter() {
            let name: String = key
                .extract()
                .map_err(|_| Error::invalid("input names must be strings"))?;
            let decl = self.inputs.iter().find(|d| d.name == name).ok_or_else(|| {
                Error::invalid(format!(
                    "'{name}' is not an input of the model; its inputs are: {}",
                    model::all_names(&self.inputs)
                ))
            })?;
            let dtype = decl.dtype.ok_or_else(|| {
                Error::unsupported(format!("input '{}' has a type backplane lacks", decl.name))
            })?;
            let array = arrays::as_array(&value)?;
            if arrays::dtype_of(&array) != Some(dtype) {
                return Err(Error::invalid(format!(
                    "input '{name}' must be {}, not {}",
                    decl.type_string,
                    arrays::dtype_name(&array)
                ))
                .into());
            }
            let dims = array.shape().to_vec();
            let borrowed = Input::borrow(&array, dtype)?;
            let tensor = Tensor::from_bytes(TensorInfo::new(dtype, dims), borrowed.bytes()?)
                .map_err(|e| Error::fail(e.to_string()))?;
            tensors.push((name, tensor));
        }
        if let Some(missing) = self
            .inputs
            .iter()
            .find(|d| !tensors.iter().any(|(n, _)| *n == d.name))
        {
            return Err(Error::invalid(format!(
                "input '{}' ({}) is missing; the model's inputs are: {}",
                missing.name,
                missing.describe(&[]),
                model::all_names(&self.inputs)
            ))
            .into());
        }
        let produced = py
            .detach(|| {
                let refs: Vec<(&str, &Tensor)> =
                    tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
                self.net.execute(&refs)
            })
            .map_err(Error::from)?;
        let mut picked: Vec<&Tensor> = Vec::with_capacity(wanted.len());
        for name in &wanted {
            let t = produced
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, t)| t)
                .ok_or_else(|| Error::fail(format!("the run did not produce output '{name}'")))?;
            picked.push(t);
        }
        let mut outputs = Outputs::allocate(py, picked.iter().map(|t| t.info()))?;
        for (buffer, tensor) in outputs.buffers()?.into_iter().zip(&picked) {
            buffer.copy_from_slice(tensor.bytes());
        }
        outputs.finish(py)
    }

    fn __repr__(&self) -> String {
        format!(
            "DynamicNetwork(inputs=[{}], outputs=[{}], {})",
            model::all_names(&self.inputs),
            model::all_names(&self.outputs),
            self.net.stats()
        )
    }
}
