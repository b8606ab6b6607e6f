//! backplane-onnx: imports ONNX models into a backplane [`Network`].
//!
//! The importer decodes the protobuf (with the prost types in [`proto`], generated once from
//! `onnx.proto`), loads initializers (raw, typed and external data), resolves the inputs'
//! symbolic dimensions, and walks the nodes in order. Every value is either a constant known at
//! import time or a tensor computed at run time: `Shape` and `Size` of a (static-shaped) tensor
//! fold to constants, nodes that only relabel a shape fold without help, and any node whose
//! inputs are all constants is folded by the optional [`ImportOptions::evaluator`]. That is how
//! `Shape → Gather → Unsqueeze → Concat → Reshape` chains disappear. The remaining nodes become
//! layers named after the nodes, whose output tensors carry the ONNX value names.
//!
//! Parameters that ONNX passes as constant inputs (Reshape's shape, Slice's starts, Pad's pads,
//! Resize's scales or sizes, ...) are resolved into the op descriptors; when one is computed at
//! run time the import reports [`OnnxError::NeedsInputValues`] with the graph inputs it depends
//! on, and [`import_specialized`] imports the model for given values of those inputs. All
//! unsupported nodes are reported together in [`OnnxError::UnsupportedOps`].
//!
//! ```no_run
//! use backplane_onnx::{import_file, ImportOptions};
//! let mut options = ImportOptions::default();
//! options.dim_values.insert("batch".into(), 1);
//! let network = import_file(std::path::Path::new("model.onnx"), &options)?;
//! println!("{} layers", network.layers().len());
//! # Ok::<(), backplane_onnx::OnnxError>(())
//! ```

mod attrs;
mod chunked;
mod error;
mod import;
pub mod node_names;
mod ops;
pub mod proto;
mod signature;
mod structured;
pub mod symbolic;
mod tensor;

pub use error::{OnnxError, UnsupportedOp};
pub use signature::{tensor_proto, GraphValue, ModelSignature, ValueType};
pub use structured::{decode_optional, decode_sequence, element_name, InputStructure, OnnxValue};
pub use symbolic::{symbolic_signature, symbolic_signature_with_nodes};

use backplane_core::ops::Evaluator;
use backplane_core::{DataType, Network, Tensor};
use prost::Message;
use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The oldest opset of the default ONNX domain that the importer translates.
pub const MIN_OPSET: i64 = import::MIN_OPSET;

/// Default for [`ImportOptions::max_tensor_bytes`]: 4 GiB.
pub const DEFAULT_MAX_TENSOR_BYTES: usize = if usize::BITS >= 64 {
    4 << 30
} else {
    usize::MAX
};

/// How to import a model.
#[derive(Clone)]
pub struct ImportOptions {
    /// Values for symbolic input dimensions, by `dim_param` name (e.g. `batch` → 1). Unnamed
    /// unknown dimensions (no `dim_param`, or `dim_value: -1` as some exporters write them) are
    /// named `<input>_dim<index>`, as [`inspect_inputs`] reports.
    pub dim_values: HashMap<String, usize>,
    /// Full shapes of inputs by input name. They give the values of the declared symbolic
    /// dimensions; a shape that changes the rank or a dimension declared as a number is
    /// refused ([`OnnxError::InputShapeMismatch`]).
    pub input_shapes: HashMap<String, Vec<usize>>,
    /// Computes ops on constants, to fold constant subgraphs (the CpuRef backend has one).
    /// Without it only `Shape`, `Size`, `Constant` and shape-relabelling ops are folded.
    pub evaluator: Option<Arc<dyn Evaluator + Send + Sync>>,
    /// The largest tensor (initializer, constant, folded value or input) in bytes.
    pub max_tensor_bytes: usize,
    /// Graph inputs whose values are fixed for this import (a *specialization*): they become
    /// constants, so that parameters computed from them (a Reshape's shape, a TopK's `k`) and
    /// data-dependent shapes (NonZero, Unique) resolve at import. See
    /// [`import_specialized`], which binds exactly the inputs a model needs.
    pub input_values: HashMap<String, Arc<Tensor>>,
    /// The structure of each sequence or optional graph input (its length and its elements'
    /// shapes): such an input becomes one network input per tensor it holds, named by
    /// [`element_name`] (see [`OnnxValue::flatten`]).
    pub input_structures: HashMap<String, InputStructure>,
    /// The initializers of earlier imports of the same model, reused instead of decoded
    /// again: the imports of one model for several input shapes then share their weights
    /// (one copy in memory, the same `Arc` in every network, so backends can key what they
    /// derive from a weight, such as packed operands, by its identity). The holder must use
    /// it for one model only.
    pub shared_initializers: Option<Arc<SharedInitializers>>,
    /// Stop at the first node that needs the values of a run-time tensor, reporting only it
    /// ([`OnnxError::NeedsInputValues`]), instead of importing the rest of the graph to report
    /// every such node. For callers that split the model at that node and import the part
    /// before it on its own (`DynamicNetwork`): the import then costs the part before the
    /// node, not the whole graph. Unsupported operators after the node are reported when the
    /// rest is imported.
    pub stop_at_value_need: bool,
    /// The index of the node list the nodes given to an import with its nodes apart
    /// (`import_model_specialized_with_nodes`) are a suffix of, and where they start in it.
    /// With it the import asks the index what later nodes read, and which names are taken,
    /// instead of collecting the names of every node it is given: `DynamicNetwork` imports
    /// a split model from each split point on, and those walks made it quadratic. It must
    /// index the same nodes.
    pub node_names: Option<node_names::NodeNamesAt>,
}

/// Initializers decoded by one import of a model, for later imports of the same model
/// ([`ImportOptions::shared_initializers`]).
#[derive(Debug, Default)]
pub struct SharedInitializers {
    tensors: std::sync::Mutex<HashMap<String, Arc<Tensor>>>,
}

impl SharedInitializers {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// The initializer `name`, when an earlier import decoded it.
    pub fn get(&self, name: &str) -> Option<Arc<Tensor>> {
        let map = self.tensors.lock().unwrap_or_else(|e| e.into_inner());
        map.get(name).cloned()
    }

    /// Keep `tensor` as the initializer `name`.
    pub fn insert(&self, name: &str, tensor: Arc<Tensor>) {
        let mut map = self.tensors.lock().unwrap_or_else(|e| e.into_inner());
        map.insert(name.to_string(), tensor);
    }

    /// How many initializers it holds.
    pub fn len(&self) -> usize {
        self.tensors.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// True when it holds none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Decode every top-level initializer of `model` into the set (those it holds already
    /// are kept), taking the data out of `model` rather than copying it: afterwards `model`
    /// keeps the initializers' names, types and dimensions, and imports sharing this set
    /// ([`ImportOptions::shared_initializers`]) take the decoded tensors, so the weights are
    /// held once. An initializer that does not decode into a tensor (an unsupported element
    /// type) is left whole, for the import to handle as it would; one whose data is invalid
    /// is an error (its import would fail the same way). `base_dir` is where external data
    /// lies; `options` gives the size limit.
    pub fn take_from(
        &self,
        model: &mut proto::ModelProto,
        base_dir: Option<&Path>,
        options: &ImportOptions,
    ) -> Result<(), OnnxError> {
        let Some(graph) = model.graph.as_mut() else {
            return Ok(());
        };
        let loader = tensor::Loader {
            base_dir,
            max_bytes: options.max_tensor_bytes,
        };
        for tp in &mut graph.initializer {
            let name = tp.name.clone().unwrap_or_default();
            if name.is_empty() {
                continue;
            }
            if self.get(&name).is_none() {
                if tensor::map_dtype(tp.data_type.unwrap_or(0)).is_none() {
                    // Not a tensor type: the import decodes what it can of it, from the data.
                    continue;
                }
                match loader.decode(tp, &name)? {
                    tensor::Decoded::Tensor(t) => self.insert(&name, Arc::new(t)),
                    tensor::Decoded::Unsupported { .. } => continue,
                }
            }
            *tp = proto::TensorProto {
                name: tp.name.take(),
                data_type: tp.data_type,
                dims: std::mem::take(&mut tp.dims),
                ..proto::TensorProto::default()
            };
        }
        Ok(())
    }
}

impl Default for ImportOptions {
    fn default() -> Self {
        ImportOptions {
            dim_values: HashMap::new(),
            input_shapes: HashMap::new(),
            evaluator: None,
            max_tensor_bytes: DEFAULT_MAX_TENSOR_BYTES,
            input_values: HashMap::new(),
            input_structures: HashMap::new(),
            shared_initializers: None,
            stop_at_value_need: false,
            node_names: None,
        }
    }
}

impl fmt::Debug for ImportOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ImportOptions")
            .field("dim_values", &self.dim_values)
            .field("input_shapes", &self.input_shapes)
            .field(
                "evaluator",
                &self.evaluator.as_ref().map(|_| "dyn Evaluator"),
            )
            .field("max_tensor_bytes", &self.max_tensor_bytes)
            .field(
                "input_values",
                &self.input_values.keys().collect::<Vec<_>>(),
            )
            .field("input_structures", &self.input_structures)
            .field(
                "shared_initializers",
                &self.shared_initializers.as_ref().map(|s| s.len()),
            )
            .field("stop_at_value_need", &self.stop_at_value_need)
            .field("node_names", &self.node_names.as_ref().map(|n| n.start))
            .finish()
    }
}

impl ImportOptions {
    /// Set a symbolic dimension.
    pub fn with_dim(mut self, name: impl Into<String>, value: usize) -> Self {
        self.dim_values.insert(name.into(), value);
        self
    }

    /// Set an input's full shape.
    pub fn with_input_shape(mut self, input: impl Into<String>, dims: Vec<usize>) -> Self {
        self.input_shapes.insert(input.into(), dims);
        self
    }

    /// Fold constant subgraphs with this evaluator.
    pub fn with_evaluator(mut self, evaluator: Arc<dyn Evaluator + Send + Sync>) -> Self {
        self.evaluator = Some(evaluator);
        self
    }

    /// Set the tensor size limit.
    pub fn with_max_tensor_bytes(mut self, bytes: usize) -> Self {
        self.max_tensor_bytes = bytes;
        self
    }

    /// Fix the value of a graph input for this import (see [`ImportOptions::input_values`]).
    pub fn with_input_value(mut self, input: impl Into<String>, value: Arc<Tensor>) -> Self {
        self.input_values.insert(input.into(), value);
        self
    }

    /// Import for these values of graph inputs: a tensor gives its input's shape, a sequence
    /// or optional its structure. Returns the options and the values flattened into the
    /// tensors that feed the network (and that [`import_specialized`] binds from).
    pub fn with_input_values_shaped(
        mut self,
        values: &[(String, OnnxValue)],
    ) -> (Self, Vec<(String, Tensor)>) {
        let mut flat = Vec::new();
        for (name, value) in values {
            match value {
                OnnxValue::Tensor(t) => {
                    self.input_shapes
                        .insert(name.clone(), t.shape().dims().to_vec());
                }
                other => {
                    self.input_structures
                        .insert(name.clone(), other.structure());
                }
            }
            flat.extend(value.flatten(name));
        }
        (self, flat)
    }

    /// Give the structure of a sequence or optional input (see
    /// [`ImportOptions::input_structures`]).
    pub fn with_input_structure(
        mut self,
        input: impl Into<String>,
        structure: InputStructure,
    ) -> Self {
        self.input_structures.insert(input.into(), structure);
        self
    }
}

/// One dimension of a declared input shape.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Dim {
    /// A fixed size.
    Fixed(usize),
    /// A symbolic size, set through [`ImportOptions::dim_values`] by this name.
    Symbolic(String),
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Fixed(v) => write!(f, "{v}"),
            Dim::Symbolic(s) => f.write_str(s),
        }
    }
}

/// A runtime input of a model, as declared (initializers are not listed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelInput {
    /// The input's name.
    pub name: String,
    /// Its element type.
    pub dtype: DataType,
    /// Its declared dimensions (empty for a scalar, or when `shape_known` is false).
    pub dims: Vec<Dim>,
    /// False when the model declares no shape at all (the full shape must then be given).
    pub shape_known: bool,
}

impl ModelInput {
    /// The names of the symbolic dimensions, in order.
    pub fn symbolic_dims(&self) -> Vec<&str> {
        self.dims
            .iter()
            .filter_map(|d| match d {
                Dim::Symbolic(s) => Some(s.as_str()),
                Dim::Fixed(_) => None,
            })
            .collect()
    }
}

/// Decode the protobuf of an ONNX model.
pub fn decode_model(bytes: &[u8]) -> Result<proto::ModelProto, OnnxError> {
    decode(bytes, None)
}

fn decode(bytes: &[u8], path: Option<&Path>) -> Result<proto::ModelProto, OnnxError> {
    decode_buf(bytes, path)
}

/// Decode a model file as it is read (see [`chunked`]): the file's bytes are never whole in
/// memory beside the decoded model.
fn decode_file(path: &Path) -> Result<proto::ModelProto, OnnxError> {
    let io = |source: std::io::Error| OnnxError::Io {
        path: path.to_path_buf(),
        source,
    };
    let len = check_regular_file(path, MAX_MODEL_FILE_BYTES).map_err(io)?;
    let file = std::fs::File::open(path).map_err(io)?;
    let mut buf = chunked::ChunkedReader::new(file, usize::try_from(len).unwrap_or(usize::MAX));
    let decoded = decode_buf(&mut buf, Some(path));
    if let Some(e) = buf.take_error() {
        return Err(io(e));
    }
    // A decoded model consumed every byte; more than the size read means the file changed.
    if decoded.is_ok() && buf.has_more().map_err(io)? {
        return Err(io(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "the file grew while it was read",
        )));
    }
    decoded
}

fn decode_buf(
    mut bytes: impl prost::bytes::Buf,
    path: Option<&Path>,
) -> Result<proto::ModelProto, OnnxError> {
    let err = |reason: String| OnnxError::Decode {
        path: path.map(Path::to_path_buf),
        reason,
    };
    if !bytes.has_remaining() {
        return Err(err("it is empty".into()));
    }
    let model = proto::ModelProto::decode(&mut bytes).map_err(|e| {
        err(format!(
            "protobuf decoding failed ({e}); is the file truncated?"
        ))
    })?;
    if model.graph.is_none() {
        return Err(err("it contains no graph".into()));
    }
    Ok(model)
}

/// The largest model file read: a protobuf message cannot exceed 2 GiB (larger weights go
/// to external data files).
pub const MAX_MODEL_FILE_BYTES: u64 = 2 << 30;

/// What kind of file `meta` describes, for a message refusing it.
fn file_kind(meta: &std::fs::Metadata) -> &'static str {
    let t = meta.file_type();
    if t.is_dir() {
        return "a directory";
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return "a FIFO (named pipe)";
        }
        if t.is_char_device() || t.is_block_device() {
            return "a device";
        }
        if t.is_socket() {
            return "a socket";
        }
    }
    "not a regular file"
}

/// Refuse `path` unless it is a regular file (links followed) of at most `limit` bytes: a
/// FIFO would block the open for ever and a device could be read for ever. Returns its size.
pub fn check_regular_file(path: &Path, limit: u64) -> std::io::Result<u64> {
    let meta = std::fs::metadata(path)?;
    if !meta.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{}, not a regular file: refused", file_kind(&meta)),
        ));
    }
    if meta.len() > limit {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "the file has {} bytes, more than the limit of {limit} bytes",
                meta.len()
            ),
        ));
    }
    Ok(meta.len())
}

/// Read a whole file of at most `limit` bytes, refusing anything but a regular file (see
/// [`check_regular_file`]); the read stops at the limit even if the file grows meanwhile,
/// and memory that cannot be allocated is an error, not an abort.
pub fn read_regular_file(path: &Path, limit: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let len = check_regular_file(path, limit)?;
    let file = std::fs::File::open(path)?;
    let mut bytes = Vec::new();
    bytes
        .try_reserve_exact(usize::try_from(len).unwrap_or(usize::MAX))
        .map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::OutOfMemory,
                format!("cannot allocate {len} bytes to read the file"),
            )
        })?;
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("the file grew past the limit of {limit} bytes while it was read"),
        ));
    }
    Ok(bytes)
}

fn model_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Read and decode an ONNX model file (its external data stays where it is; pass the file's
/// folder as `base_dir` when importing it).
pub fn decode_model_file(path: &Path) -> Result<proto::ModelProto, OnnxError> {
    decode_file(path)
}

/// The folder a model file's external data is relative to.
pub fn model_base_dir(path: &Path) -> PathBuf {
    model_dir(path)
}

/// Import an ONNX model file. External data files are looked up beside it.
pub fn import_file(path: &Path, options: &ImportOptions) -> Result<Network, OnnxError> {
    import::import(decode_file(path)?, Some(&model_dir(path)), options)
}

/// Import an ONNX model from its bytes. `base_dir` is the folder external data files are
/// relative to (`None`: a model with external data is rejected).
pub fn import_bytes(
    bytes: &[u8],
    base_dir: Option<&Path>,
    options: &ImportOptions,
) -> Result<Network, OnnxError> {
    import::import(decode(bytes, None)?, base_dir, options)
}

/// Import an already decoded model (e.g. one built in code with the [`proto`] types).
pub fn import_model(
    model: proto::ModelProto,
    base_dir: Option<&Path>,
    options: &ImportOptions,
) -> Result<Network, OnnxError> {
    import::import(model, base_dir, options)
}

/// Import a model specialized on the values of the inputs it needs at import.
///
/// Some models compute operator parameters from their inputs (a Reshape whose shape, or a
/// Slice whose starts, is a graph input) or have data-dependent output shapes (NonZero,
/// Unique). backplane networks have static shapes, so such a model is imported for given
/// values of those inputs: the import reports [`OnnxError::NeedsInputValues`], the inputs
/// listed there are bound from `values` (as [`ImportOptions::input_values`]) and the import is
/// repeated until it succeeds or needs an input `values` does not have. Returns the network and
/// the names of the inputs that were bound (they are no longer inputs of the network; the
/// caller feeds only the others). A caller that executes many times keys a cache of
/// specializations by the values of the bound inputs.
pub fn import_specialized(
    bytes: &[u8],
    base_dir: Option<&Path>,
    options: &ImportOptions,
    values: &[(String, Tensor)],
) -> Result<(Network, Vec<String>), OnnxError> {
    import_model_specialized(decode(bytes, None)?, base_dir, options, values)
}

/// [`import_specialized`] for an already decoded model (see [`decode_model_file`]).
pub fn import_model_specialized(
    mut model: proto::ModelProto,
    base_dir: Option<&Path>,
    options: &ImportOptions,
    values: &[(String, Tensor)],
) -> Result<(Network, Vec<String>), OnnxError> {
    // A retry imports the model again. Its initializers are decoded once, by the first
    // import, and shared with the retries, so the copy kept for them holds no weights: the
    // model is never in memory twice. With no values to bind, no retry can make progress:
    // no copy is kept for one (a `DynamicNetwork` imports its weightless graph this way at
    // every plan miss).
    let retry_copy = (!values.is_empty()).then(|| import::without_initializer_data(&mut model));
    let mut first = Some(model);
    bind_until_imported(options, values, |options| {
        let Some(model) = first.take().or_else(|| retry_copy.clone()) else {
            return Err(OnnxError::invalid(
                "internal: an import was retried without a copy of the model to retry",
            ));
        };
        import::import(model, base_dir, options)
    })
}

/// [`import_model_specialized`] for a model the caller keeps: the graph is borrowed, never
/// copied, by the import and by each retry. Initializers come from
/// [`ImportOptions::shared_initializers`] when it holds them (a set filled by
/// [`SharedInitializers::take_from`], as a `DynamicNetwork` does, makes an import copy no
/// weight); one it does not hold is copied to be decoded, then shared with the retries.
pub fn import_model_specialized_borrowed(
    model: &proto::ModelProto,
    base_dir: Option<&Path>,
    options: &ImportOptions,
    values: &[(String, Tensor)],
) -> Result<(Network, Vec<String>), OnnxError> {
    bind_until_imported(options, values, |options| {
        import::import_borrowed(model, base_dir, options)
    })
}

/// [`import_model_specialized_borrowed`] with the graph's nodes given apart (the graph's own
/// are ignored): a caller that serves parts of one node list (a `DynamicNetwork` split at
/// data-dependent nodes serves every suffix of it) shares the list instead of copying it.
pub fn import_model_specialized_with_nodes(
    model: &proto::ModelProto,
    nodes: &[proto::NodeProto],
    base_dir: Option<&Path>,
    options: &ImportOptions,
    values: &[(String, Tensor)],
) -> Result<(Network, Vec<String>), OnnxError> {
    bind_until_imported(options, values, |options| {
        import::import_borrowed_nodes(model, nodes, base_dir, options)
    })
}

/// Import with `import`, binding more of `values` after each import that needs input values
/// it has, until one succeeds or none can be bound; the network and the inputs bound. The
/// imports share one set of decoded initializers (a new one unless `options` has one).
fn bind_until_imported(
    options: &ImportOptions,
    values: &[(String, Tensor)],
    mut import: impl FnMut(&ImportOptions) -> Result<Network, OnnxError>,
) -> Result<(Network, Vec<String>), OnnxError> {
    let mut options = options.clone();
    let mut bound: Vec<String> = options.input_values.keys().cloned().collect();
    if options.shared_initializers.is_none() {
        options.shared_initializers = Some(Arc::new(SharedInitializers::new()));
    }
    loop {
        match import(&options) {
            Err(OnnxError::NeedsInputValues { inputs, nodes }) => {
                if !bind_more(&mut options, &mut bound, values, &inputs) {
                    return Err(OnnxError::NeedsInputValues { inputs, nodes });
                }
            }
            Err(e) => return Err(e),
            Ok(network) => return Ok((network, bound)),
        }
    }
}

/// Bind the `needed` inputs that `values` has and that are not bound yet (a retry of a
/// specialized import); whether any was.
fn bind_more(
    options: &mut ImportOptions,
    bound: &mut Vec<String>,
    values: &[(String, Tensor)],
    needed: &[String],
) -> bool {
    let mut progress = false;
    for name in needed {
        if bound.contains(name) {
            continue;
        }
        if let Some((_, t)) = values.iter().find(|(n, _)| n == name) {
            options
                .input_values
                .insert(name.clone(), Arc::new(t.clone()));
            bound.push(name.clone());
            progress = true;
        }
    }
    progress
}

/// Decode a serialized `TensorProto` (as the `.pb` files of the ONNX backend tests hold).
pub fn decode_tensor(bytes: &[u8]) -> Result<Tensor, OnnxError> {
    let mut tp = proto::TensorProto::decode(bytes).map_err(|e| OnnxError::Decode {
        path: None,
        reason: format!("not a TensorProto: {e}"),
    })?;
    let name = tp.name.clone().unwrap_or_default();
    let loader = tensor::Loader {
        base_dir: None,
        max_bytes: DEFAULT_MAX_TENSOR_BYTES,
    };
    match loader.decode(&mut tp, &name)? {
        tensor::Decoded::Tensor(t) => Ok(t),
        tensor::Decoded::Unsupported { dtype, .. } => Err(OnnxError::UnsupportedDataType {
            what: format!("tensor '{name}'"),
            dtype,
        }),
    }
}

/// The runtime inputs of a model with their declared types and dimensions, so that a tool can
/// tell its user which symbolic dimensions need values.
pub fn inspect_inputs(bytes: &[u8]) -> Result<Vec<ModelInput>, OnnxError> {
    import::inspect(&decode(bytes, None)?)
}

/// [`inspect_inputs`] for a file.
pub fn inspect_file(path: &Path) -> Result<Vec<ModelInput>, OnnxError> {
    import::inspect(&decode_file(path)?)
}

/// [`inspect_inputs`] for a model already decoded (so that a tool does not decode it twice).
pub fn inspect_model(model: &proto::ModelProto) -> Result<Vec<ModelInput>, OnnxError> {
    import::inspect(model)
}
