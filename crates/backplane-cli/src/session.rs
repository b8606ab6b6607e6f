//! What `run`, `bench` and `inspect` share: the model and backend arguments, reading inputs as
//! the kind of value the model declares, importing (specialized on the given input values when
//! the model needs them at import) and turning it all into a loaded network with its inputs.

use crate::CliError;
use backplane::onnx::{ModelSignature, OnnxError, OnnxValue, ValueType};
use backplane::runtime::OptimizedNetwork;
use backplane::{
    BackendId, DataType, ImportOptions, Network, NetworkId, OptimizerOptions, Runtime, Tensor,
    TensorInfo,
};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Arguments naming a model and how to run it.
#[derive(Debug, Clone, clap::Args)]
pub struct ModelArgs {
    /// The model: ONNX, or TFLite (a `.tflite` file, or any file with TFLite's identifier).
    pub model: PathBuf,
    #[command(flatten)]
    pub common: CommonArgs,
}

/// Inputs and backends, shared by every command that runs a model.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct CommonArgs {
    /// Backends in order of preference, comma-separated; a layer the first cannot run falls
    /// back to the next. `--backends CpuRef` runs the reference backend alone.
    #[arg(long, default_value = backplane::DEFAULT_BACKENDS)]
    pub backends: String,
    /// An input from a .npy file, or from an ONNX .pb file (a TensorProto, or a SequenceProto
    /// / OptionalProto for a sequence or optional input, as in ONNX test data sets):
    /// NAME=FILE (repeat for several inputs).
    #[arg(long = "input", value_name = "NAME=FILE")]
    pub inputs: Vec<String>,
    /// The shape of an input with symbolic dimensions: NAME=1x3x224x224.
    #[arg(long = "input-shape", value_name = "NAME=DIMS")]
    pub input_shapes: Vec<String>,
    /// Pass option KEY=VALUE to backend BACKEND (repeatable). CpuAcc's options: threads=N,
    /// isa=avx2|portable, spin_us=N, thread_choice=on (each layer times its steps shared and
    /// alone and keeps the faster way), and the path switches winograd, direct, channel_lanes, dw_rows,
    /// dw_channels_last, split_halves, nhwc, conv_pairs, conv_gather (=on|off). GpuAcc's:
    /// allow_software=true (accept a software Vulkan adapter), adapter=NAME.
    #[arg(long = "backend-option", value_name = "BACKEND:KEY=VALUE", value_parser = crate::backends::parse_backend_option)]
    pub backend_options: Vec<(String, String, String)>,
    /// Run a layer (by name or op type) on a given backend first: NAME=BACKEND.
    #[arg(long = "layer-backend", value_name = "NAME=BACKEND")]
    pub layer_backends: Vec<String>,
    /// Generate the inputs not given with --input: random (uniform in [-1, 1)), zeros or ones.
    #[arg(long = "generate", value_name = "KIND", value_parser = ["random", "zeros", "ones"])]
    pub generate: Option<String>,
    /// Seed for --generate random.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Intra-op threads for backends that use them (CpuAcc), 1 to 1024; default: every core.
    #[arg(long, value_name = "N", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=MAX_THREADS))]
    pub threads: Option<usize>,
    /// Stop an execution that runs longer than this many seconds (checked between layers);
    /// default 3600.
    #[arg(long = "time-limit", value_name = "SECONDS", value_parser = parse_seconds, conflicts_with = "no_time_limit")]
    pub time_limit: Option<std::time::Duration>,
    /// Let executions run as long as they take (no --time-limit).
    #[arg(long = "no-time-limit")]
    pub no_time_limit: bool,
    /// Stop a Loop after this many iterations, counting those of nested Loops (default
    /// 16,777,216).
    #[arg(long = "max-loop-iterations", value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_loop_iterations: Option<u64>,
    /// Refuse a model whose execution needs more working memory than this, in bytes or with
    /// a K, M, G or T suffix (powers of 1024), e.g. 8G; default: the memory available when
    /// the command starts.
    #[arg(long = "max-memory", value_name = "BYTES", value_parser = parse_bytes)]
    pub max_memory: Option<usize>,
    /// How a TFLite model's int8 convolutions and fully connected layers requantize their
    /// sums: litert (the default: the rule of the kernels LiteRT runs the model on, fixed
    /// point when its XNNPACK delegate refuses the model, a requantization scale of 256 or
    /// more, f32 otherwise; outputs equal LiteRT's), f32 (XNNPACK's rule on every model:
    /// CpuAcc's fastest int8 kernels), or fixed-point (gemmlowp's Q31 multiplier, LiteRT's
    /// builtin kernels, on every model); -v logs the choice. ONNX models are not affected.
    #[arg(long = "int8-requant", value_name = "RULE", default_value = "litert", value_parser = ["litert", "f32", "fixed-point"])]
    pub int8_requant: String,
}

impl CommonArgs {
    /// `--int8-requant` as the importer's choice.
    pub fn int8_requant(&self) -> backplane::tflite::Int8Requant {
        backplane::tflite::Int8Requant::from_name(&self.int8_requant).unwrap_or_default()
    }
}

/// The most intra-op threads `--threads` takes.
pub const MAX_THREADS: u64 = 1024;

/// The execution time limit when `--time-limit` is not given: generous enough for any model
/// a user means to run, short of letting a runaway model spin for ever.
pub const DEFAULT_TIME_LIMIT: std::time::Duration = std::time::Duration::from_secs(3600);

/// The longest `--time-limit` and `bench --time`: about 11.5 days.
const MAX_SECONDS: f64 = 1e6;

/// A positive, finite number of seconds, at most [`MAX_SECONDS`].
pub fn parse_seconds(text: &str) -> Result<std::time::Duration, String> {
    let secs: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("'{text}' is not a number of seconds"))?;
    if !(secs > 0.0 && secs <= MAX_SECONDS) {
        return Err(format!(
            "'{text}' must be a positive number of seconds, at most {MAX_SECONDS}"
        ));
    }
    std::time::Duration::try_from_secs_f64(secs).map_err(|e| format!("'{text}': {e}"))
}

/// A byte count, optionally with a K, M, G or T suffix (powers of 1024; a trailing B or iB is
/// allowed): `8G`, `512MiB`, `1000000`.
pub fn parse_bytes(text: &str) -> Result<usize, String> {
    let t = text.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(t);
    let (number, shift) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let shift = match c.to_ascii_uppercase() {
                'K' => 10,
                'M' => 20,
                'G' => 30,
                'T' => 40,
                _ => return Err(format!("'{text}': the suffix must be K, M, G or T")),
            };
            (&t[..i], shift)
        }
        _ => (t, 0),
    };
    let n: usize = number
        .trim()
        .parse()
        .map_err(|_| format!("'{text}' is not a size like 8G or 1048576"))?;
    n.checked_mul(1usize << shift)
        .filter(|&b| b > 0)
        .ok_or_else(|| format!("'{text}' must be a positive size that fits in memory"))
}

/// Read a value of type `ty` from a `.pb` file (the protobuf message of that type) or, for a
/// tensor, a `.npy` file. `input` names the model input it is for, in messages.
pub fn read_value(path: &Path, ty: &ValueType, input: Option<&str>) -> Result<OnnxValue, CliError> {
    let declared = || match input {
        Some(name) => format!(
            " (the model declares '{name}' as a {})",
            match ty {
                ValueType::Tensor => "tensor",
                ValueType::Sequence(_) => "sequence",
                ValueType::Optional(_) => "optional",
                ValueType::Unsupported(what) => what,
            }
        ),
        None => String::new(),
    };
    if path.extension().is_some_and(|e| e == "pb") {
        let bytes = backplane::onnx::read_regular_file(path, backplane::npy::MAX_FILE_BYTES)
            .map_err(|e| CliError::failed(format!("{}: {e}", path.display())))?;
        ty.decode(&bytes).map_err(|e| match e {
            OnnxError::UnsupportedDataType { .. } => {
                CliError::unsupported(format!("{}: {e}", path.display()))
            }
            e => CliError::failed(format!(
                "{}: not a {} file{}: {e}",
                path.display(),
                ty.message_name(),
                declared()
            )),
        })
    } else if *ty == ValueType::Tensor {
        Ok(OnnxValue::Tensor(backplane::npy::read_file(path)?))
    } else {
        Err(CliError::usage(format!(
            "{}: a .npy file holds one tensor{}; give a .pb file holding a {}",
            path.display(),
            declared(),
            ty.message_name()
        )))
    }
}

/// "CpuAcc: 9 layers, CpuRef: 1 layer": how many layers each backend runs (from
/// [`OptimizedNetwork::layer_counts`]).
pub fn backend_summary(counts: &[(BackendId, usize)]) -> String {
    if counts.is_empty() {
        // E.g. a data-dependent model whose every node ran at a cut (imported alone, folded).
        return "no layers".to_string();
    }
    counts
        .iter()
        .map(|(b, n)| format!("{b}: {n} layer{}", if *n == 1 { "" } else { "s" }))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Split `NAME=VALUE`.
pub fn split_pair<'a>(arg: &'a str, flag: &str) -> Result<(&'a str, &'a str), CliError> {
    arg.split_once('=')
        .filter(|(k, v)| !k.is_empty() && !v.is_empty())
        .ok_or_else(|| CliError::usage(format!("{flag} expects NAME=VALUE, got '{arg}'")))
}

/// Parse `1x3x224x224` (or comma-separated).
pub fn parse_dims(text: &str, flag: &str) -> Result<Vec<usize>, CliError> {
    text.split(['x', ','])
        .map(|d| {
            d.trim().parse::<usize>().map_err(|_| {
                CliError::usage(format!("{flag}: '{text}' is not a shape like 1x3x224x224"))
            })
        })
        .collect()
}

/// A model imported, optimized and loaded, with its inputs ready.
pub struct Session {
    /// The runtime holding the network.
    pub runtime: Runtime,
    /// The loaded network.
    pub id: NetworkId,
    /// How many layers each backend runs. The optimized network itself is not kept: the
    /// loaded network has it, and a second copy would keep weights the load released.
    pub layer_counts: Vec<(BackendId, usize)>,
    /// Inputs in the network's input order.
    pub inputs: Vec<(String, Tensor)>,
    /// The model's graph inputs and outputs with their value types.
    pub signature: ModelSignature,
    /// Graph inputs bound at import (see [`Imported::bound`]).
    pub bound: Vec<String>,
    /// Layers that do not run: their outputs are views or parts of another tensor's memory
    /// (the memory plan's sub-tensor layers), so a profile has no time for them.
    pub views: usize,
}

impl Session {
    /// The inputs as the runtime takes them.
    pub fn named_inputs(&self) -> Vec<(&str, &Tensor)> {
        self.inputs.iter().map(|(n, t)| (n.as_str(), t)).collect()
    }
}

/// A small deterministic generator (SplitMix64) for reproducible random inputs.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [-1, 1).
    fn unit(&mut self) -> f32 {
        ((self.next() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

/// A generated tensor of `info`: random values in [-1, 1) (integers in 0..10, bools 0/1),
/// zeros or ones.
pub fn generate(info: &TensorInfo, kind: &str, seed: u64) -> Result<Tensor, CliError> {
    let mut rng = SplitMix(seed);
    let n = info.shape.elements();
    let values: Vec<f64> = (0..n)
        .map(|_| match kind {
            "random" if info.dtype.is_float() => f64::from(rng.unit()),
            "random" if info.dtype == DataType::Bool => (rng.next() & 1) as f64,
            "random" => (rng.next() % 10) as f64,
            "ones" => 1.0,
            _ => 0.0,
        })
        .collect();
    Tensor::from_f64_values(info.clone(), &values).map_err(|e| CliError::failed(e.to_string()))
}

/// A model file decoded, with its graph inputs and outputs.
pub struct ModelFile {
    /// Where it was read from (external data is relative to its folder).
    pub path: PathBuf,
    /// The decoded model.
    pub format: ModelFormat,
    /// Its graph inputs and outputs with their value types.
    pub signature: ModelSignature,
}

/// A decoded model of one of the formats the CLI takes.
pub enum ModelFormat {
    /// An ONNX model, imported once the inputs are known (it may need their values).
    Onnx(Box<backplane::onnx::proto::ModelProto>),
    /// A TFLite model, imported already (its shapes are static; it needs no input values).
    Tflite(Network),
}

impl ModelFile {
    /// Read and decode a model file: TFLite when it is one (by extension or identifier),
    /// ONNX otherwise.
    pub fn open(path: &Path) -> Result<ModelFile, CliError> {
        ModelFile::open_with(path, backplane::tflite::Int8Requant::default())
    }

    /// [`ModelFile::open`], a TFLite model's int8 layers requantized by `int8_requant`
    /// (None: the importer's choice).
    pub fn open_with(
        path: &Path,
        int8_requant: backplane::tflite::Int8Requant,
    ) -> Result<ModelFile, CliError> {
        if backplane::tflite::is_tflite_file(path) {
            let options = backplane::tflite::ImportOptions {
                int8_requant,
                ..Default::default()
            };
            let network = backplane::load_tflite_with(path, &options).map_err(|e| match e {
                backplane::Error::Tflite(e) => CliError::from(e),
                e => CliError::failed(e.to_string()),
            })?;
            let values = |ids: &[backplane::core::TensorId]| {
                ids.iter()
                    .map(|&t| backplane::onnx::GraphValue {
                        name: network.tensor(t).name.clone(),
                        ty: ValueType::Tensor,
                    })
                    .collect()
            };
            let signature = ModelSignature {
                inputs: values(network.inputs()),
                outputs: values(network.outputs()),
            };
            return Ok(ModelFile {
                path: path.to_path_buf(),
                format: ModelFormat::Tflite(network),
                signature,
            });
        }
        let proto = backplane::onnx::decode_model_file(path)?;
        Ok(ModelFile {
            path: path.to_path_buf(),
            signature: ModelSignature::of(&proto),
            format: ModelFormat::Onnx(Box::new(proto)),
        })
    }
}

/// A model imported for the inputs given on the command line.
pub struct Imported {
    /// The network.
    pub network: Network,
    /// Graph inputs whose values were bound at import (they are constants of the network now,
    /// not inputs): the model needs them to decide shapes or operator parameters.
    pub bound: Vec<String>,
}

/// Read every `--input NAME=FILE`, each as the kind of value the model declares for NAME.
pub fn read_inputs(
    args: &[String],
    model: &Path,
    signature: &ModelSignature,
) -> Result<Vec<(String, OnnxValue)>, CliError> {
    let mut given: Vec<(String, OnnxValue)> = Vec::new();
    for arg in args {
        let (name, file) = split_pair(arg, "--input")?;
        if given.iter().any(|(n, _)| n == name) {
            return Err(CliError::usage(format!(
                "--input {name}=... is given twice"
            )));
        }
        let Some(ty) = signature.input(name) else {
            return Err(CliError::usage(format!(
                "'{name}' is not an input of {}; its inputs are: {}",
                model.display(),
                signature
                    .inputs
                    .iter()
                    .map(|v| v.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        };
        given.push((
            name.to_string(),
            read_value(Path::new(file), ty, Some(name))?,
        ));
    }
    Ok(given)
}

/// Import the model for the given input values and shapes. When the model needs the values of
/// some inputs at import (a Reshape's shape, a TopK's k, a data-dependent output shape given
/// as a graph input), the import is specialized on the given values of those inputs.
///
/// The decoded model is consumed: its initializers' bytes move into the network's constants
/// as they are read, so the model is never in memory twice.
pub fn import(
    format: ModelFormat,
    path: &Path,
    given: &[(String, OnnxValue)],
    input_shapes: &[(String, Vec<usize>)],
) -> Result<Imported, CliError> {
    import_binding(format, path, given, input_shapes, true)
}

/// [`import`]; with `bind_data` false only small integer inputs (shapes, counts:
/// [`backplane::staged::binds_at_import`]) are bound, and a model that needs the values of
/// data fails with [`CliError::needs_values`] (`run` then serves it through a
/// `DynamicNetwork`).
pub fn import_binding(
    format: ModelFormat,
    path: &Path,
    given: &[(String, OnnxValue)],
    input_shapes: &[(String, Vec<usize>)],
    bind_data: bool,
) -> Result<Imported, CliError> {
    let proto = match format {
        ModelFormat::Onnx(proto) => *proto,
        ModelFormat::Tflite(network) => {
            if let Some((name, _)) = input_shapes.first() {
                return Err(CliError::usage(format!(
                    "--input-shape {name}=...: TFLite models have static shapes"
                )));
            }
            return Ok(Imported {
                network,
                bound: Vec::new(),
            });
        }
    };
    // A DynamicNetwork takes and gives tensors only: a model with sequence or optional
    // inputs or outputs is specialized on every value it needs, as before.
    let tensors_only = proto.graph.as_ref().is_some_and(|g| {
        g.input.iter().chain(&g.output).all(|v| {
            matches!(
                v.r#type.as_ref().and_then(|t| t.value.as_ref()),
                Some(backplane::onnx::proto::type_proto::Value::TensorType(_)) | None
            )
        })
    });
    let bind_data = bind_data || !tensors_only;
    let (mut options, mut values) = ImportOptions::default()
        .with_evaluator(Arc::new(backplane::cpu_ref::CpuRefEvaluator))
        .with_input_values_shaped(given);
    if !bind_data {
        values.retain(|(_, t)| backplane::staged::binds_at_import(t));
    }
    for (name, dims) in input_shapes {
        options.input_shapes.insert(name.clone(), dims.clone());
    }
    let base_dir = backplane::onnx::model_base_dir(path);
    let (network, bound) =
        backplane::onnx::import_model_specialized(proto, Some(&base_dir), &options, &values)
            .map_err(|e| match e {
                OnnxError::NeedsInputValues { ref inputs, .. } => {
                    let message = format!(
                        "{e}\nbackplane run binds such inputs from their files: pass {}",
                        inputs
                            .iter()
                            .map(|i| format!("--input {i}=FILE"))
                            .collect::<Vec<_>>()
                            .join(" ")
                    );
                    // Every needed value given, but not bound (data): `run` serves the model
                    // through a DynamicNetwork.
                    if !bind_data && inputs.iter().all(|i| given.iter().any(|(n, _)| n == i)) {
                        CliError::needs_values(message)
                    } else {
                        CliError::failed(message)
                    }
                }
                e => CliError::from(e),
            })?;
    Ok(Imported { network, bound })
}

/// Optimizer options for the given backends and per-layer overrides.
pub fn optimizer_options(
    backends: &str,
    layer_backends: &[String],
) -> Result<OptimizerOptions, CliError> {
    let mut opt = OptimizerOptions::new(backplane::parse_backends(backends)?);
    for arg in layer_backends {
        let (layer, backend) = split_pair(arg, "--layer-backend")?;
        opt.layer_backends.push((
            layer.to_string(),
            BackendId::new(backend).map_err(CliError::usage)?,
        ));
    }
    Ok(opt)
}

/// Optimize a network for the given backends and per-layer overrides.
pub fn optimize(
    runtime: &Runtime,
    network: &Network,
    backends: &str,
    layer_backends: &[String],
) -> Result<OptimizedNetwork, CliError> {
    let opt = optimizer_options(backends, layer_backends)?;
    Ok(runtime.optimize(network, &opt)?)
}

/// Parse every `--input-shape NAME=DIMS`.
pub fn parse_input_shapes(args: &[String]) -> Result<Vec<(String, Vec<usize>)>, CliError> {
    args.iter()
        .map(|arg| {
            let (name, dims) = split_pair(arg, "--input-shape")?;
            Ok((name.to_string(), parse_dims(dims, "--input-shape")?))
        })
        .collect()
}

/// "specialized on the values of inputs: shape, k", or nothing when none was bound.
pub fn bound_summary(bound: &[String]) -> Option<String> {
    (!bound.is_empty()).then(|| {
        format!(
            "specialized on the values of input{}: {}",
            if bound.len() == 1 { "" } else { "s" },
            bound.join(", ")
        )
    })
}

/// Apply the thread count, backend options and limits of the arguments to the runtime the
/// command will create.
pub fn configure(args: &CommonArgs) {
    if let Some(n) = args.threads {
        crate::backends::set_threads(n);
    }
    crate::backends::set_backend_options(&args.backend_options);
    let time_limit = (!args.no_time_limit).then(|| args.time_limit.unwrap_or(DEFAULT_TIME_LIMIT));
    crate::backends::set_limits(time_limit, args.max_loop_iterations, args.max_memory);
}

/// Import, optimize and load the model; read or generate its inputs. `preset` inputs (e.g.
/// the shipped samples) come before those named with --input. The values of data inputs are
/// bound at import only when `bind_data` (see [`import_binding`]).
pub fn prepare_binding(
    model: &Path,
    args: &CommonArgs,
    preset: Vec<(String, Tensor)>,
    bind_data: bool,
) -> Result<Session, CliError> {
    configure(args);
    let ModelFile {
        path,
        format,
        signature,
    } = ModelFile::open_with(model, args.int8_requant())?;
    let mut given: Vec<(String, OnnxValue)> = preset
        .into_iter()
        .map(|(n, t)| (n, OnnxValue::Tensor(t)))
        .collect();
    given.extend(read_inputs(&args.inputs, &path, &signature)?);
    let imported = import_binding(
        format,
        &path,
        &given,
        &parse_input_shapes(&args.input_shapes)?,
        bind_data,
    )?;
    let runtime = crate::backends::runtime()?;
    let optimized = optimize(
        &runtime,
        &imported.network,
        &args.backends,
        &args.layer_backends,
    )?;
    let layer_counts = optimized.layer_counts();
    let views = optimized.memory_plan().sub_tensor_layers;
    // Only the inputs' descriptions are needed from here on. The imported network goes before
    // the load (it holds the weights as imported, which fusion may have replaced), and the
    // optimized one is handed over, so that the constants the load packs and releases are
    // not kept here.
    let Imported { network, bound } = imported;
    let declared: Vec<(String, TensorInfo)> = network
        .inputs()
        .iter()
        .map(|&t| {
            (
                network.tensor(t).name.clone(),
                network.tensor(t).info.clone(),
            )
        })
        .collect();
    drop(network);
    let id = runtime.load_network(optimized)?;
    let mut values: Vec<(String, Tensor)> = given.iter().flat_map(|(n, v)| v.flatten(n)).collect();
    let mut inputs = Vec::new();
    for (i, (name, info)) in declared.iter().enumerate() {
        if let Some(pos) = values.iter().position(|(n, _)| n == name) {
            inputs.push(values.swap_remove(pos));
        } else if let Some(kind) = &args.generate {
            inputs.push((
                name.clone(),
                generate(info, kind, args.seed.wrapping_add(i as u64))?,
            ));
        } else {
            return Err(CliError::usage(format!(
                "input '{name}' ({info}) was not given: pass --input {name}=FILE.npy, or --generate random"
            )));
        }
    }
    Ok(Session {
        runtime,
        id,
        layer_counts,
        inputs,
        signature,
        bound,
        views,
    })
}
