//! Fuzzing without a nightly toolchain: seeded mutation of a corpus of model files, fed to
//! the importer alone (`import` target) and to the whole import → optimize → load → execute
//! path (`pipeline` target). Every input must either work or fail with a typed error; a
//! panic is a finding.
//!
//! This is a plain mutation fuzzer (byte flips, truncation, splicing, protobuf-varint
//! changes), not coverage-guided like libFuzzer: it needs no sanitizer runtime, so it runs in
//! CI on the stable toolchain for a bounded time.

use backplane::{BackendId, ImportOptions, OptimizerOptions, Tensor};

/// The runtime type the targets take (re-exported for the cargo-fuzz targets in `fuzz/`).
pub use backplane::Runtime;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

/// A small, fast, deterministic generator (SplitMix64).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
}

/// Apply one to four random mutations to `data`.
pub fn mutate(data: &mut Vec<u8>, corpus: &[Vec<u8>], rng: &mut Rng) {
    let rounds = 1 + rng.below(4);
    for _ in 0..rounds {
        if data.is_empty() {
            data.push(rng.next_u64() as u8);
            continue;
        }
        let at = rng.below(data.len());
        match rng.below(7) {
            0 => data[at] ^= 1 << rng.below(8),
            1 => data[at] = rng.next_u64() as u8,
            2 => data.truncate(at),
            3 => {
                // Interesting values that stress size arithmetic when they land in varints.
                const EDGE: [u8; 6] = [0x00, 0x01, 0x7f, 0x80, 0xff, 0xfe];
                data[at] = EDGE[rng.below(EDGE.len())];
            }
            4 => {
                // A long varint: 0xff... then a terminator, making a huge length or dim.
                let n = 1 + rng.below(9);
                for k in 0..n {
                    if at + k < data.len() {
                        data[at + k] = if k + 1 == n { 0x01 } else { 0xff };
                    }
                }
            }
            5 => {
                // Splice a slice of another corpus entry in.
                let other = &corpus[rng.below(corpus.len())];
                if !other.is_empty() {
                    let start = rng.below(other.len());
                    let len = rng.below(other.len() - start + 1).min(64);
                    data.splice(at..at, other[start..start + len].iter().copied());
                }
            }
            _ => {
                // Duplicate a chunk (repeated fields).
                let len = rng.below(data.len() - at + 1).min(32);
                let chunk: Vec<u8> = data[at..at + len].to_vec();
                data.splice(at..at, chunk);
            }
        }
    }
}

/// What a fuzz target is run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// Decode and import only.
    Import,
    /// Import, optimize for CpuRef, load, and execute on generated inputs.
    Pipeline,
    /// As `Pipeline`, but networks of any size are loaded, in a runtime whose memory budget
    /// ([`FUZZ_MAX_NETWORK_BYTES`]) must refuse what does not fit: layers with huge outputs
    /// end in a typed error at load, never an abort.
    Budget,
}

/// What one input did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// It ran (or imported) fine.
    Ok,
    /// It was rejected with a typed error.
    Rejected,
    /// It panicked: a bug. The message is kept.
    Panicked(String),
}

/// Limit for fuzzing: skip executing models whose tensors add up to more bytes than this.
pub const FUZZ_MAX_NETWORK_BYTES: usize = 64 << 20;

/// Limit for fuzzing: a Loop fails after this many iterations (the runtime's guard), so a
/// mutated trip count cannot stall the run.
pub const FUZZ_MAX_LOOP_ITERATIONS: u64 = 1000;

/// Limit for fuzzing: skip executing models estimated to need more multiply-adds than this
/// (about 10 ms on CpuRef in the dev profile: larger corpus models, MobileNetV2's 224×224
/// stem or the face detector, are still imported and optimized, not run).
pub const FUZZ_MAX_WORK: u64 = 4_000_000;

/// A rough count of multiply-adds: each layer's output elements times the size of the
/// reduction behind each element (kernel x input channels for convolutions, K for matrix
/// products, the window for pooling), saturating.
pub fn estimated_work(network: &backplane::Network) -> u64 {
    use backplane::core::Op;
    let mut total = 0u64;
    for layer in network.layers() {
        let out: u64 = layer
            .outputs
            .iter()
            .map(|t| network.tensor(*t).info.shape.elements() as u64)
            .fold(0u64, u64::saturating_add);
        let input = |k: usize| {
            layer
                .inputs
                .get(k)
                .map(|t| network.tensor(*t).info.shape.dims().to_vec())
                .unwrap_or_default()
        };
        let reduction: u64 = match &layer.op {
            Op::Conv(_) => input(1)
                .iter()
                .skip(1)
                .map(|&d| d as u64)
                .fold(1u64, u64::saturating_mul),
            Op::ConvTranspose(_) => input(1)
                .iter()
                .skip(1)
                .map(|&d| d as u64)
                .fold(1u64, u64::saturating_mul)
                .saturating_mul(
                    input(0)
                        .iter()
                        .skip(1)
                        .take(1)
                        .map(|&d| d as u64)
                        .product::<u64>()
                        .max(1),
                ),
            Op::MatMul => input(0).last().map(|&d| d as u64).unwrap_or(1),
            Op::Gemm(_) => input(0).iter().map(|&d| d as u64).max().unwrap_or(1),
            Op::Pool(p) | Op::IntegerAveragePool(p) => p
                .window
                .kernel
                .iter()
                .map(|&d| d as u64)
                .fold(1u64, u64::saturating_mul),
            _ => 1,
        };
        total = total.saturating_add(out.saturating_mul(reduction.max(1)));
        // A body may run up to the fuzzer's iteration limit.
        for body in layer.op.subgraphs() {
            total =
                total.saturating_add(estimated_work(body).saturating_mul(FUZZ_MAX_LOOP_ITERATIONS));
        }
    }
    total
}

/// Limits for fuzzing: reject models that would need more than this many bytes per tensor,
/// so mutated sizes cannot exhaust memory.
pub const FUZZ_MAX_TENSOR_BYTES: usize = 16 << 20;

/// Import options for fuzzing: bounded tensor sizes, constant folding through CpuRef, and 1
/// for every symbolic input dimension.
fn options_for(bytes: &[u8]) -> ImportOptions {
    let mut options = ImportOptions::default()
        .with_max_tensor_bytes(FUZZ_MAX_TENSOR_BYTES)
        .with_evaluator(std::sync::Arc::new(backplane::cpu_ref::CpuRefEvaluator));
    if let Ok(inputs) = backplane::onnx::inspect_inputs(bytes) {
        for input in &inputs {
            for dim in input.symbolic_dims() {
                options = options.with_dim(dim, 1);
            }
        }
    }
    options
}

/// Import an ONNX or (by its `TFL3` identifier) TFLite model.
fn import(bytes: &[u8]) -> Result<backplane::Network, String> {
    if backplane::tflite::is_tflite(bytes) {
        let options = backplane::tflite::ImportOptions {
            evaluator: Some(std::sync::Arc::new(backplane::cpu_ref::CpuRefEvaluator)),
            ..Default::default()
        };
        return backplane::tflite::import_bytes(bytes, &options).map_err(|e| e.to_string());
    }
    let options = options_for(bytes);
    backplane::onnx::import_bytes(bytes, None, &options).map_err(|e| e.to_string())
}

fn run_pipeline(runtime: &Runtime, bytes: &[u8], budgeted: bool) -> Result<(), String> {
    let network = import(bytes)?;
    let cpu = BackendId::new("CpuRef").map_err(|e| e.to_string())?;
    let optimized = runtime
        .optimize(&network, &OptimizerOptions::new(vec![cpu]))
        .map_err(|e| e.to_string())?;
    let total_bytes: usize = optimized
        .network()
        .tensors()
        .iter()
        .map(|t| t.info.num_bytes().unwrap_or(usize::MAX))
        .fold(0usize, usize::saturating_add);
    let too_big = total_bytes > FUZZ_MAX_NETWORK_BYTES && !budgeted;
    // The work is estimated on the imported network: a backend's substitutions (CpuRef's
    // integer layers are custom ops) would hide their products from the estimate.
    if estimated_work(&network) > FUZZ_MAX_WORK || too_big {
        // Correct but slow models (a mutated kernel or channel count) are not findings; they
        // would only stall the run.
        return Err("too much work for fuzzing".into());
    }
    let id = runtime.load_network(optimized).map_err(|e| e.to_string())?;
    let mut inputs = Vec::new();
    for &t in network.inputs() {
        let e = network.tensor(t);
        let n = e.info.shape.elements();
        if n.saturating_mul(e.info.dtype.size()) > FUZZ_MAX_TENSOR_BYTES {
            return Err("input too large for fuzzing".into());
        }
        let values: Vec<f64> = (0..n).map(|i| (i % 7) as f64 - 3.0).collect();
        inputs.push((
            e.name.clone(),
            Tensor::from_f64_values(e.info.clone(), &values).map_err(|e| e.to_string())?,
        ));
    }
    let named: Vec<(&str, &Tensor)> = inputs.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let result = runtime
        .execute(id, &named)
        .map(|_| ())
        .map_err(|e| e.to_string());
    runtime.unload_network(id).map_err(|e| e.to_string())?;
    result
}

/// The runtime fuzzing runs in: the built-in backends, a 1,000-iteration Loop guard and a
/// 2 s execution limit, so a mutated model cannot stall the run.
pub fn fuzz_runtime() -> Option<Runtime> {
    backplane::RuntimeBuilder::new()
        .max_loop_iterations(FUZZ_MAX_LOOP_ITERATIONS)
        .max_execution_time(std::time::Duration::from_secs(2))
        .build()
        .ok()
}

/// The runtime of the [`Target::Budget`] target: [`fuzz_runtime`]'s limits and a memory
/// budget of [`FUZZ_MAX_NETWORK_BYTES`].
pub fn budget_runtime() -> Option<Runtime> {
    backplane::RuntimeBuilder::new()
        .max_loop_iterations(FUZZ_MAX_LOOP_ITERATIONS)
        .max_execution_time(std::time::Duration::from_secs(2))
        .max_memory(FUZZ_MAX_NETWORK_BYTES)
        .build()
        .ok()
}

/// Feed one input to a target, catching panics.
pub fn run_one(target: Target, runtime: &Runtime, bytes: &[u8]) -> Outcome {
    let result = catch_unwind(AssertUnwindSafe(|| match target {
        Target::Import => import(bytes).map(|_| ()),
        Target::Pipeline => run_pipeline(runtime, bytes, false),
        Target::Budget => run_pipeline(runtime, bytes, true),
    }));
    match result {
        Ok(Ok(())) => Outcome::Ok,
        Ok(Err(_)) => Outcome::Rejected,
        Err(p) => {
            let message = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            let at = PANIC_LOCATION
                .lock()
                .map(|mut l| l.take())
                .unwrap_or_default()
                .unwrap_or_default();
            Outcome::Panicked(format!("{message} (at {at})"))
        }
    }
}

/// Where the last caught panic happened, so that a finding names its source line.
static PANIC_LOCATION: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

/// The seed corpus: every `.onnx` and `.tflite` file under the given folders.
pub fn load_corpus(dirs: &[PathBuf]) -> Vec<Vec<u8>> {
    let mut files = Vec::new();
    for d in dirs {
        collect(d, &mut files);
    }
    files.sort();
    files.iter().filter_map(|f| std::fs::read(f).ok()).collect()
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            collect(&p, out);
        } else if p.extension().is_some_and(|x| x == "onnx" || x == "tflite") {
            out.push(p);
        }
    }
}

/// Totals of a fuzzing run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    /// Inputs executed.
    pub executions: u64,
    /// Inputs that worked.
    pub ok: u64,
    /// Inputs rejected with a typed error.
    pub rejected: u64,
    /// Panics found, with the input's index and message.
    pub panics: Vec<(u64, String)>,
}

/// Fuzz `target` from `corpus` until `deadline` or `max_executions`, whichever comes first.
pub fn fuzz(
    target: Target,
    corpus: &[Vec<u8>],
    seed: u64,
    max_executions: u64,
    deadline: std::time::Instant,
) -> Summary {
    let mut summary = Summary::default();
    let runtime = match target {
        Target::Budget => budget_runtime(),
        Target::Import | Target::Pipeline => fuzz_runtime(),
    };
    let Some(runtime) = runtime else {
        return summary;
    };
    if corpus.is_empty() {
        return summary;
    }
    let mut rng = Rng::new(seed);
    // Silence the default panic message for caught panics; they are reported in the summary.
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(|info| {
        if let (Some(at), Ok(mut slot)) = (info.location(), PANIC_LOCATION.lock()) {
            *slot = Some(at.to_string());
        }
    }));
    while summary.executions < max_executions && std::time::Instant::now() < deadline {
        let mut input = corpus[rng.below(corpus.len())].clone();
        mutate(&mut input, corpus, &mut rng);
        match run_one(target, &runtime, &input) {
            Outcome::Ok => summary.ok += 1,
            Outcome::Rejected => summary.rejected += 1,
            Outcome::Panicked(m) => summary.panics.push((summary.executions, m)),
        }
        summary.executions += 1;
    }
    std::panic::set_hook(previous);
    summary
}
