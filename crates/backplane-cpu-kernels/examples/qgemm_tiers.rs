//! Time the int8 GEMM with its requantization (`qgemm_requantized_on`, one thread) on
//! MobileNetV2-like convolution shapes (output pixels × input channels × output channels),
//! and the int8 3×3 depthwise layers (`depthwise_rows_on`, whole images of MobileNetV2's
//! shapes), on every integer tier this CPU has, in one process:
//! `cargo run --release -p backplane-cpu-kernels --example qgemm_tiers [NAME]` (with NAME,
//! only the GEMM shapes whose description holds it).
//! Each tier's bytes are checked against the portable tier's before it is timed. The byte
//! GEMM (`quad_gemm_requantized_on`, `vpdpbusd`) is timed on the tiers with a vector tile
//! for it (column `quads`), on the same operands made unsigned with the zero point folded
//! into the bias, its bytes checked against the pair GEMM's.

use backplane_cpu_kernels::isa::{int8_isa, isa};
use backplane_cpu_kernels::qgemm::{
    depthwise_rows_on, has_quad_tile, qgemm_requantized_on, quad_gemm_requantized_on,
    ColumnRequant, DwGeometry, DwLayer, DwWeights, Int8Isa, QPackedB, QuadPackedB, RequantRange,
    QNR,
};
use std::hint::black_box;
use std::time::Instant;

/// The best of five timings of `reps` calls of `f`, per call, in seconds.
fn best_of(reps: usize, mut f: impl FnMut()) -> f64 {
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        let start = Instant::now();
        for _ in 0..reps {
            f();
        }
        best = best.min(start.elapsed().as_secs_f64() / reps as f64);
    }
    best
}

/// Deterministic values in −255 ..= 255.
fn values(n: usize, seed: u64) -> Vec<i16> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 33) % 511) as i16 - 255
        })
        .collect()
}

fn main() -> Result<(), String> {
    println!(
        "f32 kernels: {}; int8 tier in use: {}; int8 tiers on this CPU: {}",
        isa(),
        int8_isa(),
        Int8Isa::ALL
            .into_iter()
            .filter(|t| t.available())
            .map(|t| t.name())
            .collect::<Vec<_>>()
            .join(" ")
    );
    let shapes = [
        (12544, 27, 32, "stem 3x3 s2 (im2col) 112x112"),
        (12544, 16, 96, "1x1 16->96 112x112"),
        (3136, 144, 24, "1x1 144->24 56x56"),
        (784, 192, 32, "1x1 192->32 28x28"),
        (196, 384, 64, "1x1 384->64 14x14"),
        (196, 576, 96, "1x1 576->96 14x14"),
        (49, 960, 160, "1x1 960->160 7x7"),
        (49, 320, 1280, "1x1 320->1280 7x7"),
        (1, 512, 64, "1 row, B in L2"),
        (4, 512, 64, "4 rows, B in L2"),
        (8, 512, 64, "8 rows, B in L2"),
        (1, 1280, 1000, "classifier 1280->1000, 1 row"),
        (2, 1280, 1000, "classifier, 2 rows"),
        (4, 1280, 1000, "classifier, 4 rows"),
    ];
    let range = RequantRange {
        zero: -128.0,
        lo: 0.0,
        hi: 255.0,
    };
    // An argument keeps the shapes whose name holds it (and skips the depthwise rows).
    let only = std::env::args().nth(1);
    for (m, k, n, what) in shapes {
        if only.as_deref().is_some_and(|o| !what.contains(o)) {
            continue;
        }
        let b_raw = values(k * n, 1 + k as u64);
        let b = QPackedB::pack(k, n, |kk, j| b_raw[kk * n + j]).ok_or("pack")?;
        let lda = b.depth_padded();
        let mut a = values(m * lda, 2 + m as u64);
        for row in a.chunks_mut(lda) {
            row[k..].fill(0);
        }
        let bias: Vec<i32> = (0..n as i32).map(|j| j * 13 - 400).collect();
        let scale = vec![1.0 / (60.0 * (k as f32).sqrt()); n];
        let rq = ColumnRequant::new(&bias, &scale, range).ok_or("requant")?;
        let panels = 0..n.div_ceil(QNR);
        let mut want = vec![0u8; m * n];
        let run = |t: Int8Isa, out: &mut [u8]| {
            qgemm_requantized_on(t, &a, lda, m, &b, panels.clone(), &rq, out, n)
        };
        if !run(Int8Isa::Portable, &mut want) {
            return Err(format!("{what}: the portable tier refused"));
        }
        let macs = (m * k * n) as f64;
        let mut line = format!("{what:<32} {m:>5}x{k:>4}x{n:>4}");
        for t in Int8Isa::ALL.into_iter().filter(|t| t.available()) {
            let mut out = vec![0u8; m * n];
            if !run(t, &mut out) || out != want {
                return Err(format!(
                    "{what}: {} differs from the portable tier",
                    t.name()
                ));
            }
            let reps = (2e8 / macs).clamp(2.0, 2000.0) as usize;
            let best = best_of(reps, || {
                black_box(run(t, black_box(&mut out)));
            });
            line += &format!(
                "  {}: {:>8.1} us {:>6.1} GMAC/s",
                t.name(),
                best * 1e6,
                macs / best / 1e9
            );
        }
        // The byte GEMM: A as unsigned bytes (the centered values plus 128, clamped to a
        // byte) with zero point 128, B the weights clamped to i8.
        let qb = QuadPackedB::pack(k, n, |kk, j| b_raw[kk * n + j].clamp(-128, 127))
            .ok_or("quad pack")?;
        let pb = QPackedB::pack(k, n, |kk, j| b_raw[kk * n + j].clamp(-128, 127)).ok_or("pack")?;
        let kq = qb.depth_padded();
        let mut a8 = vec![0u8; m * kq];
        let mut a16 = vec![0i16; m * lda];
        for i in 0..m {
            for kk in 0..k {
                let v = (a[i * lda + kk] + 128).clamp(0, 255);
                a8[i * kq + kk] = v as u8;
                a16[i * lda + kk] = v - 128;
            }
        }
        let folded = qb.folded_bias(&bias, 128).ok_or("fold")?;
        let rq8 = ColumnRequant::new(&folded, &scale, range).ok_or("requant")?;
        let mut want8 = vec![0u8; m * n];
        if !qgemm_requantized_on(
            Int8Isa::Portable,
            &a16,
            lda,
            m,
            &pb,
            panels.clone(),
            &rq,
            &mut want8,
            n,
        ) {
            return Err(format!("{what}: the portable tier refused"));
        }
        for t in Int8Isa::ALL
            .into_iter()
            .filter(|&t| t.available() && has_quad_tile(t))
        {
            let run8 = |out: &mut [u8]| {
                quad_gemm_requantized_on(t, &a8, kq, m, &qb, panels.clone(), &rq8, out, n)
            };
            let mut out = vec![0u8; m * n];
            if !run8(&mut out) || out != want8 {
                return Err(format!(
                    "{what}: quads on {} differ from the pair GEMM",
                    t.name()
                ));
            }
            let reps = (2e8 / macs).clamp(2.0, 2000.0) as usize;
            let best = best_of(reps, || {
                black_box(run8(black_box(&mut out)));
            });
            line += &format!(
                "  quads: {:>8.1} us {:>6.1} GMAC/s",
                best * 1e6,
                macs / best / 1e9
            );
        }
        println!("{line}");
    }
    if only.is_some() {
        return Ok(());
    }
    depthwise(range)
}

/// MobileNetV2's 3×3 depthwise layers (input extent, channels, stride; pads 1, or the
/// TFLite "same" padding of a stride-2 layer: none before).
fn depthwise(range: RequantRange) -> Result<(), String> {
    for (hw, c, s) in [
        (112, 32, 1),
        (112, 96, 2),
        (56, 144, 1),
        (56, 144, 2),
        (28, 192, 1),
        (14, 576, 1),
        (7, 960, 1),
    ] {
        let o = hw / s;
        let pad = if s == 1 { 1 } else { 0 };
        let geo = DwGeometry {
            n: 1,
            h: hw,
            w: hw,
            oh: o,
            ow: o,
            kernel: [3, 3],
            strides: [s, s],
            dilations: [1, 1],
            pads: [pad, pad],
        };
        let x: Vec<u8> = values(hw * hw * c, 7).iter().map(|&v| v as u8).collect();
        let wv = values(9 * c, 3);
        let bias: Vec<i32> = (0..c).map(|i| i as i32 * 7 - 300).collect();
        let w = DwWeights::new(
            c,
            9,
            |t, ch| wv[t * c + ch] / 2,
            &bias,
            &vec![1.0 / 500.0; c],
            range,
            -3,
            true,
        )
        .ok_or("weights")?;
        let layer = DwLayer::new(w, geo).ok_or("layer")?;
        let n = o * o * c;
        let mut want = vec![0u8; n];
        if !depthwise_rows_on(Int8Isa::Portable, &layer, &x, 0..o, &mut want) {
            return Err("depthwise: the portable tier refused".into());
        }
        let what = format!("depthwise {hw}x{hw}x{c} s{s}");
        let mut line = format!("{what:<32} {n:>16}");
        for t in Int8Isa::ALL.into_iter().filter(|t| t.available()) {
            let mut out = vec![0u8; n];
            if !depthwise_rows_on(t, &layer, &x, 0..o, &mut out) || out != want {
                return Err(format!("{what}: {} differs", t.name()));
            }
            let reps = (2e7 / (9 * n) as f64).clamp(2.0, 20000.0) as usize;
            let best = best_of(reps, || {
                black_box(depthwise_rows_on(t, &layer, &x, 0..o, black_box(&mut out)));
            });
            line += &format!(
                "  {}: {:>8.2} us {:>6.1} GMAC/s",
                t.name(),
                best * 1e6,
                (9 * n) as f64 / best / 1e9
            );
        }
        println!("{line}");
    }
    Ok(())
}
