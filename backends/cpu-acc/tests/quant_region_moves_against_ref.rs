//! 8-bit Pad and Slice inside CpuAcc's channels-last int8 regions, against CpuRef bit for
//! bit: a `DequantizeLinear → Pad → QuantizeLinear` on one quantization (filling with 0, or
//! copying the edge) and a Slice, as the TFLite importer writes NASNet's
//! `ZeroPadding2D → Cropping2D` (its STRIDED_SLICE between transposes to channels-last and
//! back) or plain on the channels-first tensor, between int8 convolutions: the region must
//! hold them (one transpose, the exit), and the bytes must not change.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use backplane_core::ops::{PadDesc, PadMode, SliceDesc};
use backplane_core::{DataType, Network, Op, TensorId};
use support::{
    add_dq, add_q, all_bytes, custom, layer, only_the_exit_transpose, q8, qdq_pointwise,
    same_output_bytes, Rng,
};

/// How the tensor between the two convolutions is moved.
#[derive(Debug, Clone, Copy)]
enum Moves {
    /// Pad (dequantized, padded, quantized again), then a Slice between transposes to
    /// channels-last and back (NHWC axes), as NASNet's importer leaves it.
    PadThenWrappedSlice(PadMode),
    /// A Slice of the channels-first 8-bit tensor (its H, W and C axes).
    PlainSlice,
    /// Pad only (an explicit pad before a strided convolution).
    PadOnly(PadMode),
}

fn conv(
    net: &mut Network,
    r: &mut Rng,
    x: TensorId,
    xq: (f32, i32),
    c: usize,
    m: usize,
    yq: (f32, i32),
) -> TensorId {
    // Power-of-two scales throughout: CpuRef's f32 convolution (sums of up to 17 channels,
    // then the rescale) is then exact, like CpuAcc's integer one, so no near tie rounds
    // differently and the bytes compare equal.
    let ws: Vec<f32> = (0..m).map(|i| 1.0 / f32::from(256u16 << (i % 3))).collect();
    let w = r.bytes(m * c);
    let b: Vec<i32> = (0..m).map(|i| (i as i32 % 11 - 5) * 200).collect();
    qdq_pointwise(net, x, xq, w, ws, b, yq)
}

fn transpose(net: &mut Network, x: TensorId, perm: [usize; 4]) -> TensorId {
    layer(
        net,
        Op::Transpose {
            perm: perm.to_vec(),
        },
        &[x],
    )
}

fn slice(starts: &[i64], ends: &[i64], axes: &[i64]) -> Op {
    Op::Slice(SliceDesc {
        starts: starts.to_vec(),
        ends: ends.to_vec(),
        axes: axes.to_vec(),
        steps: Vec::new(),
    })
}

#[test]
fn pads_and_slices_run_in_the_int8_region() {
    let shapes = [(3, 5, 7, 11), (1, 1, 2, 2), (4, 17, 13, 9)];
    let moves = [
        Moves::PadThenWrappedSlice(PadMode::Constant),
        Moves::PadThenWrappedSlice(PadMode::Edge),
        Moves::PlainSlice,
        Moves::PadOnly(PadMode::Constant),
        Moves::PadOnly(PadMode::Reflect),
    ];
    for (i, &(c, m, h, w)) in shapes.iter().enumerate() {
        for (j, &mv) in moves.iter().enumerate() {
            if matches!(mv, Moves::PadOnly(PadMode::Reflect)) && h.min(w) < 3 {
                continue;
            }
            let mut r = Rng(70 + (i * 10 + j) as u64);
            let mut net = Network::new();
            let info = q8(DataType::I8, &[1, h, w, c], vec![0; h * w * c])
                .info()
                .clone();
            let x = net.add_input("x", info).unwrap();
            let xt = transpose(&mut net, x, [0, 3, 1, 2]);
            // The zero point at the type's end, so a fill of 0 reads as -128, not 0.
            let q = (0.0625, -128);
            let t = conv(&mut net, &mut r, xt, (0.125, -3), c, m, q);
            let pad = |net: &mut Network, t, mode| {
                let f = add_dq(net, t, DataType::I8, q);
                let p = Op::Pad(PadDesc {
                    mode,
                    // N, C, H, W begins, then ends.
                    pads: vec![0, 0, 1, 0, 0, 0, 1, 2],
                    value: 0.0,
                });
                let f = layer(net, p, &[f]);
                add_q(net, f, DataType::I8, q)
            };
            let (t, ch) = match mv {
                Moves::PadThenWrappedSlice(mode) => {
                    let t = pad(&mut net, t, mode);
                    let t = transpose(&mut net, t, [0, 2, 3, 1]);
                    // NHWC: rows 1.., columns ..w + 1 (of w + 2), every channel.
                    let t = layer(
                        &mut net,
                        slice(&[1, 0], &[h as i64 + 1, w as i64 + 1], &[1, 2]),
                        &[t],
                    );
                    (transpose(&mut net, t, [0, 3, 1, 2]), m)
                }
                Moves::PlainSlice => {
                    let keep = m.div_ceil(2);
                    let s = slice(&[0, 1, 0], &[keep as i64, i64::MAX, -1], &[1, -2, 3]);
                    (layer(&mut net, s, &[t]), keep)
                }
                Moves::PadOnly(mode) => (pad(&mut net, t, mode), m),
            };
            let y = conv(&mut net, &mut r, t, q, ch, 5, (0.25, 2));
            net.mark_output(y).unwrap();
            let input = all_bytes(&mut r, DataType::I8, &[1, h, w, c]);
            let what = format!("{mv:?} c {c} m {m} {h}×{w}");
            same_output_bytes(&what, &net, x, input, |ops| {
                only_the_exit_transpose(&what, ops);
                assert!(
                    !ops.iter().any(|o| matches!(
                        o,
                        Op::DequantizeLinear { .. } | Op::QuantizeLinear { .. }
                    )),
                    "{what}: all 8-bit: {ops:?}"
                );
                assert_eq!(
                    ops.iter().filter(|o| custom(o) == "QLinearConv").count(),
                    2,
                    "{what}"
                );
                let moved = ops
                    .iter()
                    .filter(|o| matches!(o, Op::Pad(_) | Op::Slice(_)))
                    .count();
                let want = match mv {
                    Moves::PadThenWrappedSlice(_) => 2,
                    _ => 1,
                };
                assert_eq!(moved, want, "{what}: {ops:?}");
            });
        }
    }
}
