//! The channels-last pointwise tiles at the narrow depths of MobileNetV3's and
//! EfficientNet's 112² layers (K 16-40 input channels): the whole plane in blocks of 60
//! pixels, each block through every packed panel, as CpuAcc's `conv/nhwc.rs` runs it, and
//! the same with one block repeated (its rows in L1), to tell the tile's own rate from the
//! memory traffic. `cargo run --release --example narrow_pointwise -p backplane-cpu-kernels`.

use backplane_cpu_kernels::gemm::{
    tiles_strided_pairs, tiles_strided_wide, Halves, TileEpilogue, NR,
};
use backplane_cpu_kernels::Activation;
use std::time::Instant;

const BLOCK: usize = 60;

/// Best of five runs of `f`, in microseconds.
fn best(mut f: impl FnMut()) -> f64 {
    let mut t_best = f64::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        f();
        t_best = t_best.min(t.elapsed().as_secs_f64() * 1e6);
    }
    t_best
}

fn main() {
    let px = 112 * 112;
    for (k, n, act, residual) in [
        (16usize, 16usize, Activation::None, false),
        (16, 16, Activation::None, true),
        (16, 64, Activation::Relu, false),
        (16, 96, Activation::Silu, false),
        (24, 72, Activation::Relu, false),
        (40, 120, Activation::HardSwish, false),
        (80, 200, Activation::HardSwish, false),
        (64, 96, Activation::Relu, false),
        (96, 96, Activation::Relu, false),
    ] {
        let a: Vec<f32> = (0..px * k).map(|i| (i % 7) as f32 * 0.1 - 0.3).collect();
        let panels = n.div_ceil(NR);
        let b: Vec<f32> = (0..panels * k * NR).map(|i| (i % 5) as f32 * 0.1).collect();
        let bias: Vec<f32> = (0..n).map(|i| i as f32 * 0.01).collect();
        let mut c = vec![0f32; px * n];
        let res: Vec<f32> = (0..px * n).map(|i| (i % 3) as f32).collect();
        let run = |c: &mut [f32], repeat: bool, pairs: bool| {
            for blk in 0..px / BLOCK {
                let r0 = if repeat { 0 } else { blk * BLOCK };
                if residual {
                    // As CpuAcc adds a residual: copied into the block, then added onto.
                    let at = r0 * n..(r0 + BLOCK) * n;
                    c[at.clone()].copy_from_slice(&res[at]);
                }
                let mut p = 0;
                while p < panels {
                    let j0 = p * NR;
                    let ep = TileEpilogue {
                        accumulate: residual,
                        alpha: 1.0,
                        row_bias: None,
                        col_bias: Some(&bias[j0..]),
                        last: true,
                        act,
                    };
                    if pairs && n - j0 > NR {
                        let nr = (2 * NR).min(n - j0);
                        let ok = tiles_strided_pairs(
                            k,
                            &a[r0 * k..],
                            k,
                            BLOCK,
                            &b[p * k * NR..],
                            &mut c[r0 * n + j0..],
                            n,
                            nr,
                            &ep,
                        );
                        assert!(ok);
                        p += 2;
                        continue;
                    }
                    let nr = NR.min(n - j0);
                    let bp = (&b[p * k * NR..], Halves::Interleaved);
                    p += 1;
                    let ok = tiles_strided_wide(
                        k,
                        &a[r0 * k..],
                        k,
                        BLOCK,
                        bp,
                        &mut c[r0 * n + j0..],
                        n,
                        nr,
                        &ep,
                    );
                    assert!(ok);
                }
            }
        };
        for pairs in [false, true] {
            let plane = best(|| run(&mut c, false, pairs));
            let hot = best(|| run(&mut c, true, pairs));
            let gflop = 2.0 * (px / BLOCK * BLOCK * k * n) as f64 / 1e3;
            println!(
            "{} K {k:3} N {n:3} {act:?} residual {residual}: plane {plane:7.1} us ({:5.1} GFLOP/s), one block repeated {hot:7.1} us ({:5.1} GFLOP/s)",
            if pairs { "pairs" } else { "wide " },
            gflop / plane,
            gflop / hot
        );
        }
    }
}
