//! Measure CpuAcc's SGEMM throughput (GFLOP/s) on square and model-like shapes, at 1 and 2
//! threads: `cargo run --release -p backplane-cpu-acc --example sgemm_peak`.

use backplane_cpu_acc::gemm::{sgemm, ASrc, BSrc, Epilogue, MatView, Packed};
use backplane_cpu_acc::threads::Threads;
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("isa: {}", backplane_cpu_acc::simd::isa());
    kernel_alone();
    weights_prepacked()?;
    let shapes = [
        (1024, 1024, 1024, "square 1024"),
        (512, 512, 512, "square 512"),
        (64, 3136, 576, "resnet 3x3 conv 56x56x64"),
        (128, 512, 128, "bert ffn up (seq 128)"),
        (128, 1024, 1024, "wide k"),
        (1024, 128, 1024, "tall k"),
        (1024, 1024, 128, "big mn small k"),
    ];
    for threads in [1, 2] {
        let th = Threads::new(threads)?;
        for &(m, n, k, what) in &shapes {
            let a: Vec<f32> = (0..m * k).map(|i| (i % 7) as f32 * 0.1).collect();
            let b: Vec<f32> = (0..k * n).map(|i| (i % 5) as f32 * 0.1).collect();
            let mut c = vec![0f32; m * n];
            let pa = Packed::pack_a(
                m,
                k,
                MatView {
                    data: &a,
                    rs: k,
                    cs: 1,
                },
            );
            let bv = BSrc::View(MatView {
                data: &b,
                rs: n,
                cs: 1,
            });
            let reps = (2e9 / (2.0 * (m * n * k) as f64)).clamp(3.0, 200.0) as usize;
            let mut best = f64::INFINITY;
            for _ in 0..5 {
                let t = Instant::now();
                for _ in 0..reps {
                    sgemm(
                        &th,
                        m,
                        n,
                        k,
                        &ASrc::Packed(&pa),
                        &bv,
                        &mut c,
                        n,
                        &Epilogue::default(),
                    )?;
                }
                best = best.min(t.elapsed().as_secs_f64() / reps as f64);
            }
            println!(
                "threads {threads}: {what:<28} {m}x{n}x{k}: {:7.1} GFLOP/s",
                2.0 * (m * n * k) as f64 / best / 1e9
            );
        }
    }
    Ok(())
}

/// The micro-kernel alone on one full tile whose panels stay in L1: the ceiling every
/// product shape is measured against.
fn kernel_alone() {
    use backplane_cpu_acc::act::Activation;
    use backplane_cpu_acc::simd::{microkernel, TileEpilogue, MR, NR};
    let kc = 128;
    let a: Vec<f32> = (0..kc * MR).map(|i| (i % 7) as f32 * 0.1).collect();
    let b: Vec<f32> = (0..kc * NR).map(|i| (i % 5) as f32 * 0.1).collect();
    let mut c = vec![0f32; MR * NR];
    let ep = TileEpilogue {
        accumulate: true,
        alpha: 1.0,
        row_bias: None,
        col_bias: None,
        last: false,
        act: Activation::None,
    };
    let reps = 200_000;
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        let t = Instant::now();
        for _ in 0..reps {
            if !microkernel(kc, &a, &b, &mut c, NR, MR, NR, &ep) {
                println!("micro-kernel refused the tile");
                return;
            }
        }
        best = best.min(t.elapsed().as_secs_f64() / reps as f64);
    }
    println!(
        "micro-kernel {MR}x{NR}, kc {kc}, panels in L1: {:7.1} GFLOP/s",
        2.0 * (MR * NR * kc) as f64 / best / 1e9
    );
}

/// Products as a MatMul with constant weights runs them: A (the activations) read in
/// place, B packed once, at 1 and 2 threads: BERT-tiny's and BERT-base's projections and
/// feed-forward layers, GPT-2's, and ResNet-50's 7×7 pointwise layers with the pixels as rows.
fn weights_prepacked() -> Result<(), Box<dyn std::error::Error>> {
    for threads in [1, 2] {
        let th = Threads::new(threads)?;
        weights_prepacked_on(&th, threads)?;
    }
    Ok(())
}

fn weights_prepacked_on(th: &Threads, threads: usize) -> Result<(), Box<dyn std::error::Error>> {
    for &(m, n, k, what) in &[
        (128, 128, 128, "bert projection"),
        (128, 512, 128, "bert ffn up"),
        (128, 128, 512, "bert ffn down"),
        (128, 128, 64, "bert attention scores"),
        (128, 768, 768, "bert-base projection"),
        (128, 3072, 768, "bert-base ffn up"),
        (128, 768, 3072, "bert-base ffn down"),
        (64, 2304, 768, "gpt2 qkv (seq 64)"),
        (49, 512, 2048, "resnet-50 7x7 pixel rows"),
        (49, 2048, 512, "resnet-50 7x7 pixel rows up"),
    ] {
        let a: Vec<f32> = (0..m * k).map(|i| (i % 7) as f32 * 0.1).collect();
        let b: Vec<f32> = (0..k * n).map(|i| (i % 5) as f32 * 0.1).collect();
        let mut c = vec![0f32; m * n];
        let pb = Packed::pack_b(
            k,
            n,
            MatView {
                data: &b,
                rs: n,
                cs: 1,
            },
        );
        let av = ASrc::View(MatView {
            data: &a,
            rs: k,
            cs: 1,
        });
        let reps = ((2e9 / (2.0 * (m * n * k) as f64)).clamp(3.0, 2000.0) as usize / 4).max(1);
        let mut best = f64::INFINITY;
        for _ in 0..15 {
            let t = Instant::now();
            for _ in 0..reps {
                sgemm(
                    th,
                    m,
                    n,
                    k,
                    &av,
                    &BSrc::Packed(&pb),
                    &mut c,
                    n,
                    &Epilogue::default(),
                )?;
            }
            best = best.min(t.elapsed().as_secs_f64() / reps as f64);
        }
        println!(
            "threads {threads}, B prepacked: {what:<24} {m}x{n}x{k}: {:7.1} GFLOP/s ({:.1} us)",
            2.0 * (m * n * k) as f64 / best / 1e9,
            best * 1e6
        );
    }
    Ok(())
}
