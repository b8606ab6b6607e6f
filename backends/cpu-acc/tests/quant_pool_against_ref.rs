//! CpuAcc's quantized 2-D pools (`DequantizeLinear → AveragePool | MaxPool →
//! QuantizeLinear`, one `QLinearPool` layer) against the unfolded chain on CpuRef, bit
//! for bit: int8 and uint8, zero points at the ends of the range, equal and different
//! parameters on both sides, a fused Relu or Clip, 1×1 to 3×3 windows at strides 1 and 2, no padding, SAME, and
//! asymmetric pads, `count_include_pad` both ways, `ceil_mode`, one to 257 channels, one and
//! two threads. Then the pools inside a channels-last region, which must give the same bytes
//! with no transpose but the exit.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use backplane_core::ops::{AutoPad, PoolDesc, PoolKind, UnaryOp, Window};
use backplane_core::{DataType, Network, Op};
use support::{
    add_dq, add_q, all_bytes, conv_copy, custom, layer, nhwc_image, only_the_exit_transpose, q8,
    same_output_bytes, Rng,
};

/// One pool's geometry: window, strides, pads (top, left, bottom, right) or SAME.
#[derive(Clone, Copy, Debug)]
struct Geo {
    k: [usize; 2],
    s: [usize; 2],
    pads: [usize; 4],
    same: bool,
    ceil: bool,
}

fn pool(max: bool, g: Geo, count_include_pad: bool) -> Op {
    Op::Pool(PoolDesc {
        kind: if max {
            PoolKind::Max
        } else {
            PoolKind::Average
        },
        window: Window {
            kernel: g.k.to_vec(),
            strides: g.s.to_vec(),
            dilations: vec![1, 1],
            pads: if g.same { Vec::new() } else { g.pads.to_vec() },
            auto_pad: if g.same {
                AutoPad::SameUpper
            } else {
                AutoPad::NotSet
            },
        },
        ceil_mode: g.ceil,
        count_include_pad,
    })
}

fn geometries() -> Vec<Geo> {
    let g = |k: [usize; 2], s: [usize; 2], pads: [usize; 4]| Geo {
        k,
        s,
        pads,
        same: false,
        ceil: false,
    };
    vec![
        g([1, 1], [1, 1], [0; 4]),
        g([2, 2], [2, 2], [0; 4]),
        g([3, 3], [1, 1], [1, 1, 1, 1]),
        g([3, 3], [2, 2], [1, 1, 1, 1]),
        g([3, 3], [2, 2], [0, 1, 1, 0]),
        g([3, 2], [1, 2], [2, 0, 0, 1]),
        g([2, 3], [2, 1], [0, 0, 0, 0]),
        Geo {
            same: true,
            ..g([3, 3], [1, 1], [0; 4])
        },
        Geo {
            same: true,
            ..g([3, 3], [2, 2], [0; 4])
        },
        Geo {
            ceil: true,
            ..g([3, 3], [2, 2], [0; 4])
        },
        Geo {
            ceil: true,
            ..g([2, 2], [2, 2], [1, 0, 0, 1])
        },
    ]
}

#[test]
fn quantized_pools_equal_the_chain_on_cpu_ref() {
    let shapes: [[usize; 4]; 5] = [
        [1, 1, 1, 1],
        [1, 3, 7, 5],
        [2, 17, 5, 11],
        [1, 257, 3, 4],
        [1, 2, 13, 2],
    ];
    let mut r = Rng(4111);
    let mut folded = 0;
    for g in geometries() {
        for dims in shapes {
            // A window larger than the padded input has no output.
            let fits = (0..2).all(|a| dims[2 + a] + g.pads[a] + g.pads[2 + a] >= g.k[a]);
            if !fits && !g.same {
                continue;
            }
            for (dt, z) in [
                (DataType::I8, -128),
                (DataType::I8, 127),
                (DataType::I8, 5),
                (DataType::U8, 0),
                (DataType::U8, 255),
                (DataType::U8, 131),
            ] {
                for (max, include) in [(false, false), (false, true), (true, false)] {
                    for same_params in [true, false] {
                        let xq = (0.0173, z);
                        let yq = if same_params {
                            xq
                        } else if dt == DataType::I8 {
                            (0.05, -3)
                        } else {
                            (0.011, 140)
                        };
                        let mut net = Network::new();
                        let n: usize = dims.iter().product();
                        let x = net
                            .add_input("x", q8(dt, &dims, vec![0; n]).info().clone())
                            .unwrap();
                        let t = add_dq(&mut net, x, dt, xq);
                        let mut t = layer(&mut net, pool(max, g, include), &[t]);
                        // A fused activation in one case of three.
                        let act = match folded % 3 {
                            0 => None,
                            1 => Some(UnaryOp::Relu),
                            _ => Some(UnaryOp::Clip {
                                min: -0.3,
                                max: 0.5,
                            }),
                        };
                        if let Some(u) = act {
                            t = layer(&mut net, Op::Unary(u), &[t]);
                        }
                        let y = add_q(&mut net, t, dt, yq);
                        net.mark_output(y).unwrap();
                        let what = format!(
                            "{} {g:?} include {include} {dims:?} {dt} z {z} same {same_params} \
                             {act:?}",
                            if max { "max" } else { "avg" }
                        );
                        let input = all_bytes(&mut r, dt, &dims);
                        same_output_bytes(&what, &net, x, input, |ops| {
                            assert_eq!(ops.len(), 1, "{what}: one layer");
                            assert_eq!(custom(&ops[0]), "QLinearPool", "{what}");
                        });
                        folded += 1;
                    }
                }
            }
        }
    }
    assert!(folded > 1000, "{folded} cases");
}

#[test]
fn padded_and_max_pools_join_the_int8_region() {
    // Inception's branch: 1×1 conv → padded 3×3 pool (average or max), channels-last from
    // the NHWC image to the one exit.
    let mut cases = 0;
    for (c, h, w) in [(3, 4, 6), (1, 2, 2), (17, 9, 7), (256, 3, 5)] {
        for (g, (max, include)) in geometries()
            .into_iter()
            .flat_map(|g| [(false, false), (false, true), (true, false)].map(|m| (g, m)))
        {
            let fits = [h, w]
                .iter()
                .enumerate()
                .all(|(a, &n)| g.same || n + g.pads[a] + g.pads[2 + a] >= g.k[a]);
            if !fits {
                continue;
            }
            cases += 1;
            let mut r = Rng(300 + c as u64);
            let mut net = Network::new();
            let (x, xt) = nhwc_image(&mut net, [h, w, c]);
            let a = conv_copy(&mut net, xt, (0.04, 2), c);
            let af = add_dq(&mut net, a, DataType::I8, (0.04, 2));
            let p = layer(&mut net, pool(max, g, include), &[af]);
            let y = add_q(&mut net, p, DataType::I8, (0.05, -2));
            net.mark_output(y).unwrap();
            let input = all_bytes(&mut r, DataType::I8, &[1, h, w, c]);
            let what = format!("c {c} {h}×{w} max {max} include {include} {g:?}");
            same_output_bytes(&what, &net, x, input, |ops| {
                only_the_exit_transpose(&what, ops);
                assert_eq!(ops.len(), 3, "{what}: conv, pool, exit: {ops:?}");
            });
        }
    }
    assert!(cases > 100, "{cases} cases");
}
