//! The channels-last 3×3 depthwise rows on a 112² plane, by default MobileNetV3's 64
//! channels at stride 2 and a few other channel counts and strides: the whole plane, and one
//! row repeated (its input in L1 or L2), to tell the kernel's own rate from the memory
//! traffic. `cargo run --release --example dw_rows -p backplane-cpu-kernels [SHIFT
//! [CxS,CxS...]]`: SHIFT floats between the output buffer's start and the output (to move
//! its 4 KiB alignment against the input's), then the channel counts and strides to run.

use backplane_cpu_kernels::geo::Geo2;
use backplane_cpu_kernels::nhwc_depthwise::{row, DwRow};
use backplane_cpu_kernels::Activation;
use std::time::Instant;

fn main() {
    let cases: Vec<(usize, usize)> = std::env::args()
        .nth(2)
        .map(|a| {
            a.split(',')
                .filter_map(|p| p.split_once('x'))
                .filter_map(|(c, s)| Some((c.parse().ok()?, s.parse().ok()?)))
                .collect()
        })
        .unwrap_or_else(|| vec![(64, 2), (16, 1), (72, 1), (72, 2)]);
    for (c, s) in cases {
        let (h, w) = (112, 112);
        let o = (h + 2 - 3) / s + 1;
        let geo = Geo2 {
            h,
            w,
            kh: 3,
            kw: 3,
            sh: s,
            sw: s,
            dh: 1,
            dw: 1,
            pt: 1,
            pl: 1,
            oh: o,
            ow: o,
        };
        let x: Vec<f32> = (0..h * w * c).map(|i| (i % 11) as f32 * 0.1).collect();
        let taps: Vec<f32> = (0..9 * c).map(|i| (i % 5) as f32 * 0.1).collect();
        let bias = vec![0.5f32; c];
        let mut y_buf = vec![0f32; o * o * c + 64];
        let shift: usize = std::env::args()
            .nth(1)
            .and_then(|a| a.parse().ok())
            .unwrap_or(0);
        let y = &mut y_buf[shift..shift + o * o * c];
        let job = DwRow {
            geo: &geo,
            c,
            x: &x,
            taps: &taps,
            bias: &bias,
            act: Activation::Relu,
        };
        let mut time = |repeat: bool| {
            let mut best = f64::MAX;
            for _ in 0..7 {
                let t = Instant::now();
                for (oy, out) in y.chunks_exact_mut(o * c).enumerate() {
                    let oy = if repeat { o / 2 } else { oy };
                    assert!(row(&job, oy, None, out));
                }
                best = best.min(t.elapsed().as_secs_f64() * 1e6);
            }
            best
        };
        let plane = time(false);
        let hot = time(true);
        let fmas = (o * o * c.div_ceil(16) * 9) as f64;
        println!(
            "C {c} stride {s}: plane {plane:6.1} us, one row repeated {hot:6.1} us ({:.2} FMAs per ns)",
            fmas / hot / 1e3
        );
    }
}
