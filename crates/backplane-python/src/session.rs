//! `backplane.InferenceSession`: a model with its backends, run on NumPy arrays.
//!
//! backplane networks have static shapes, so a session imports the model once per set of
//! input shapes it is run with (and, for models that need some inputs' values at import, per
//! value of those inputs), keeps up to [`MAX_SPECIALIZATIONS`] such loaded networks, and
//! builds, runs and unloads any further one per call. A model whose every input dimension is
//! known (declared, or set with `SessionOptions.add_free_dimension_override_by_name`) is
//! loaded when the session is created; one with symbolic dimensions is tried with them set to
//! 1 then, so that an unsupported operator is reported at once.

use crate::arrays::{self, Input, Outputs};
use crate::errors::{Error, Kind, Result};
use crate::model::{self, Declared, Dim};
use crate::options::SessionOptions;
use backplane::core::TensorViewMut;
use backplane::onnx::proto::ModelProto;
use backplane::onnx::OnnxError;
use backplane::runtime::LoadedNetwork;
use backplane::{
    BackendId, ImportOptions, NetworkId, OptimizerOptions, Runtime, RuntimeError, Shape, Tensor,
    TensorInfo,
};
use numpy::{PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

/// The most loaded networks (one per set of input shapes, or bound input values) a session
/// keeps; beyond it, a call with new shapes builds a network, runs it and unloads it.
pub const MAX_SPECIALIZATIONS: usize = 32;

/// ONNX Runtime's CPU provider; a session given it uses backplane's default backends.
const ORT_CPU_PROVIDER: &str = "CPUExecutionProvider";

/// A graph input or output: ``name``, ``type`` (ONNX Runtime's type string, e.g.
/// ``"tensor(float)"``) and ``shape`` (ints for fixed dimensions, strings for symbolic ones,
/// ``None`` for unnamed unknown ones; ``[]`` when the model declares no shape).
#[pyclass(module = "backplane", frozen)]
pub struct NodeArg {
    /// The value's name.
    #[pyo3(get)]
    name: String,
    /// The type string.
    #[pyo3(get, name = "type")]
    type_string: String,
    dims: Vec<Dim>,
}

#[pymethods]
impl NodeArg {
    /// The declared shape.
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let dims = self.dims.iter().map(|d| match d {
            Dim::Fixed(n) => match n.into_pyobject(py) {
                Ok(v) => v.into_any(),
                Err(never) => match never {},
            },
            Dim::Param(p) => PyString::new(py, p).into_any(),
            Dim::Unknown => py.None().into_bound(py),
        });
        PyList::new(py, dims)
    }

    fn __repr__(&self) -> String {
        let dims = self
            .dims
            .iter()
            .map(|d| match d {
                Dim::Fixed(n) => n.to_string(),
                Dim::Param(p) => format!("'{p}'"),
                Dim::Unknown => "None".into(),
            })
            .collect::<Vec<_>>()
            .join(", ");
        format!(
            "NodeArg(name='{}', type='{}', shape=[{dims}])",
            self.name, self.type_string
        )
    }
}

impl NodeArg {
    pub(crate) fn of(d: &Declared) -> NodeArg {
        NodeArg {
            name: d.name.clone(),
            type_string: d.type_string.clone(),
            dims: d.dims.clone().unwrap_or_default(),
        }
    }
}

/// One loaded network: the model imported for given input shapes (and bound input values).
struct Loaded {
    id: NetworkId,
    net: Arc<LoadedNetwork>,
    /// The shape of every graph input it was built for.
    shapes: Vec<Vec<usize>>,
    /// Graph inputs whose values were bound at import (they are constants of the network),
    /// with those values' bytes.
    bound: Vec<(usize, Vec<u8>)>,
    /// For each network input, the graph input it is.
    feeds: Vec<usize>,
    /// For each graph output, the network output it is.
    outputs: Vec<usize>,
    /// How many layers each backend runs.
    layer_counts: Vec<(BackendId, usize)>,
}

impl Loaded {
    fn matches(&self, shapes: &[Vec<usize>], bytes: &[&[u8]]) -> bool {
        self.shapes == shapes
            && self
                .bound
                .iter()
                .all(|(i, value)| bytes.get(*i).is_some_and(|b| *b == value.as_slice()))
    }
}

/// A model loaded for inference, like ONNX Runtime's ``InferenceSession``.
///
/// Args:
///     path_or_bytes: the ONNX model, as a file path or the file's bytes (a model with
///         external data needs its path).
///     sess_options: a :class:`SessionOptions` (``options=`` is the same argument).
///     providers: backends in order of preference, e.g. ``["CpuAcc", "CpuRef"]`` (the
///         default); ``"CPUExecutionProvider"`` stands for that default. An entry may be a
///         ``(name, {option: value})`` pair.
///     provider_options: options per provider, a list of dicts parallel to ``providers``
///         (e.g. ``[{"threads": "2"}, {}]``).
///
/// The session may be shared by threads: :meth:`run` releases the GIL while the network
/// runs, and concurrent runs use separate working memory.
#[pyclass(module = "backplane", frozen)]
pub struct InferenceSession {
    runtime: Runtime,
    model: ModelProto,
    base_dir: Option<PathBuf>,
    inputs: Vec<Declared>,
    outputs: Vec<Declared>,
    optimizer: OptimizerOptions,
    providers: Vec<BackendId>,
    provider_options: Vec<(BackendId, BTreeMap<String, String>)>,
    options: SessionOptions,
    loaded: RwLock<Vec<Arc<Loaded>>>,
}

/// `providers` and `provider_options` as backend ids with their options.
pub(crate) type Providers = (Vec<BackendId>, Vec<(BackendId, BTreeMap<String, String>)>);

fn option_values(dict: &Bound<'_, PyAny>, provider: &str) -> Result<BTreeMap<String, String>> {
    let dict = dict.cast::<PyDict>().map_err(|_| {
        Error::invalid(format!(
            "the options of provider '{provider}' must be a dict of option names to values"
        ))
    })?;
    let mut values = BTreeMap::new();
    for (k, v) in dict.iter() {
        let key = k.extract::<String>().map_err(|_| {
            Error::invalid(format!(
                "the option names of provider '{provider}' must be strings"
            ))
        })?;
        let value = match v.extract::<bool>() {
            Ok(b) => b.to_string(),
            Err(_) => v
                .str()
                .map_err(|e| Error::invalid(e.to_string()))?
                .to_string(),
        };
        values.insert(key, value);
    }
    Ok(values)
}

/// A runtime for a session or a dynamic network: the built-in backends and the dynamic ones
/// `options` allow, with the providers' options; every named provider must be registered.
pub(crate) fn new_runtime(
    options: &SessionOptions,
    providers: &[BackendId],
    provider_options: &[(BackendId, BTreeMap<String, String>)],
    max_memory: Option<usize>,
) -> Result<Runtime> {
    let mut runtime_options = options.runtime_options(provider_options)?;
    if max_memory.is_some() {
        runtime_options.max_memory = max_memory;
    }
    let runtime = Runtime::new(backplane::builtin_registry(), runtime_options)?;
    let registered = runtime.registry().ids();
    for id in providers
        .iter()
        .chain(provider_options.iter().map(|(id, _)| id))
    {
        if !registered.contains(id) {
            let mut message = RuntimeError::UnknownBackend {
                id: id.to_string(),
                registered: registered
                    .iter()
                    .map(|b| b.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            }
            .to_string();
            let report = runtime.dynamic_backends();
            for w in &report.warnings {
                message.push_str(&format!("\n{w}"));
            }
            for r in &report.rejected {
                message.push_str(&format!(
                    "\nskipped dynamic backend {}: {}",
                    r.file.display(),
                    r.reason
                ));
            }
            return Err(Error::invalid(message));
        }
    }
    Ok(runtime)
}

pub(crate) fn parse_providers(
    providers: Option<&Bound<'_, PyAny>>,
    provider_options: Option<&Bound<'_, PyAny>>,
) -> Result<Providers> {
    let mut entries: Vec<(String, Option<Bound<'_, PyAny>>)> = Vec::new();
    if let Some(list) = providers {
        if list.is_instance_of::<PyString>() {
            return Err(Error::invalid(
                "providers must be a list of provider names, e.g. [\"CpuAcc\", \"CpuRef\"]",
            ));
        }
        let iter = list
            .try_iter()
            .map_err(|_| Error::invalid("providers must be a list of provider names"))?;
        for item in iter {
            let item = item.map_err(|e| Error::invalid(e.to_string()))?;
            if let Ok(name) = item.extract::<String>() {
                entries.push((name, None));
            } else if let Ok(pair) = item.cast::<PyTuple>() {
                let name = pair
                    .get_item(0)
                    .and_then(|n| n.extract::<String>())
                    .map_err(|_| {
                        Error::invalid("a provider given as a tuple must be (name, options)")
                    })?;
                let opts = pair.get_item(1).ok();
                if pair.len() != 2 {
                    return Err(Error::invalid(
                        "a provider given as a tuple must be (name, options)",
                    ));
                }
                entries.push((name, opts));
            } else {
                return Err(Error::invalid(
                    "each provider must be a name or a (name, options) tuple",
                ));
            }
        }
    }
    if let Some(options) = provider_options {
        let list: Vec<Bound<'_, PyAny>> = options
            .try_iter()
            .and_then(|it| it.collect())
            .map_err(|_| Error::invalid("provider_options must be a list of dicts"))?;
        if list.len() != entries.len() {
            return Err(Error::invalid(format!(
                "provider_options has {} entries for {} providers: give one dict per provider",
                list.len(),
                entries.len()
            )));
        }
        for ((name, opts), given) in entries.iter_mut().zip(list) {
            if opts.is_some() {
                return Err(Error::invalid(format!(
                    "provider '{name}' has options both in its tuple and in provider_options"
                )));
            }
            *opts = Some(given);
        }
    }
    let mut ids: Vec<BackendId> = Vec::new();
    let mut per_backend = Vec::new();
    let mut push = |id: BackendId| {
        if !ids.contains(&id) {
            ids.push(id);
        }
    };
    for (name, opts) in &entries {
        let named: Vec<BackendId> = if name == ORT_CPU_PROVIDER {
            backplane::default_backends()
        } else {
            vec![BackendId::new(name).map_err(Error::invalid)?]
        };
        if let Some(opts) = opts {
            let values = option_values(opts, name)?;
            if !values.is_empty() {
                for id in &named {
                    per_backend.push((id.clone(), values.clone()));
                }
            }
        }
        named.into_iter().for_each(&mut push);
    }
    if ids.is_empty() {
        ids = backplane::default_backends();
    }
    Ok((ids, per_backend))
}

impl InferenceSession {
    /// Import the model for `shapes` (one per graph input), binding the values in `given`
    /// (one per graph input, or none) that the import needs.
    fn import(
        &self,
        shapes: &[Vec<usize>],
        given: &[&[u8]],
    ) -> std::result::Result<(backplane::Network, Vec<String>), OnnxError> {
        let mut options =
            ImportOptions::default().with_evaluator(Arc::new(backplane::cpu_ref::CpuRefEvaluator));
        for (decl, dims) in self.inputs.iter().zip(shapes) {
            options.input_shapes.insert(decl.name.clone(), dims.clone());
        }
        for (name, value) in &self.options.free_dimensions {
            options.dim_values.insert(name.clone(), *value);
        }
        let mut values = Vec::with_capacity(given.len());
        for ((decl, dims), bytes) in self.inputs.iter().zip(shapes).zip(given) {
            if let Some(dtype) = decl.dtype {
                let tensor = Tensor::from_bytes(TensorInfo::new(dtype, dims.clone()), bytes)
                    .map_err(|source| OnnxError::Core {
                        node: decl.name.clone(),
                        source,
                    })?;
                values.push((decl.name.clone(), tensor));
            }
        }
        backplane::onnx::import_model_specialized(
            self.model.clone(),
            self.base_dir.as_deref(),
            &options,
            &values,
        )
    }

    /// Optimize and load an imported network.
    fn load(
        &self,
        network: &backplane::Network,
        bound: &[String],
        shapes: &[Vec<usize>],
        given: &[&[u8]],
    ) -> Result<Loaded> {
        let optimized = self.runtime.optimize(network, &self.optimizer)?;
        let layer_counts = optimized.layer_counts();
        let id = self.runtime.load_network(optimized)?;
        let loaded = self.map_network(id, shapes, given, bound, layer_counts);
        if loaded.is_err() {
            let _ = self.runtime.unload_network(id);
        }
        loaded
    }

    /// Import, optimize and load the model for these input shapes and values.
    fn build(&self, shapes: &[Vec<usize>], given: &[&[u8]]) -> Result<Loaded> {
        let (network, bound) = self.import(shapes, given)?;
        self.load(&network, &bound, shapes, given)
    }

    /// At creation: load the model when its shapes are known, or try it with every symbolic
    /// dimension 1, so that errors that do not depend on the shapes are raised when the
    /// session is created, as ONNX Runtime raises them.
    fn probe(&self) -> Result<()> {
        let Some(shapes) = self.probe_shapes() else {
            return Ok(());
        };
        let all_static = self
            .inputs
            .iter()
            .all(|d| d.static_dims(&self.options.free_dimensions).is_some());
        let loaded = match self.import(&shapes, &[]) {
            // Imported per value at run time.
            Err(OnnxError::NeedsInputValues { .. }) => return Ok(()),
            // Whatever the shapes: the file, the operators, the types.
            Err(
                e @ (OnnxError::Io { .. }
                | OnnxError::Decode { .. }
                | OnnxError::UnsupportedOps(_)
                | OnnxError::UnsupportedDataType { .. }
                | OnnxError::UnsupportedIrVersion { .. }
                | OnnxError::UnknownInput { .. }),
            ) => return Err(e.into()),
            // Others (a Reshape that does not fit a batch of 1) may be the probe's shapes'.
            Err(e) if all_static => return Err(e.into()),
            Err(_) => return Ok(()),
            Ok((network, bound)) => self.load(&network, &bound, &shapes, &[]),
        };
        match loaded {
            Ok(loaded) => {
                self.keep(&Arc::new(loaded));
                Ok(())
            }
            // Unknown backends or overrides, layers no preferred backend supports.
            Err(e) if all_static || matches!(e.kind, Kind::InvalidArgument | Kind::Unsupported) => {
                Err(e)
            }
            Err(_) => Ok(()),
        }
    }

    fn map_network(
        &self,
        id: NetworkId,
        shapes: &[Vec<usize>],
        given: &[&[u8]],
        bound: &[String],
        layer_counts: Vec<(BackendId, usize)>,
    ) -> Result<Loaded> {
        let net = self.runtime.network(id)?;
        let network = net.network();
        let graph_input = |name: &str| self.inputs.iter().position(|d| d.name == name);
        let feeds = network
            .inputs()
            .iter()
            .map(|&t| {
                let name = &network.tensor(t).name;
                graph_input(name).ok_or_else(|| {
                    Error::fail(format!(
                        "the network's input '{name}' is not an input of the model"
                    ))
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let outputs = self
            .outputs
            .iter()
            .map(|d| {
                network
                    .outputs()
                    .iter()
                    .position(|&t| network.tensor(t).name == d.name)
                    .ok_or_else(|| {
                        Error::fail(format!(
                            "the model's output '{}' is not an output of the network",
                            d.name
                        ))
                    })
            })
            .collect::<Result<Vec<_>>>()?;
        let bound = bound
            .iter()
            .filter_map(|name| {
                let i = graph_input(name)?;
                Some((i, given.get(i)?.to_vec()))
            })
            .collect();
        Ok(Loaded {
            id,
            net,
            shapes: shapes.to_vec(),
            bound,
            feeds,
            outputs,
            layer_counts,
        })
    }

    fn find(&self, shapes: &[Vec<usize>], bytes: &[&[u8]]) -> Option<Arc<Loaded>> {
        self.loaded
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .find(|l| l.matches(shapes, bytes))
            .cloned()
    }

    /// Keep `loaded` unless an equal one is kept already or the cache is full; returns
    /// whether it was kept.
    fn keep(&self, loaded: &Arc<Loaded>) -> bool {
        let mut cache = self.loaded.write().unwrap_or_else(|e| e.into_inner());
        let duplicate = cache.iter().any(|l| {
            l.shapes == loaded.shapes
                && l.bound.len() == loaded.bound.len()
                && l.bound.iter().zip(&loaded.bound).all(|(a, b)| a == b)
        });
        if duplicate || cache.len() >= MAX_SPECIALIZATIONS {
            return false;
        }
        cache.push(loaded.clone());
        true
    }

    /// The shapes of the declared inputs with their symbolic dimensions set to 1 (or their
    /// overrides), if every input is a tensor with a declared shape.
    fn probe_shapes(&self) -> Option<Vec<Vec<usize>>> {
        self.inputs
            .iter()
            .map(|d| {
                let dims = d.dims.as_ref()?;
                Some(
                    dims.iter()
                        .map(|dim| model::resolve(dim, &self.options.free_dimensions).unwrap_or(1))
                        .collect(),
                )
            })
            .collect()
    }

    /// Check a given array against the declaration of graph input `i`.
    fn check_input(&self, i: usize, array: &Bound<'_, PyUntypedArray>) -> Result<()> {
        let decl = &self.inputs[i];
        let dims = array.shape();
        let mismatch = || {
            Error::from(RuntimeError::InputMismatch {
                name: decl.name.clone(),
                expected: decl.describe(&self.options.free_dimensions),
                actual: format!("{}{}", arrays::dtype_name(array), Shape::new(dims.to_vec())),
            })
        };
        if arrays::dtype_of(array) != decl.dtype {
            return Err(mismatch());
        }
        if let Some(declared) = &decl.dims {
            if declared.len() != dims.len() {
                return Err(mismatch());
            }
            for (d, &n) in declared.iter().zip(dims) {
                if model::resolve(d, &self.options.free_dimensions).is_some_and(|m| m != n) {
                    return Err(mismatch());
                }
            }
        }
        Ok(())
    }
}

#[pymethods]
impl InferenceSession {
    #[new]
    #[pyo3(signature = (path_or_bytes, sess_options=None, providers=None, provider_options=None, *, options=None))]
    fn py_new(
        py: Python<'_>,
        path_or_bytes: &Bound<'_, PyAny>,
        sess_options: Option<SessionOptions>,
        providers: Option<&Bound<'_, PyAny>>,
        provider_options: Option<&Bound<'_, PyAny>>,
        options: Option<SessionOptions>,
    ) -> PyResult<Self> {
        let options = match (sess_options, options) {
            (Some(_), Some(_)) => {
                return Err(Error::invalid(
                    "give the session options once: sess_options or options, not both",
                )
                .into())
            }
            (a, b) => a.or(b).unwrap_or_default(),
        };
        let (providers, provider_options) = parse_providers(providers, provider_options)?;
        enum Source {
            Path(PathBuf),
            Bytes(Vec<u8>),
        }
        let source = if let Ok(bytes) = path_or_bytes.cast::<PyBytes>() {
            Source::Bytes(bytes.as_bytes().to_vec())
        } else {
            Source::Path(path_or_bytes.extract::<PathBuf>().map_err(|_| {
                Error::invalid("path_or_bytes must be a path (str or os.PathLike) or bytes")
            })?)
        };
        let session = py.detach(|| -> Result<InferenceSession> {
            let (model, base_dir) = match source {
                Source::Path(path) => (
                    backplane::onnx::decode_model_file(&path)?,
                    Some(backplane::onnx::model_base_dir(&path)),
                ),
                Source::Bytes(bytes) => (backplane::onnx::decode_model(&bytes)?, None),
            };
            let (inputs, outputs) = model::declarations(&model);
            if let Some(v) = inputs.iter().chain(&outputs).find(|d| !d.is_tensor) {
                return Err(Error::unsupported(format!(
                    "'{}' is a {}: from Python, backplane runs models whose inputs and \
                     outputs are tensors",
                    v.name, v.type_string
                )));
            }
            let runtime = new_runtime(&options, &providers, &provider_options, None)?;
            let mut optimizer = OptimizerOptions::new(providers.clone());
            optimizer.layer_backends = options.overrides()?;
            let session = InferenceSession {
                runtime,
                model,
                base_dir,
                inputs,
                outputs,
                optimizer,
                providers,
                provider_options,
                options,
                loaded: RwLock::new(Vec::new()),
            };
            session.probe()?;
            Ok(session)
        })?;
        Ok(session)
    }

    /// The model's inputs (initializers excluded), in the graph's order.
    fn get_inputs(&self) -> Vec<NodeArg> {
        self.inputs.iter().map(NodeArg::of).collect()
    }

    /// The model's outputs, in the graph's order.
    fn get_outputs(&self) -> Vec<NodeArg> {
        self.outputs.iter().map(NodeArg::of).collect()
    }

    /// The backends this session prefers, in order.
    fn get_providers(&self) -> Vec<String> {
        self.providers.iter().map(|b| b.to_string()).collect()
    }

    /// The options given per provider.
    fn get_provider_options(&self) -> BTreeMap<String, BTreeMap<String, String>> {
        let mut all: BTreeMap<String, BTreeMap<String, String>> = self
            .providers
            .iter()
            .map(|b| (b.to_string(), BTreeMap::new()))
            .collect();
        for (id, values) in &self.provider_options {
            all.entry(id.to_string())
                .or_default()
                .extend(values.clone());
        }
        all
    }

    /// A copy of the options the session was created with.
    fn get_session_options(&self) -> SessionOptions {
        self.options.clone()
    }

    /// The networks loaded so far, one per set of input shapes (and bound input values):
    /// ``[{"input_shapes": {name: [dims]}, "bound_inputs": [names], "layers": {backend:
    /// count}}]``.
    fn get_specializations<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        let cache = self.loaded.read().unwrap_or_else(|e| e.into_inner());
        cache
            .iter()
            .map(|l| {
                let d = PyDict::new(py);
                let shapes = PyDict::new(py);
                for (decl, dims) in self.inputs.iter().zip(&l.shapes) {
                    shapes.set_item(&decl.name, dims)?;
                }
                d.set_item("input_shapes", shapes)?;
                let bound: Vec<&str> = l
                    .bound
                    .iter()
                    .map(|(i, _)| self.inputs[*i].name.as_str())
                    .collect();
                d.set_item("bound_inputs", bound)?;
                let layers = PyDict::new(py);
                for (b, n) in &l.layer_counts {
                    layers.set_item(b.as_str(), n)?;
                }
                d.set_item("layers", layers)?;
                Ok(d)
            })
            .collect()
    }

    /// Run the model.
    ///
    /// Args:
    ///     output_names: the outputs to return, in that order; ``None`` (or an empty list)
    ///         for all of them in the graph's order.
    ///     input_feed: ``{input name: array}`` for every input of the model. Arrays of the
    ///         input's dtype that are C-contiguous and aligned are read in place; others are
    ///         copied once. Lists and scalars go through ``numpy.asarray``.
    ///     run_options: accepted for ONNX Runtime compatibility; must be ``None``.
    ///
    /// Returns:
    ///     a list of NumPy arrays.
    ///
    /// Raises:
    ///     InvalidArgument: an unknown input or output name, a missing input, an input of
    ///         the wrong dtype or shape.
    ///     Fail: the execution failed (a backend's error, a loop limit).
    #[pyo3(signature = (output_names, input_feed, run_options=None))]
    fn run<'py>(
        &self,
        py: Python<'py>,
        output_names: Option<Vec<String>>,
        input_feed: &Bound<'py, PyAny>,
        run_options: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        if run_options.is_some_and(|o| !o.is_none()) {
            return Err(Error::invalid("run_options is not supported: pass None").into());
        }
        let feed = input_feed
            .cast::<PyDict>()
            .map_err(|_| Error::invalid("input_feed must be a dict of input names to arrays"))?;
        // The outputs asked for, as graph output indices.
        let wanted: Vec<usize> = match output_names {
            Some(names) if !names.is_empty() => names
                .iter()
                .map(|n| {
                    self.outputs
                        .iter()
                        .position(|d| d.name == *n)
                        .ok_or_else(|| {
                            Error::invalid(format!(
                                "'{n}' is not an output of the model; its outputs are: {}",
                                model::all_names(&self.outputs)
                            ))
                        })
                })
                .collect::<Result<_>>()?,
            _ => (0..self.outputs.len()).collect(),
        };
        // The given arrays, by graph input.
        let mut given: Vec<Option<Bound<'py, PyUntypedArray>>> = vec![None; self.inputs.len()];
        for (key, value) in feed.iter() {
            let name: String = key
                .extract()
                .map_err(|_| Error::invalid("input names must be strings"))?;
            let i = self
                .inputs
                .iter()
                .position(|d| d.name == name)
                .ok_or_else(|| {
                    Error::from(RuntimeError::UnknownInput {
                        name: name.clone(),
                        all: model::all_names(&self.inputs),
                    })
                })?;
            let array = arrays::as_array(&value)?;
            self.check_input(i, &array)?;
            given[i] = Some(array);
        }
        let mut borrowed = Vec::with_capacity(self.inputs.len());
        for (decl, array) in self.inputs.iter().zip(&given) {
            let Some(array) = array else {
                return Err(Error::from(RuntimeError::MissingInput {
                    name: decl.name.clone(),
                    expected: decl.describe(&self.options.free_dimensions),
                    all: model::all_names(&self.inputs),
                })
                .into());
            };
            let dtype = decl.dtype.ok_or_else(|| {
                Error::unsupported(format!("input '{}' has a type backplane lacks", decl.name))
            })?;
            borrowed.push(Input::borrow(array, dtype)?);
        }
        let shapes: Vec<Vec<usize>> = given.iter().flatten().map(|a| a.shape().to_vec()).collect();
        let bytes: Vec<&[u8]> = borrowed.iter().map(Input::bytes).collect::<Result<_>>()?;
        // The network for these shapes: kept, or built now (without the GIL).
        let (loaded, kept) = match self.find(&shapes, &bytes) {
            Some(l) => (l, true),
            None => {
                // The model was checked when the session was created: a model that does not
                // import now does not fit these inputs' shapes or values.
                let built = py.detach(|| self.build(&shapes, &bytes)).map_err(|e| {
                    if e.kind == Kind::InvalidGraph {
                        Error::invalid(format!(
                            "the model cannot be imported for these inputs: {}",
                            e.message
                        ))
                    } else {
                        e
                    }
                })?;
                let built = Arc::new(built);
                let kept = self.keep(&built);
                (built, kept)
            }
        };
        let network = loaded.net.network();
        let infos = network.outputs().iter().map(|&t| &network.tensor(t).info);
        let mut outputs = Outputs::allocate(py, infos)?;
        let result = {
            let buffers = outputs.buffers()?;
            let mut views: Vec<TensorViewMut<'_>> = network
                .outputs()
                .iter()
                .zip(buffers)
                .map(|(&t, data)| TensorViewMut {
                    info: &network.tensor(t).info,
                    data,
                })
                .collect();
            let inputs: Vec<backplane::core::TensorView<'_>> = loaded
                .feeds
                .iter()
                .zip(network.inputs())
                .map(|(&i, &t)| backplane::core::TensorView {
                    info: &network.tensor(t).info,
                    data: bytes[i],
                })
                .collect();
            let net = &loaded.net;
            py.detach(|| net.execute_views(&inputs, &mut views))
        };
        if !kept {
            let _ = self.runtime.unload_network(loaded.id);
        }
        result.map_err(Error::from)?;
        let arrays = outputs.finish(py)?;
        Ok(wanted
            .iter()
            .map(|&k| arrays[loaded.outputs[k]].clone())
            .collect())
    }

    fn __repr__(&self) -> String {
        format!(
            "InferenceSession(inputs=[{}], outputs=[{}], providers=[{}])",
            model::all_names(&self.inputs),
            model::all_names(&self.outputs),
            self.providers
                .iter()
                .map(|b| format!("'{b}'"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
}
