//! CpuAcc's quantized mean (`QLinearMean`), whose sums run vectorized in another order than
//! CpuRef's in-order f64 chain, against that chain bit for bit: channels 1, 3, 17, 257 and
//! 1283 (at two threads, blocks of channels shared out, the last short), planes 1×1, 7×7,
//! 13×17 and 61×59 (channels-last with few channels: at two threads ranges of pixels summed
//! apart and added), int8 and uint8, zero points at the ends of the range and
//! scales from subnormal to huge, channels-first and (after an int8 convolution, in a
//! channels-last region) channels-last. The kernels crate tests each instruction-set tier
//! of the sums themselves (`byte_sums`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use backplane_core::ops::{ReduceDesc, ReduceKind};
use backplane_core::{DataType, Network, Op};
use support::{
    add_dq, add_q, all_bytes, custom, layer, nhwc_image, q8, qdq_pointwise, same_output_bytes, Rng,
};

const CHANNELS: [usize; 5] = [1, 3, 17, 257, 1283];
const PLANES: [[usize; 2]; 4] = [[1, 1], [7, 7], [13, 17], [61, 59]];

fn mean(keepdims: bool) -> Op {
    Op::Reduce(ReduceDesc {
        kind: ReduceKind::Mean,
        axes: vec![2, 3],
        keepdims,
        noop_with_empty_axes: false,
    })
}

/// Input quantizations: full-mantissa, tiny, subnormal, huge and power-of-two scales, with
/// zero points at both ends of each type's range.
fn params(dt: DataType) -> Vec<(f32, i32)> {
    let (lo, hi) = if dt == DataType::I8 {
        (-128, 127)
    } else {
        (0, 255)
    };
    vec![
        (0.023_529_412, lo),
        (1e-6, hi),
        (1e-40, lo),
        (3e30, hi),
        (0.5, lo + 1),
        (0.007_812_5, (lo + hi) / 2),
    ]
}

#[test]
fn channels_first_means_equal_the_chain_on_cpu_ref() {
    let mut r = Rng(91);
    let mut case = 0usize;
    for c in CHANNELS {
        for [h, w] in PLANES {
            for xt in [DataType::I8, DataType::U8] {
                let ps = params(xt);
                let xq = ps[case % ps.len()];
                // The output near the mean's range, or far from it.
                let yq = if case.is_multiple_of(2) {
                    (xq.0 * 0.73, 5)
                } else {
                    (0.01, -128)
                };
                case += 1;
                let dims = [1, c, h, w];
                let mut net = Network::new();
                let x = net
                    .add_input("x", q8(xt, &dims, vec![0; c * h * w]).info().clone())
                    .unwrap();
                let t = add_dq(&mut net, x, xt, xq);
                let t = layer(&mut net, mean(case.is_multiple_of(3)), &[t]);
                let y = add_q(&mut net, t, DataType::I8, yq);
                net.mark_output(y).unwrap();
                let what = format!("{xt}{xq:?} → {yq:?} {dims:?}");
                same_output_bytes(&what, &net, x, all_bytes(&mut r, xt, &dims), |ops| {
                    assert_eq!(ops.len(), 1, "{what}: one layer: {ops:?}");
                    assert_eq!(custom(&ops[0]), "QLinearMean", "{what}");
                });
            }
        }
    }
}

#[test]
fn channels_last_means_equal_the_chain_on_cpu_ref() {
    // An int8 [1, H, W, 3] image → transpose → 1×1 conv to C channels (its output the mean's
    // input, quantized as listed) → mean over the pixels → QuantizeLinear: the region runs
    // the mean channels-last, reading C bytes a pixel.
    let mut r = Rng(92);
    let mut case = 0usize;
    for c in CHANNELS {
        for [h, w] in PLANES {
            let ps = params(DataType::I8);
            let mq = ps[case % ps.len()];
            case += 1;
            let mut net = Network::new();
            let (x, xt) = nhwc_image(&mut net, [h, w, 3]);
            let ws: Vec<f32> = (0..c).map(|i| 0.003 + 0.002 * (i % 5) as f32).collect();
            let wb = r.bytes(c * 3);
            let bias: Vec<i32> = (0..c).map(|i| (i as i32 % 9 - 4) * 300).collect();
            // A conv output scale that spreads its bytes over the range for the tiny and huge
            // mean scales too: the conv quantizes on (0.05, z), the mean reads those bytes as
            // `mq` (a DequantizeLinear of its own).
            let t = qdq_pointwise(&mut net, xt, (0.03, 1), wb, ws, bias, (0.05, mq.1));
            let f = add_dq(&mut net, t, DataType::I8, mq);
            let m = layer(&mut net, mean(true), &[f]);
            let y = add_q(&mut net, m, DataType::I8, (mq.0 * 1.37, -3));
            net.mark_output(y).unwrap();
            let what = format!("C {c} {h}×{w} {mq:?}");
            let input = all_bytes(&mut r, DataType::I8, &[1, h, w, 3]);
            same_output_bytes(&what, &net, x, input, |ops| {
                assert!(
                    !ops.iter().any(|o| matches!(o, Op::DequantizeLinear { .. })),
                    "{what}: all 8-bit: {ops:?}"
                );
                let means = ops.iter().filter(|o| custom(o) == "QLinearMean").count();
                assert_eq!(means, 1, "{what}: {ops:?}");
                let transposes = ops
                    .iter()
                    .filter(|o| matches!(o, Op::Transpose { .. }))
                    .count();
                assert_eq!(transposes, 0, "{what}: channels-last throughout: {ops:?}");
            });
        }
    }
}
