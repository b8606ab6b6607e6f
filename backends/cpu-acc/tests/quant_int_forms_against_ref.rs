//! The 8-bit integer forms TFLite's int8 HARD_SWISH and AVERAGE_POOL_2D import as (`Lookup`,
//! `IntegerAveragePool`, issue 31) on CpuAcc against CpuRef, bit for bit: int8 and uint8,
//! one to 257 channels, 2×2 and 3×3 windows at strides 1 and 2, SAME and VALID, a whole-image
//! window, one and two threads; alone (CpuAcc's byte table and quantized pool), and after an
//! int8 1×1 convolution from an NHWC image, where they must join the channels-last region
//! (no transpose but the exit); and each layer planned alone.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use backplane_core::ops::{AutoPad, PoolDesc, PoolKind, Window};
use backplane_core::{DataType, Network, Op, Tensor};
use support::{
    acc, all_bytes, conv_copy, custom, konst, layer, nhwc_image, only_the_exit_transpose, q8,
    reference, same_output_bytes, Rng,
};

/// An integer average pool: `k`×`k` at stride `s`, SAME or VALID.
fn pool(k: [usize; 2], s: usize, same: bool) -> Op {
    Op::IntegerAveragePool(PoolDesc {
        kind: PoolKind::Average,
        window: Window {
            kernel: k.to_vec(),
            strides: vec![s, s],
            dilations: vec![1, 1],
            pads: Vec::new(),
            auto_pad: if same {
                AutoPad::SameUpper
            } else {
                AutoPad::Valid
            },
        },
        ceil_mode: false,
        count_include_pad: false,
    })
}

/// The geometries: (kernel, stride, SAME), the whole image last (`[0, 0]`: filled in).
const GEOMETRIES: [([usize; 2], usize, bool); 9] = [
    ([2, 2], 2, false),
    ([2, 2], 1, false),
    ([2, 2], 2, true),
    ([3, 3], 1, true),
    ([3, 3], 2, true),
    ([3, 3], 1, false),
    ([3, 3], 2, false),
    ([1, 1], 1, false),
    ([0, 0], 1, false),
];

/// A 256-entry table of `dt` (a scrambled permutation, so every entry matters).
fn table(dt: DataType) -> Tensor {
    q8(
        dt,
        &[256],
        (0..=255u8)
            .map(|b| b.wrapping_mul(37).wrapping_add(11))
            .collect(),
    )
}

#[test]
fn integer_forms_equal_cpu_ref() {
    let shapes: [[usize; 4]; 5] = [
        [1, 1, 1, 1],
        [1, 3, 7, 5],
        [2, 17, 5, 11],
        [1, 257, 3, 4],
        [1, 2, 13, 2],
    ];
    let mut r = Rng(31);
    let mut cases = 0;
    for dims in shapes {
        for (k, s, same) in GEOMETRIES {
            let k = if k == [0, 0] { [dims[2], dims[3]] } else { k };
            if !same && (dims[2] < k[0] || dims[3] < k[1]) {
                continue;
            }
            for dt in [DataType::I8, DataType::U8] {
                // The table alone once per shape and type, then each pool alone.
                for with_table in [false, true] {
                    if with_table && (k, s, same) != ([2, 2], 2, false) {
                        continue;
                    }
                    let mut net = Network::new();
                    let n: usize = dims.iter().product();
                    let x = net
                        .add_input("x", q8(dt, &dims, vec![0; n]).info().clone())
                        .unwrap();
                    let y = if with_table {
                        let tc = konst(&mut net, table(dt));
                        layer(&mut net, Op::Lookup, &[x, tc])
                    } else {
                        layer(&mut net, pool(k, s, same), &[x])
                    };
                    net.mark_output(y).unwrap();
                    let what = format!("{dt} {dims:?} {k:?}/{s} same {same} table {with_table}");
                    let input = all_bytes(&mut r, dt, &dims);
                    same_output_bytes(&what, &net, x, input, |ops| {
                        let kinds: Vec<&str> = ops.iter().map(custom).collect();
                        let want = if with_table {
                            "QLinearLookup"
                        } else {
                            "QLinearPool"
                        };
                        assert_eq!(kinds, [want], "{what}");
                    });
                    cases += 1;
                }
            }
        }
    }
    assert!(cases > 60, "{cases} cases");
}

#[test]
fn integer_forms_join_the_int8_region() {
    let mut cases = 0;
    for (c, h, w) in [(3, 4, 6), (1, 2, 2), (17, 9, 7), (256, 3, 5)] {
        for (k, s, same) in GEOMETRIES {
            let k = if k == [0, 0] { [h, w] } else { k };
            if !same && (h < k[0] || w < k[1]) {
                continue;
            }
            let mut r = Rng(500 + c as u64);
            let mut net = Network::new();
            let (x, xt) = nhwc_image(&mut net, [h, w, c]);
            let a = conv_copy(&mut net, xt, (0.04, 2), c);
            let tc = konst(&mut net, table(DataType::I8));
            let l = layer(&mut net, Op::Lookup, &[a, tc]);
            let y = layer(&mut net, pool(k, s, same), &[l]);
            net.mark_output(y).unwrap();
            let input = all_bytes(&mut r, DataType::I8, &[1, h, w, c]);
            let what = format!("c {c} {h}×{w} {k:?}/{s} same {same}");
            same_output_bytes(&what, &net, x, input, |ops| {
                only_the_exit_transpose(&what, ops);
                assert_eq!(ops.len(), 4, "{what}: conv, lookup, pool, exit: {ops:?}");
            });
            cases += 1;
        }
    }
    assert!(cases > 25, "{cases} cases");
}

#[test]
fn integer_forms_planned_alone_equal_cpu_ref() {
    let mut r = Rng(77);
    for dt in [DataType::I8, DataType::U8] {
        let dims = [1, 17, 7, 5];
        let x = all_bytes(&mut r, dt, &dims);
        let t = table(dt);
        for threads in [1, 2] {
            let got = acc(&Op::Lookup, &[&x, &t], &[false, true], threads);
            let want = reference(&Op::Lookup, &[&x, &t]);
            assert_eq!(got[0].bytes(), want[0].bytes(), "lookup {dt}");
            for (k, s, same) in GEOMETRIES {
                let k = if k == [0, 0] { [7, 5] } else { k };
                let op = pool(k, s, same);
                let got = acc(&op, &[&x], &[false], threads);
                let want = reference(&op, &[&x]);
                assert_eq!(
                    got[0].bytes(),
                    want[0].bytes(),
                    "pool {dt} {k:?}/{s} {same}"
                );
            }
        }
    }
}
