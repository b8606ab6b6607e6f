//! Time single convolution layers on CpuAcc (1 thread, or `CONV_THREADS`): depthwise, 1×1 and 3×3 shapes from
//! MobileNetV2 and ResNet-18, dilated 3×3 ones (DeepLab), and ResNet-18's max pooling. `cargo run --release -p backplane-cpu-acc --example conv_bench`.
//!
//! Times are the best of 15 short rounds (so a busy shared machine disturbs them less).
//! `CONV_BENCH=dw` keeps only the cases whose label contains `dw`.

use backplane_backend_api::{Backend, LayerDesc};
use backplane_core::ops::{ConvDesc, PoolDesc, PoolKind, Window};
use backplane_core::{Op, Tensor};
use backplane_cpu_acc::{CpuAccBackend, CpuAccOptions};
use std::sync::Arc;
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // CONV_THREADS=N runs the layers on N threads (default 1).
    let threads = std::env::var("CONV_THREADS")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(1);
    let factory = CpuAccBackend::with_threads(threads).create_workload_factory(None)?;
    // CONV_COLD=N runs N copies of each layer in turn, each with its own prepared weights,
    // so that (with N copies larger than the last-level cache) every execution reads its
    // weights from memory, as a layer of a whole network does; default 1 (weights stay
    // cached between executions).
    let cold: usize = std::env::var("CONV_COLD")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(1)
        .max(1);
    let filter = std::env::var("CONV_BENCH").unwrap_or_default();
    // CONV_ROUNDS=N: the best of N rounds (default 15); more on a busy machine.
    let rounds: usize = std::env::var("CONV_ROUNDS")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(15)
        .max(1);
    // (channels in, out, size, kernel, stride, group)
    for (c, m, hw, k, s, g, d) in [
        (32, 32, 112, 3, 1, 32, 1),
        (96, 96, 112, 3, 2, 96, 1),
        (144, 144, 56, 3, 1, 144, 1),
        (144, 144, 56, 3, 2, 144, 1),
        (192, 192, 28, 3, 1, 192, 1),
        (576, 576, 14, 3, 1, 576, 1),
        (576, 576, 14, 3, 2, 576, 1),
        (960, 960, 7, 3, 1, 960, 1),
        (24, 144, 56, 1, 1, 1, 1),
        (144, 24, 56, 1, 1, 1, 1),
        (32, 16, 112, 1, 1, 1, 1),
        (16, 96, 112, 1, 1, 1, 1),
        (960, 160, 7, 1, 1, 1, 1),
        (160, 960, 7, 1, 1, 1, 1),
        (320, 1280, 7, 1, 1, 1, 1),
        (960, 320, 7, 1, 1, 1, 1),
        (3, 32, 224, 3, 2, 1, 1),
        (64, 64, 56, 3, 1, 1, 1),
        (128, 128, 28, 3, 1, 1, 1),
        (256, 256, 14, 3, 1, 1, 1),
        (512, 512, 7, 3, 1, 1, 1),
        (3, 64, 224, 7, 2, 1, 1),
        (64, 128, 56, 3, 2, 1, 1),
        (128, 256, 28, 3, 2, 1, 1),
        (64, 128, 56, 1, 2, 1, 1),
        (128, 256, 28, 1, 2, 1, 1),
        // ResNet-50's pointwise layers, stride 1 and 2 (`CONV_BENCH=k1` keeps the 1×1 ones).
        (2048, 512, 7, 1, 1, 1, 1),
        (512, 2048, 7, 1, 1, 1, 1),
        (1024, 2048, 14, 1, 2, 1, 1),
        (256, 512, 56, 1, 2, 1, 1),
        (512, 1024, 28, 1, 2, 1, 1),
        (64, 256, 56, 1, 1, 1, 1),
        (256, 64, 56, 1, 1, 1, 1),
        (1024, 256, 14, 1, 1, 1, 1),
        // Group 0: max pooling (ResNet-18's, after its first layer).
        (64, 64, 112, 3, 2, 0, 1),
        // Dilated 3×3 (DeepLab's atrous layers and ASPP branches; padding = dilation).
        (256, 256, 33, 3, 1, 1, 2),
        (512, 256, 33, 3, 1, 1, 12),
        (512, 256, 33, 3, 1, 1, 24),
        (512, 256, 33, 3, 1, 1, 36),
    ] {
        let kind = match g {
            0 => "maxpool",
            1 => "conv",
            _ => "dw",
        };
        let dilated = if d > 1 {
            format!(" d{d}")
        } else {
            String::new()
        };
        let label = format!("{kind} c{c} m{m} {hw}x{hw} k{k} s{s}{dilated}");
        if !label.contains(&filter) {
            continue;
        }
        // Values, not zeros: never-written zeroed memory maps every page to one shared zero
        // page, which would keep the whole input in L1 (memory-bound layers looked 2-3x
        // faster than in a network).
        let x = filled(vec![1, c, hw, hw], 1)?;
        let w = filled(vec![m, c / g.max(1), k, k], 2)?;
        let p = k / 2 * d;
        let window = Window {
            kernel: vec![k, k],
            strides: vec![s, s],
            dilations: vec![d, d],
            pads: vec![p, p, p, p],
            auto_pad: Default::default(),
        };
        let (op, inputs) = if g == 0 {
            let op = Op::Pool(PoolDesc {
                kind: PoolKind::Max,
                window,
                ceil_mode: false,
                count_include_pad: false,
            });
            (op, vec![x.view()])
        } else {
            let op = Op::Conv(ConvDesc { window, group: g });
            (op, vec![x.view(), w.view()])
        };
        let infos: Vec<_> = inputs.iter().map(|v| v.info.clone()).collect();
        let outputs = op.infer(&infos.iter().collect::<Vec<_>>())?;
        let desc = LayerDesc {
            name: "c".into(),
            op,
            inputs: infos.clone(),
            outputs: outputs.clone(),
            constants: (0..infos.len())
                .map(|i| (i == 1).then(|| Arc::new(w.clone())))
                .collect(),
        };
        let mut y = filled(outputs[0].shape.dims().to_vec(), 3)?;
        // CONV_AB=KEY=VALUE: alternate rounds with workloads created with that CpuAcc option
        // (e.g. `winograd=off`) and without it, reporting both.
        let ab = std::env::var("CONV_AB").ok();
        let mut factories = vec![factory.as_ref()];
        let with_option;
        if let Some((key, value)) = ab.as_deref().and_then(|s| s.split_once('=')) {
            let mut options = CpuAccOptions {
                threads: Some(threads),
                ..CpuAccOptions::default()
            };
            options.set(key, value)?;
            with_option = CpuAccBackend::with_options(options).create_workload_factory(None)?;
            factories.push(with_option.as_ref());
        }
        let mut workloads = Vec::new();
        for f in &factories {
            let copies = (0..cold)
                .map(|_| f.create_workload(&desc))
                .collect::<Result<Vec<_>, _>>()?;
            workloads.push(copies);
        }
        let mut best = vec![f64::INFINITY; workloads.len()];
        for _ in 0..rounds {
            for (vi, copies) in workloads.iter().enumerate() {
                let reps = cold.max(3);
                let t = Instant::now();
                for r in 0..reps {
                    copies[r % cold].execute(&inputs, &mut [y.view_mut()])?;
                }
                best[vi] = best[vi].min(t.elapsed().as_secs_f64() / reps as f64);
            }
        }
        // Multiply-adds ×2 (for pooling: comparisons, one per tap).
        let per_output = match c.checked_div(g) {
            Some(cg) => 2 * cg * k * k,
            None => k * k,
        };
        let flops = outputs[0].shape.elements() as f64 * per_output as f64;
        let with = match (ab.as_deref(), best.get(1)) {
            (Some(var), Some(t)) => format!("   with {var}: {:8.3} ms", t * 1e3),
            _ => String::new(),
        };
        println!(
            "{label:<32} {:8.3} ms {:6.1} GFLOP/s{with}",
            best[0] * 1e3,
            flops / best[0] / 1e9
        );
    }
    Ok(())
}

/// A tensor of the given shape holding small pseudo-random values.
fn filled(shape: Vec<usize>, seed: u64) -> Result<Tensor, Box<dyn std::error::Error>> {
    let n = shape.iter().product();
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let values = (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % 2001) as f32 / 1000.0 - 1.0
        })
        .collect();
    Ok(Tensor::from_vec(shape, values)?)
}
