//! Minimal image classification: load the shipped digits model, classify one 8x8 image.
//!
//! ```sh
//! cargo run -p backplane --example classify -- [IMAGE.npy]
//! ```

use backplane::{BackendId, ImportOptions, OptimizerOptions};
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let image_path = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| repo.join("models/digits/samples/digit_3.npy"));

    // 1. Import: the model's batch size is symbolic; we classify one image.
    let options = ImportOptions::default().with_dim("batch", 1);
    let network = backplane::load_onnx(&repo.join("models/digits/model.onnx"), &options)?;

    // 2. A runtime with the built-in backends; 3. optimize for CpuRef; 4. load.
    let runtime = backplane::RuntimeBuilder::new().build()?;
    let optimized = runtime.optimize(
        &network,
        &OptimizerOptions::new(vec![BackendId::new("CpuRef")?]),
    )?;
    let id = runtime.load_network(optimized)?;

    // 5. Execute on the image and read the probabilities.
    let image = backplane::npy::read_file(&image_path)?;
    let outputs = runtime.execute(id, &[("input", &image)])?;
    let probabilities = outputs[0].1.as_slice::<f32>()?;
    let (class, p) = probabilities
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .ok_or("the model returned no probabilities")?;
    println!("{}: digit {class} (p = {p:.3})", image_path.display());
    Ok(())
}
