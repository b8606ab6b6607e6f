//! Time single convolution layers on CpuAcc (1 thread): depthwise, 1×1 and 3×3 shapes from
//! MobileNetV2 and ResNet-18. `cargo run --release -p backplane-cpu-acc --example conv_bench`.

use backplane_backend_api::{Backend, LayerDesc};
use backplane_core::ops::{ConvDesc, Window};
use backplane_core::{Op, Tensor, TensorInfo};
use backplane_cpu_acc::CpuAccBackend;
use std::sync::Arc;
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let factory = CpuAccBackend::with_threads(1).create_workload_factory(None)?;
    // (channels in, out, size, kernel, stride, group)
    for (c, m, hw, k, s, g) in [
        (96, 96, 112, 3, 2, 96),
        (144, 144, 56, 3, 1, 144),
        (960, 960, 7, 3, 1, 960),
        (24, 144, 56, 1, 1, 1),
        (64, 64, 56, 3, 1, 1),
    ] {
        let x = Tensor::zeros(TensorInfo::new(
            backplane_core::DataType::F32,
            vec![1, c, hw, hw],
        ))?;
        let w = Tensor::zeros(TensorInfo::new(
            backplane_core::DataType::F32,
            vec![m, c / g, k, k],
        ))?;
        let p = k / 2;
        let op = Op::Conv(ConvDesc {
            window: Window {
                kernel: vec![k, k],
                strides: vec![s, s],
                dilations: vec![],
                pads: vec![p, p, p, p],
                auto_pad: Default::default(),
            },
            group: g,
        });
        let outputs = op.infer(&[x.info(), w.info()])?;
        let desc = LayerDesc {
            name: "c".into(),
            op,
            inputs: vec![x.info().clone(), w.info().clone()],
            outputs: outputs.clone(),
            constants: vec![None, Some(Arc::new(w.clone()))],
        };
        let wl = factory.create_workload(&desc)?;
        let mut y = Tensor::zeros(outputs[0].clone())?;
        let reps = 50;
        let mut best = f64::INFINITY;
        for _ in 0..3 {
            let t = Instant::now();
            for _ in 0..reps {
                wl.execute(&[x.view(), w.view()], &mut [y.view_mut()])?;
            }
            best = best.min(t.elapsed().as_secs_f64() / reps as f64);
        }
        let flops = 2.0 * outputs[0].shape.elements() as f64 * (c / g * k * k) as f64;
        println!(
            "c{c} m{m} {hw}x{hw} k{k} s{s} g{g}: {:8.3} ms {:6.1} GFLOP/s",
            best * 1e3,
            flops / best / 1e9
        );
    }
    Ok(())
}
