//! Measures what a dynamic backend costs, for `scripts/bench-dynamic.sh` and
//! `scripts/leak-dynamic.sh`:
//!
//! * `latency ITERATIONS`: the digits model through the dynamically loaded CpuRef wrapper
//!   (`CpuRefDyn`) against the static CpuRef, interleaved in the same run; prints medians and
//!   their ratio.
//! * `create REPEATS`: runtime creation time with 0, 1 and 10 dynamic backends present.
//! * `churn COUNT`: create a runtime that loads the Rust and C example backends, run a
//!   network on each, drop it; COUNT times (for a leak checker).
//!
//! It needs a C compiler (`cc`) for the C backends and is built with the Rust example as a
//! dev-dependency, so the example's shared object lies in the target's `deps` directory.

use backplane_backend_api::{Backend, BackendId};
use backplane_core::{DataType, Network, Tensor, TensorInfo};
use backplane_runtime::{
    BackendRegistry, DynamicBackendsOption, OptimizerOptions, Runtime, RuntimeOptions,
};
use std::error::Error;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

type Res<T> = Result<T, Box<dyn Error>>;

/// The repository (for the model and the C sources): `BACKPLANE_REPO`, else where this was
/// built from.
fn repo() -> PathBuf {
    std::env::var_os("BACKPLANE_REPO")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."))
}

/// The Rust example's shared object, built beside this binary's dependencies.
fn rust_example() -> Res<PathBuf> {
    let exe = std::env::current_exe()?;
    let target = exe
        .parent()
        .and_then(Path::parent)
        .ok_or("cannot locate the target directory")?;
    let so = target.join("deps/libbackplane_cpuref_dyn.so");
    if !so.is_file() {
        return Err(format!("{} is missing: build with cargo", so.display()).into());
    }
    Ok(so)
}

fn scratch(tag: &str) -> Res<PathBuf> {
    let dir = std::env::temp_dir().join(format!("backplane-bench-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// Compile a C source into `out` with extra flags.
fn cc(source: &Path, out: &Path, flags: &[String]) -> Res<()> {
    let status = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args([
            "-std=c11",
            "-O2",
            "-fPIC",
            "-shared",
            "-fvisibility=hidden",
            "-I",
        ])
        .arg(repo().join("include"))
        .args(flags)
        .arg("-o")
        .arg(out)
        .arg(source)
        .status()?;
    if !status.success() {
        return Err(format!("compiling {} failed", source.display()).into());
    }
    Ok(())
}

fn cpu_ref_registry() -> Res<BackendRegistry> {
    let mut reg = BackendRegistry::new();
    reg.register(
        BackendId::new("CpuRef")?,
        Arc::new(|| Box::new(backplane_cpu_ref::CpuRefBackend) as Box<dyn Backend>),
    )?;
    Ok(reg)
}

fn runtime(dir: &Path) -> Res<Runtime> {
    let options = RuntimeOptions {
        dynamic_backends: DynamicBackendsOption::Path(dir.to_path_buf()),
        ..RuntimeOptions::default()
    };
    Ok(Runtime::new(cpu_ref_registry()?, options)?)
}

fn digits() -> Res<(Network, Tensor)> {
    let mut options = backplane_onnx::ImportOptions::default().with_dim("batch", 1);
    options.evaluator = Some(Arc::new(backplane_cpu_ref::CpuRefEvaluator));
    let net = backplane_onnx::import_file(&repo().join("models/digits/model.onnx"), &options)?;
    let bytes = std::fs::read(repo().join("models/digits/samples/digit_3.npy"))?;
    let data = bytes
        .get(bytes.len().saturating_sub(256)..)
        .ok_or("short sample")?;
    let image = Tensor::from_bytes(TensorInfo::new(DataType::F32, vec![1, 1, 8, 8]), data)?;
    Ok((net, image))
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn latency(iterations: usize) -> Res<()> {
    let dir = scratch("latency")?;
    std::fs::copy(rust_example()?, dir.join("Backplane_CpuRefDyn_backend.so"))?;
    let rt = runtime(&dir)?;
    let (net, image) = digits()?;
    let load = |backend: &str| -> Res<_> {
        let opt = rt.optimize(&net, &OptimizerOptions::new(vec![BackendId::new(backend)?]))?;
        Ok(rt.load_network(opt)?)
    };
    let (stat, dynamic) = (load("CpuRef")?, load("CpuRefDyn")?);
    let inputs = [("input", &image)];
    // Same outputs, then warm up.
    let a = rt.execute(stat, &inputs)?;
    let b = rt.execute(dynamic, &inputs)?;
    if a[0].1.bytes() != b[0].1.bytes() {
        return Err("the dynamic backend's output differs from CpuRef's".into());
    }
    for _ in 0..200 {
        rt.execute(stat, &inputs)?;
        rt.execute(dynamic, &inputs)?;
    }
    // Interleave blocks of 10 so that drift (frequency, caches) hits both sides alike.
    let (mut ts, mut td) = (Vec::new(), Vec::new());
    let block = 10;
    for round in 0..iterations.div_ceil(block) {
        let order = if round % 2 == 0 {
            [stat, dynamic]
        } else {
            [dynamic, stat]
        };
        for id in order {
            let start = Instant::now();
            for _ in 0..block {
                rt.execute(id, &inputs)?;
            }
            let per = start.elapsed() / block as u32;
            if id == stat {
                ts.push(per);
            } else {
                td.push(per);
            }
        }
    }
    let (ms, md) = (median(ts), median(td));
    println!(
        "digits model, batch 1, {} executions each, interleaved:",
        iterations.div_ceil(block) * block
    );
    println!(
        "  static CpuRef      median {:>8.2} us",
        ms.as_secs_f64() * 1e6
    );
    println!(
        "  dynamic CpuRefDyn  median {:>8.2} us",
        md.as_secs_f64() * 1e6
    );
    println!(
        "  ratio dynamic/static: {:.3}",
        md.as_secs_f64() / ms.as_secs_f64()
    );
    // The fixed cost of one call through the ABI: a one-layer network on 6 floats.
    let mut tiny = Network::new();
    let x = tiny.add_input("x", TensorInfo::new(DataType::F32, vec![2, 3]))?;
    let y = tiny.add_layer(
        "relu",
        backplane_core::Op::Unary(backplane_core::ops::UnaryOp::Relu),
        &[x],
    )?[0];
    tiny.mark_output(y)?;
    let xs = Tensor::from_vec(vec![2, 3], vec![1.0f32, -1.0, 2.0, -2.0, 3.0, -3.0])?;
    let load = |backend: &str| -> Res<_> {
        let opt = rt.optimize(
            &tiny,
            &OptimizerOptions::new(vec![BackendId::new(backend)?]),
        )?;
        Ok(rt.load_network(opt)?)
    };
    let (stat, dynamic) = (load("CpuRef")?, load("CpuRefDyn")?);
    let inputs = [("x", &xs)];
    let (mut ts, mut td) = (Vec::new(), Vec::new());
    let block = 1000;
    for round in 0..20 {
        let order = if round % 2 == 0 {
            [stat, dynamic]
        } else {
            [dynamic, stat]
        };
        for id in order {
            let start = Instant::now();
            for _ in 0..block {
                rt.execute(id, &inputs)?;
            }
            let per = start.elapsed() / block;
            if id == stat {
                ts.push(per);
            } else {
                td.push(per);
            }
        }
    }
    let (ms, md) = (median(ts), median(td));
    println!(
        "one Relu layer on 6 floats: static {:.2} us, dynamic {:.2} us: {:.2} us per call through the ABI",
        ms.as_secs_f64() * 1e6,
        md.as_secs_f64() * 1e6,
        (md.as_secs_f64() - ms.as_secs_f64()) * 1e6
    );
    Ok(())
}

fn create(repeats: usize) -> Res<()> {
    let zoo = repo().join("crates/backplane-plugin/tests/zoo/zoo_backend.c");
    for n in [0usize, 1, 10] {
        let dir = scratch(&format!("create{n}"))?;
        for i in 0..n {
            cc(
                &zoo,
                &dir.join(format!("Bench_Zoo{i}_backend.so")),
                &[format!("-DZOO_ID=\"Zoo{i}\"")],
            )?;
        }
        let start = Instant::now();
        let first = runtime(&dir)?;
        let cold = start.elapsed();
        if first.dynamic_backends().loaded.len() != n {
            return Err(format!("expected {n} dynamic backends").into());
        }
        drop(first);
        let mut times = Vec::with_capacity(repeats);
        for _ in 0..repeats {
            let start = Instant::now();
            let rt = runtime(&dir)?;
            times.push(start.elapsed());
            drop(rt);
        }
        println!(
            "runtime creation with {n:>2} dynamic backends: first {:>9.1} us (dlopen), then median {:>7.1} us over {repeats}",
            cold.as_secs_f64() * 1e6,
            median(times).as_secs_f64() * 1e6
        );
    }
    Ok(())
}

fn churn(count: usize) -> Res<()> {
    let dir = scratch("churn")?;
    std::fs::copy(rust_example()?, dir.join("Backplane_CpuRefDyn_backend.so"))?;
    cc(
        &repo().join("examples/dynamic-backend-c/elementwise_backend.c"),
        &dir.join("Acme_ElementwiseC_backend.so"),
        &[],
    )?;
    let (net, image) = digits()?;
    for i in 0..count {
        let rt = runtime(&dir)?;
        for prefs in [["CpuRefDyn", "CpuRef"], ["ElementwiseC", "CpuRef"]] {
            let ids = prefs
                .iter()
                .map(|p| BackendId::new(*p))
                .collect::<Result<Vec<_>, _>>()?;
            let opt = rt.optimize(&net, &OptimizerOptions::new(ids))?;
            let id = rt.load_network(opt)?;
            rt.execute(id, &[("input", &image)])?;
            if i % 2 == 0 {
                rt.unload_network(id)?;
            } // else: left loaded, released when the runtime is dropped
        }
        drop(rt);
    }
    let live = backplane_plugin::host::live_instances(&dir.join("Backplane_CpuRefDyn_backend.so"))
        + backplane_plugin::host::live_instances(&dir.join("Acme_ElementwiseC_backend.so"));
    println!(
        "created and dropped {count} runtimes with 2 dynamic backends; live instances now: {live}; libraries open: {}",
        backplane_plugin::host::open_libraries()
    );
    if live != 0 {
        return Err("instances leaked".into());
    }
    Ok(())
}

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n = |default: usize| -> Res<usize> {
        Ok(match args.get(1) {
            Some(v) => v.parse()?,
            None => default,
        })
    };
    match args.first().map(String::as_str) {
        Some("latency") => latency(n(2000)?),
        Some("create") => create(n(200)?),
        Some("churn") => churn(n(1000)?),
        _ => Err("usage: dynamic_bench latency [N] | create [N] | churn [N]".into()),
    }
}
