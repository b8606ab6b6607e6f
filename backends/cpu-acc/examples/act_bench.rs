//! Time CpuAcc's activations applied in place over 65,536 values (a BERT-tiny feed-forward
//! layer's output) at 1 thread: `cargo run --release -p backplane-cpu-acc --example act_bench`.
//! Prints nanoseconds per value, the best of 15 rounds.

use backplane_cpu_acc::act::Activation;
use backplane_cpu_acc::simd::unary_in_place;
use std::time::Instant;

fn main() {
    let n = 65_536;
    // Values as a pre-activation sees them: about normal (a sum of twelve uniform values),
    // a few far out in the tails.
    let mut state = 0x2545_f491_u32;
    let mut uniform = move || {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        state as f32 / u32::MAX as f32
    };
    let base: Vec<f32> = (0..n)
        .map(|_| (0..12).map(|_| uniform()).sum::<f32>() - 6.0)
        .collect();
    for (name, act) in [
        (
            "gelu (erf)",
            Activation::Gelu {
                tanh_approximation: false,
            },
        ),
        (
            "gelu (tanh)",
            Activation::Gelu {
                tanh_approximation: true,
            },
        ),
        ("sigmoid", Activation::Sigmoid),
        ("tanh", Activation::Tanh),
    ] {
        let mut y = base.clone();
        let reps = 50;
        let mut best = f64::INFINITY;
        for _ in 0..15 {
            let t = Instant::now();
            for _ in 0..reps {
                y.copy_from_slice(&base);
                unary_in_place(act, &mut y);
            }
            best = best.min(t.elapsed().as_secs_f64() / reps as f64);
        }
        println!(
            "{name:<12} {:6.3} ns per value (copy included)",
            best * 1e9 / n as f64
        );
    }
}
