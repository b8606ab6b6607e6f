//! Batch norms over int8 channels-last images (a per-channel `Mul` then `Add`, or two of
//! either, composed into one `QLinearBinary` per block as DenseNet's import): CpuAcc's
//! bytes equal CpuRef's chain on rows of more channels than the byte tables take (the
//! fused pair, and its straight-line form where it fits), on whichever tier the calling
//! test binary runs.

use super::{
    add_dq, add_q, all_bytes, custom, konst, layer, nhwc_image, only_the_exit_transpose,
    qdq_pointwise, same_output_bytes, Rng,
};
use backplane_core::ops::{BinaryOp, UnaryOp};
use backplane_core::{DataType, Network, Op};

/// Channel counts and maps: a prime past the tables' 32, a power of two, a prime past
/// 1024, one pixel of many channels.
const SHAPES: [(usize, usize, usize); 4] = [(37, 5, 3), (64, 4, 4), (1031, 2, 3), (97, 1, 1)];

/// Every shape with each pair of operations, scale magnitudes, zero points and a fused
/// Relu or none: the output bytes equal CpuRef's, and the two layers are one.
pub fn batch_norms_equal_the_chain() {
    let pairs = [
        (BinaryOp::Mul, BinaryOp::Add),
        (BinaryOp::Add, BinaryOp::Mul),
        (BinaryOp::Mul, BinaryOp::Mul),
        (BinaryOp::Add, BinaryOp::Add),
    ];
    let mut case = 0u64;
    for (c, h, w) in SHAPES {
        for (op1, op2) in pairs {
            for relu in [false, true] {
                case += 1;
                let mut r = Rng(900 + case);
                let mut net = Network::new();
                let (x, xt) = nhwc_image(&mut net, [h, w, c]);
                let xq = [(0.04, 2), (0.013, -128), (0.2, 127)][case as usize % 3];
                let xf = add_dq(&mut net, xt, DataType::I8, xq);
                let sc = konst(&mut net, r.tensor(&[c, 1, 1], 2.5));
                let m = layer(&mut net, Op::Binary(op1), &[xf, sc]);
                let mq = [(0.05, -1), (0.11, 40), (0.021, -128)][case as usize % 3];
                let m = add_q(&mut net, m, DataType::I8, mq);
                let mf = add_dq(&mut net, m, DataType::I8, mq);
                let sh = konst(&mut net, r.tensor(&[c, 1, 1], 1.5));
                let mut a = layer(&mut net, Op::Binary(op2), &[sh, mf]);
                if relu {
                    a = layer(&mut net, Op::Unary(UnaryOp::Relu), &[a]);
                }
                let yq = [(0.03, -128), (0.07, 5), (0.009, 100)][case as usize % 3];
                let a = add_q(&mut net, a, DataType::I8, yq);
                let ws: Vec<f32> = (0..3).map(|i| 0.004 + 0.001 * i as f32).collect();
                let wb = r.bytes(3 * c);
                let b: Vec<i32> = (0..3).map(|_| (r.next() % 2001) as i32 - 1000).collect();
                let y = qdq_pointwise(&mut net, a, yq, wb, ws, b, (0.05, -2));
                net.mark_output(y).unwrap();
                let input = all_bytes(&mut r, DataType::I8, &[1, h, w, c]);
                let what = format!("{op1:?} then {op2:?} c {c} {h}×{w}, relu {relu}");
                same_output_bytes(&what, &net, x, input, |ops| {
                    only_the_exit_transpose(&what, ops);
                    let binaries = ops.iter().filter(|o| custom(o) == "QLinearBinary").count();
                    assert_eq!(binaries, 1, "{what}: composed: {ops:?}");
                });
            }
        }
    }
}
