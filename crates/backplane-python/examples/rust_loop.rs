//! The Rust side of the Python overhead bench (`bench/overhead.py`): the digits model at
//! batch 1, run in a loop through the facade, as a Rust application runs it.
//!
//! ```sh
//! cargo run --release -p backplane-python --example rust_loop -- [ITERATIONS [MODEL INPUT DIMS]]
//! ```
//!
//! With MODEL, INPUT and DIMS (e.g. `tiny.onnx x 1x64`) it runs that model instead, on an
//! f32 input of ones: the bench uses a one-layer model to isolate the per-call costs.
//!
//! Prints the mean time per call of `Runtime::execute` (what a Rust application calls; it
//! allocates the output tensors) and of `LoadedNetwork::execute_views` into preallocated
//! outputs (what a Python `session.run` calls underneath, after borrowing the NumPy arrays).

use backplane::core::{TensorView, TensorViewMut};
use backplane::{ImportOptions, Tensor};
use std::path::Path;
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let iterations: usize = match std::env::args().nth(1) {
        Some(n) => n.parse()?,
        None => 100_000,
    };
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let custom: Vec<String> = std::env::args().skip(2).collect();
    let (model, input, image) = match custom.as_slice() {
        [] => (
            repo.join("models/digits/model.onnx"),
            "input".to_string(),
            backplane::npy::read_file(&repo.join("models/digits/samples/digit_3.npy"))?,
        ),
        [model, input, dims] => {
            let dims: Vec<usize> = dims.split('x').map(str::parse).collect::<Result<_, _>>()?;
            let n = dims.iter().product();
            (
                model.into(),
                input.clone(),
                Tensor::from_vec(dims, vec![1.0f32; n])?,
            )
        }
        _ => return Err("usage: rust_loop [ITERATIONS [MODEL INPUT DIMS]]".into()),
    };
    let runtime = backplane::RuntimeBuilder::new().build()?;
    let options = ImportOptions::default()
        .with_dim("batch", 1)
        .with_input_shape(input.clone(), image.shape().dims().to_vec());
    let network = backplane::load_onnx(&model, &options)?;
    let optimized = runtime.optimize(&network, &backplane::default_optimizer_options())?;
    let id = runtime.load_network(optimized)?;
    let inputs = [(input.as_str(), &image)];

    let time = |f: &mut dyn FnMut() -> Result<(), backplane::Error>| {
        for _ in 0..iterations / 10 {
            f()?;
        }
        let start = Instant::now();
        for _ in 0..iterations {
            f()?;
        }
        Ok::<f64, backplane::Error>(start.elapsed().as_secs_f64() * 1e6 / iterations as f64)
    };

    let execute = time(&mut || {
        std::hint::black_box(runtime.execute(id, &inputs)?);
        Ok(())
    })?;

    let net = runtime.network(id)?;
    let graph = net.network();
    let mut outputs: Vec<Tensor> = graph
        .outputs()
        .iter()
        .map(|&t| Tensor::zeros(graph.tensor(t).info.clone()))
        .collect::<Result<_, _>>()?;
    let views = time(&mut || {
        let inputs = [TensorView {
            info: image.info(),
            data: image.bytes(),
        }];
        let mut out: Vec<TensorViewMut<'_>> = outputs.iter_mut().map(|t| t.view_mut()).collect();
        net.execute_views(&inputs, &mut out)?;
        Ok(())
    })?;

    println!("iterations: {iterations}");
    println!("Runtime::execute:             {execute:.2} us/call");
    println!("LoadedNetwork::execute_views: {views:.2} us/call");
    Ok(())
}
