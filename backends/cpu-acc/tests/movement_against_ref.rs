//! CpuAcc's data-movement and Cast kernels against CpuRef, byte for byte: Slice, Gather,
//! Where, Expand, Tile, Pad, Split and Cast, on odd sizes, several element types, negative
//! axes, steps and indices, broadcasting, and tensors large enough for the threaded path.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use backplane_backend_api::{Backend, LayerDesc, Support};
use backplane_core::ops::{PadDesc, PadMode, SliceDesc};
use backplane_core::{DataType, Op, Tensor, TensorInfo};
use backplane_cpu_acc::CpuAccBackend;
use half::f16;
use std::sync::Arc;
use support::{acc, reference, Rng};

/// The types the movement tests run on.
const TYPES: [DataType; 7] = [
    DataType::F32,
    DataType::I64,
    DataType::U8,
    DataType::Bool,
    DataType::F16,
    DataType::F64,
    DataType::I8,
];

/// `op` on CpuAcc (1 and 2 threads, each constant choice) equals CpuRef bit for bit.
fn exact(what: &str, op: &Op, inputs: &[&Tensor], constants: &[&[bool]]) {
    let want = reference(op, inputs);
    for threads in [1, 2] {
        for c in constants {
            let got = acc(op, inputs, c, threads);
            assert_eq!(got.len(), want.len(), "{what}");
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                let tag = format!("{what} output {i} threads={threads} const={c:?}");
                assert_eq!(g.info(), w.info(), "{tag}");
                if g.bytes() != w.bytes() {
                    let at = g
                        .bytes()
                        .iter()
                        .zip(w.bytes())
                        .position(|(a, b)| a != b)
                        .unwrap_or(0);
                    panic!("{tag}: first differing byte {at} of {}", w.bytes().len());
                }
            }
        }
    }
}

/// A random tensor of `dt` (values in about ±100 for numbers, random for bool).
fn typed(rng: &mut Rng, dims: &[usize], dt: DataType) -> Tensor {
    let f = rng.tensor(dims, 100.0);
    if dt == DataType::Bool {
        let n: usize = dims.iter().product();
        let v: Vec<bool> = (0..n).map(|_| rng.next() % 2 == 1).collect();
        return Tensor::from_bools(dims.to_vec(), &v).unwrap();
    }
    reference(
        &Op::Cast {
            to: dt,
            saturate: true,
        },
        &[&f],
    )
    .remove(0)
}

/// The layer description of `op` on `inputs` (none constant).
fn desc(op: &Op, inputs: &[&Tensor]) -> LayerDesc {
    let infos: Vec<TensorInfo> = inputs.iter().map(|t| t.info().clone()).collect();
    let refs: Vec<&TensorInfo> = infos.iter().collect();
    LayerDesc {
        name: "under_test".into(),
        outputs: op.infer(&refs).unwrap(),
        inputs: infos,
        op: op.clone(),
        constants: vec![None; inputs.len()],
    }
}

fn slice(starts: &[i64], ends: &[i64], axes: &[i64], steps: &[i64]) -> Op {
    Op::Slice(SliceDesc {
        starts: starts.to_vec(),
        ends: ends.to_vec(),
        axes: axes.to_vec(),
        steps: steps.to_vec(),
    })
}

#[test]
fn slice_strides_negative_steps_and_clamping() {
    let mut rng = Rng(11);
    let cases: Vec<(Vec<usize>, Op)> = vec![
        (
            vec![7, 17],
            slice(&[1, -1], &[6, i64::MIN], &[0, 1], &[2, -3]),
        ),
        (vec![3, 63], slice(&[5], &[60], &[-1], &[1])),
        (vec![257], slice(&[-1], &[i64::MIN], &[0], &[-1])),
        (vec![257], slice(&[3], &[250], &[], &[7])),
        (
            vec![2, 3, 7, 17],
            slice(&[1, 0], &[3, 7], &[1, -2], &[1, 2]),
        ),
        (
            vec![2, 3, 7, 17],
            slice(&[-2, 16], &[-100, 0], &[-2, -1], &[-1, -2]),
        ),
        (vec![1, 3, 7], slice(&[0], &[1], &[1], &[1])),
        (vec![3, 7], slice(&[5], &[2], &[1], &[1])),
        (vec![17], slice(&[0], &[17], &[0], &[i64::MAX])),
        (vec![17], slice(&[16], &[i64::MIN], &[0], &[i64::MIN])),
        (vec![3, 17], slice(&[-100], &[100], &[0], &[1])),
        (vec![0, 7], slice(&[-1], &[i64::MIN], &[0], &[-1])),
    ];
    for dt in TYPES {
        for (dims, op) in &cases {
            let x = typed(&mut rng, dims, dt);
            exact(&format!("{dt} {dims:?} {op:?}"), op, &[&x], &[&[false]]);
        }
    }
    // Threaded: the second half of [2,128,768] along the last axis, and a reversed axis.
    for dt in [DataType::F32, DataType::U8, DataType::I64] {
        let x = typed(&mut rng, &[2, 128, 768], dt);
        exact(
            "halves",
            &slice(&[384], &[768], &[-1], &[1]),
            &[&x],
            &[&[false]],
        );
        let op = slice(&[-1, 1], &[i64::MIN, 767], &[1, 2], &[-1, 3]);
        exact("reversed", &op, &[&x], &[&[false]]);
    }
}

#[test]
fn gather_runtime_and_constant_indices() {
    let mut rng = Rng(12);
    let both: &[&[bool]] = &[&[false, false], &[false, true]];
    for dt in TYPES {
        let x = typed(&mut rng, &[17, 7, 3], dt);
        let i32s = Tensor::from_vec(vec![7], vec![0i32, 16, -1, -17, 3, 3, 8]).unwrap();
        let i64s = Tensor::from_vec(vec![2, 3], vec![-3i64, 0, 6, 1, -7, 2]).unwrap();
        exact(
            &format!("{dt} axis 0"),
            &Op::Gather { axis: 0 },
            &[&x, &i32s],
            both,
        );
        exact(
            &format!("{dt} axis 1"),
            &Op::Gather { axis: -2 },
            &[&x, &i64s],
            both,
        );
        let small = Tensor::from_vec(vec![3], vec![2i64, -3, 0]).unwrap();
        exact(
            &format!("{dt} axis -1"),
            &Op::Gather { axis: -1 },
            &[&x, &small],
            both,
        );
        let scalar = Tensor::scalar(-2i64);
        exact(
            &format!("{dt} scalar"),
            &Op::Gather { axis: 1 },
            &[&x, &scalar],
            both,
        );
        let none = Tensor::from_vec(vec![0], Vec::<i32>::new()).unwrap();
        exact(
            &format!("{dt} empty"),
            &Op::Gather { axis: 0 },
            &[&x, &none],
            both,
        );
    }
    // Threaded: 1500 rows of a [3000, 63] table; 128 rows of a [30522, 128] one.
    let table = rng.tensor(&[3000, 63], 1.0);
    let idx: Vec<i64> = (0..1500).map(|_| rng.next() as i64 % 6000 - 3000).collect();
    let idx = Tensor::from_vec(vec![1500], idx).unwrap();
    exact("large", &Op::Gather { axis: 0 }, &[&table, &idx], both);
    let emb = rng.tensor(&[30522, 128], 1.0);
    let ids: Vec<i32> = (0..128).map(|_| (rng.next() % 30522) as i32).collect();
    let ids = Tensor::from_vec(vec![1, 128], ids).unwrap();
    exact("embedding", &Op::Gather { axis: 0 }, &[&emb, &ids], both);
}

#[test]
fn gather_out_of_range_is_an_error_and_writes_nothing() {
    let x = Rng(13).tensor(&[5, 3], 1.0);
    for bad in [5i64, -6, i64::MAX, i64::MIN] {
        let idx = Tensor::from_vec(vec![3], vec![0, 1, bad]).unwrap();
        let op = Op::Gather { axis: 0 };
        for constant in [false, true] {
            let mut d = desc(&op, &[&x, &idx]);
            if constant {
                d.constants[1] = Some(Arc::new(idx.clone()));
            }
            for threads in [1, 2] {
                let backend = CpuAccBackend::with_threads(threads);
                assert!(backend
                    .layer_support()
                    .is_layer_supported(&d)
                    .is_supported());
                let w = backend
                    .create_workload_factory(None)
                    .unwrap()
                    .create_workload(&d)
                    .unwrap();
                let mut y = Tensor::zeros(d.outputs[0].clone()).unwrap();
                y.bytes_mut().fill(0xff);
                let r = w.execute(&[x.view(), idx.view()], &mut [y.view_mut()]);
                let err = r.expect_err("an out-of-range index must fail");
                assert!(err.to_string().contains("out of range"), "{err}");
                assert!(y.bytes().iter().all(|&b| b == 0xff), "{bad}: written");
            }
        }
    }
}

#[test]
fn where_broadcasts_every_type() {
    let mut rng = Rng(14);
    let shapes: [[&[usize]; 3]; 7] = [
        [&[63], &[63], &[63]],
        [&[1, 7], &[3, 1], &[3, 7]],
        [&[17], &[], &[3, 17]],
        [&[3, 1, 7], &[1, 17, 7], &[17, 1]],
        [&[], &[7], &[1]],
        [&[2, 3, 1, 1], &[1, 3, 5, 1], &[1, 1, 1, 17]],
        [&[0, 3], &[1, 3], &[3]],
    ];
    for dt in TYPES {
        for [c, x, y] in shapes {
            let cond = typed(&mut rng, c, DataType::Bool);
            let (a, b) = (typed(&mut rng, x, dt), typed(&mut rng, y, dt));
            exact(
                &format!("{dt} {c:?} {x:?} {y:?}"),
                &Op::Where,
                &[&cond, &a, &b],
                &[&[false; 3]],
            );
        }
    }
    // Threaded, with and without broadcasting.
    for dt in [DataType::F32, DataType::I64, DataType::U8] {
        let cond = typed(&mut rng, &[300, 257], DataType::Bool);
        let (a, b) = (
            typed(&mut rng, &[300, 257], dt),
            typed(&mut rng, &[300, 257], dt),
        );
        exact("large equal", &Op::Where, &[&cond, &a, &b], &[&[false; 3]]);
        let (a, b) = (typed(&mut rng, &[257], dt), typed(&mut rng, &[300, 1], dt));
        exact(
            "large broadcast",
            &Op::Where,
            &[&cond, &a, &b],
            &[&[false; 3]],
        );
    }
    // The forms exporters write, on rows long enough to be cut and threaded: a constant
    // on one side (attention masks, NaN guards), constants on both, one condition for all;
    // 65,537 (a prime) cannot be cut and stays one row.
    for dt in [DataType::F32, DataType::U8, DataType::F16, DataType::I64] {
        for full in [&[1, 12, 64, 97][..], &[65_537]] {
            let cond = typed(&mut rng, full, DataType::Bool);
            let (xf, yf) = (typed(&mut rng, full, dt), typed(&mut rng, full, dt));
            let (x1, y1) = (typed(&mut rng, &[], dt), typed(&mut rng, &[1], dt));
            let one = typed(&mut rng, &[1], DataType::Bool);
            let forms: [(&str, [&Tensor; 3]); 6] = [
                ("x constant", [&cond, &x1, &yf]),
                ("y constant", [&cond, &xf, &y1]),
                ("both constant", [&cond, &x1, &y1]),
                ("one condition", [&one, &xf, &yf]),
                ("one condition, y constant", [&one, &xf, &y1]),
                ("all full", [&cond, &xf, &yf]),
            ];
            for (what, inputs) in forms {
                exact(
                    &format!("{dt} {full:?} {what}"),
                    &Op::Where,
                    &inputs,
                    &[&[false; 3]],
                );
            }
        }
    }
    // Any nonzero condition byte selects X, as in CpuRef.
    let cond =
        Tensor::from_bytes(TensorInfo::new(DataType::Bool, vec![4]), &[0, 1, 2, 255]).unwrap();
    let (a, b) = (rng.tensor(&[4], 1.0), rng.tensor(&[4], 1.0));
    exact(
        "condition bytes",
        &Op::Where,
        &[&cond, &a, &b],
        &[&[false; 3]],
    );
}

#[test]
fn expand_and_tile() {
    let mut rng = Rng(15);
    let expands: [(&[usize], &[usize]); 6] = [
        (&[3, 1], &[2, 3, 7]),
        (&[1], &[17]),
        (&[7], &[3, 1, 7]),
        (&[], &[5, 3]),
        (&[2, 1, 3, 1], &[2, 63, 3, 17]),
        (&[1, 1, 0], &[3, 1, 0]),
    ];
    let tiles: [(&[usize], &[usize]); 6] = [
        (&[3, 7], &[2, 3]),
        (&[1, 17], &[63, 1]),
        (&[2, 1, 3], &[1, 7, 1]),
        (&[3, 7], &[0, 2]),
        (&[257], &[3]),
        (&[2, 3, 1], &[3, 1, 17]),
    ];
    for dt in TYPES {
        for (from, to) in expands {
            let x = typed(&mut rng, from, dt);
            let op = Op::Expand { shape: to.to_vec() };
            exact(
                &format!("{dt} expand {from:?} {to:?}"),
                &op,
                &[&x],
                &[&[false]],
            );
        }
        for (dims, repeats) in tiles {
            let x = typed(&mut rng, dims, dt);
            let op = Op::Tile {
                repeats: repeats.to_vec(),
            };
            exact(
                &format!("{dt} tile {dims:?} {repeats:?}"),
                &op,
                &[&x],
                &[&[false]],
            );
        }
    }
    // Threaded.
    for dt in [DataType::F32, DataType::U8] {
        let x = typed(&mut rng, &[1, 768], dt);
        exact(
            "expand rows",
            &Op::Expand {
                shape: vec![128, 768],
            },
            &[&x],
            &[&[false]],
        );
        let x = typed(&mut rng, &[128, 1], dt);
        exact(
            "expand columns",
            &Op::Expand {
                shape: vec![128, 768],
            },
            &[&x],
            &[&[false]],
        );
        // One long row (a broadcast scalar; a whole contiguous slice): cut into rows the
        // threads share; a prime length stays one row.
        for n in [100_000, 65_537] {
            let x = typed(&mut rng, &[1], dt);
            exact(
                &format!("expand a scalar to {n}"),
                &Op::Expand { shape: vec![n] },
                &[&x],
                &[&[false]],
            );
            let x = typed(&mut rng, &[n + 9], dt);
            exact(
                &format!("slice {n} of {}", n + 9),
                &slice(&[4], &[4 + n as i64], &[0], &[1]),
                &[&x],
                &[&[false]],
            );
        }
        let x = typed(&mut rng, &[7, 63], dt);
        exact(
            "tile",
            &Op::Tile {
                repeats: vec![17, 63],
            },
            &[&x],
            &[&[false]],
        );
    }
}

fn pad(mode: PadMode, pads: &[i64], value: f64) -> Op {
    Op::Pad(PadDesc {
        mode,
        pads: pads.to_vec(),
        value,
    })
}

#[test]
fn pad_every_mode() {
    let mut rng = Rng(16);
    let cases: [(&[usize], &[i64]); 9] = [
        (&[7], &[3, 2]),
        (&[3, 7], &[1, 0, 2, 5]),
        (&[3, 7], &[0, 6, 0, 6]),
        (&[3, 7], &[-1, 2, 1, -3]),
        (&[2, 3, 5, 7], &[0, 0, 1, 1, 0, 0, 1, 1]),
        (&[2, 3, 5, 7], &[0, 1, 0, 0, 0, 2, 0, 0]),
        (&[2, 3, 5, 7], &[0, 0, 0, 0, 0, 0, 0, 0]),
        (&[1, 17], &[0, 0, 0, 0]),
        (&[3, 1], &[2, 0, 0, 0]),
    ];
    for dt in TYPES {
        for mode in [
            PadMode::Constant,
            PadMode::Edge,
            PadMode::Reflect,
            PadMode::Wrap,
        ] {
            for (dims, pads) in cases {
                let x = typed(&mut rng, dims, dt);
                let op = pad(mode, pads, 2.5);
                if op.infer(&[x.info()]).is_err() {
                    continue; // e.g. reflect pads as large as the axis
                }
                exact(
                    &format!("{dt} {mode:?} {dims:?} {pads:?}"),
                    &op,
                    &[&x],
                    &[&[false]],
                );
            }
        }
    }
    // Wrap and edge further than the axis; constant pads of an empty axis; odd fill values.
    let x = typed(&mut rng, &[3, 7], DataType::F32);
    exact(
        "wrap far",
        &pad(PadMode::Wrap, &[4, 9, 5, 17], 0.0),
        &[&x],
        &[&[false]],
    );
    exact(
        "edge far",
        &pad(PadMode::Edge, &[4, 9, 5, 17], 0.0),
        &[&x],
        &[&[false]],
    );
    let e = typed(&mut rng, &[0, 3], DataType::I64);
    exact(
        "empty",
        &pad(PadMode::Constant, &[1, 0, 1, 1], -7.9),
        &[&e],
        &[&[false]],
    );
    for (dt, v) in [
        (DataType::U8, -3.0),
        (DataType::I8, 1e9),
        (DataType::F16, 1e6),
        (DataType::Bool, 0.5),
        (DataType::F32, f64::NAN),
    ] {
        let x = typed(&mut rng, &[3, 3], dt);
        exact(
            &format!("{dt} fill {v}"),
            &pad(PadMode::Constant, &[1, 1, 1, 1], v),
            &[&x],
            &[&[false]],
        );
    }
    // Threaded: [1,16,64,64] by one pixel each side, reflect and constant; channels only.
    for mode in [PadMode::Constant, PadMode::Reflect] {
        let x = typed(&mut rng, &[1, 16, 64, 64], DataType::F32);
        exact(
            "large",
            &pad(mode, &[0, 0, 1, 1, 0, 0, 1, 1], 0.0),
            &[&x],
            &[&[false]],
        );
        exact(
            "channels",
            &pad(mode, &[0, 2, 0, 0, 0, 3, 0, 0], 0.0),
            &[&x],
            &[&[false]],
        );
    }
}

#[test]
fn split_along_every_axis() {
    let mut rng = Rng(17);
    for dt in TYPES {
        let x = typed(&mut rng, &[3, 17, 7], dt);
        for (axis, splits) in [
            (1, vec![1, 5, 11]),
            (-1, vec![3, 0, 4]),
            (0, vec![1, 1, 1]),
            (-3, vec![3]),
        ] {
            let op = Op::Split { axis, splits };
            exact(&format!("{dt} {op:?}"), &op, &[&x], &[&[false]]);
        }
    }
    let x = typed(&mut rng, &[257, 2, 257], DataType::F32);
    let op = Op::Split {
        axis: 1,
        splits: vec![1, 1],
    };
    exact("large", &op, &[&x], &[&[false]]);
}

/// The types CpuAcc casts between.
const CAST_TYPES: [DataType; 8] = [
    DataType::F32,
    DataType::F64,
    DataType::F16,
    DataType::I64,
    DataType::I32,
    DataType::I8,
    DataType::U8,
    DataType::Bool,
];

/// Values that probe rounding, saturation, wrap-around, NaN and infinities.
fn awkward() -> Vec<f64> {
    vec![
        0.0,
        -0.0,
        0.5,
        -0.5,
        1.5,
        2.5,
        -2.5,
        2.7,
        -2.7,
        127.5,
        128.0,
        -129.0,
        255.5,
        256.0,
        300.0,
        -1.0,
        2049.0,
        2051.0,
        65504.0,
        65519.0,
        65520.0,
        1e-8,
        6e-8,
        0.1,
        16_777_217.0,
        2_147_483_648.0,
        -2_147_483_649.0,
        1e10,
        -1e10,
        9.3e18,
        -9.3e18,
        1e300,
        f64::MIN_POSITIVE,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        -f64::NAN,
    ]
}

#[test]
fn cast_between_common_types() {
    let mut rng = Rng(18);
    let src = Tensor::from_vec(vec![awkward().len()], awkward()).unwrap();
    let extremes = Tensor::from_vec(
        vec![9],
        vec![
            i64::MAX,
            i64::MIN,
            (1 << 53) + 1,
            (1 << 24) + 1,
            300,
            -1,
            128,
            -129,
            65520,
        ],
    )
    .unwrap();
    let random = rng.tensor(&[17, 63], 1e4);
    let bits: Vec<f16> = (0..=u16::MAX).map(f16::from_bits).collect();
    let every_f16 = Tensor::from_vec(vec![65536], bits).unwrap();
    for from in CAST_TYPES {
        for base in [&src, &extremes, &random, &every_f16] {
            let x = if base.info().dtype == from {
                base.clone()
            } else {
                reference(
                    &Op::Cast {
                        to: from,
                        saturate: true,
                    },
                    &[base],
                )
                .remove(0)
            };
            for to in CAST_TYPES {
                let op = Op::Cast { to, saturate: true };
                exact(
                    &format!("{from} -> {to} of {:?}", base.info()),
                    &op,
                    &[&x],
                    &[&[false]],
                );
            }
        }
    }
    // Threaded (and not a multiple of the block alignment).
    let x = rng.tensor(&[100_003], 1e5);
    for to in CAST_TYPES {
        exact(
            &format!("large -> {to}"),
            &Op::Cast { to, saturate: true },
            &[&x],
            &[&[false]],
        );
    }
}

#[test]
fn refusals_come_with_a_reason() {
    let backend = CpuAccBackend::new();
    let f = Rng(19).tensor(&[2, 3], 1.0);
    let i4 = reference(
        &Op::Cast {
            to: DataType::I4,
            saturate: true,
        },
        &[&f],
    )
    .remove(0);
    let bf16 = reference(
        &Op::Cast {
            to: DataType::BF16,
            saturate: true,
        },
        &[&f],
    )
    .remove(0);
    let cond = Tensor::from_bools(vec![2, 3], &[true, false, true, true, false, false]).unwrap();
    let cases: Vec<(Op, Vec<&Tensor>, &str)> = vec![
        (
            Op::Cast {
                to: DataType::BF16,
                saturate: true,
            },
            vec![&f],
            "casts between",
        ),
        (
            Op::Cast {
                to: DataType::F32,
                saturate: true,
            },
            vec![&i4],
            "casts between",
        ),
        (
            Op::Cast {
                to: DataType::F8E4M3Fn,
                saturate: false,
            },
            vec![&f],
            "casts between",
        ),
        (slice(&[0], &[1], &[0], &[1]), vec![&i4], "whole-byte"),
        (
            Op::Tile {
                repeats: vec![1, 2],
            },
            vec![&i4],
            "whole-byte",
        ),
        (Op::Where, vec![&cond, &bf16, &bf16], "ordinary"),
    ];
    for (op, inputs, why) in cases {
        let d = desc(&op, &inputs);
        match backend.layer_support().is_layer_supported(&d) {
            Support::Unsupported(reason) => assert!(reason.contains(why), "{op:?}: {reason}"),
            other => panic!("{op:?}: {other:?}"),
        }
        let factory = backend.create_workload_factory(None).unwrap();
        assert!(factory.create_workload(&d).is_err(), "{op:?}");
    }
}

#[test]
fn mismatched_buffers_are_errors_not_panics() {
    let x = Rng(20).tensor(&[3, 7], 1.0);
    let ops = [
        slice(&[1], &[3], &[0], &[1]),
        Op::Expand {
            shape: vec![2, 3, 7],
        },
        Op::Tile {
            repeats: vec![2, 1],
        },
        pad(PadMode::Reflect, &[1, 1, 1, 1], 0.0),
        Op::Split {
            axis: 1,
            splits: vec![3, 4],
        },
        Op::Cast {
            to: DataType::I64,
            saturate: true,
        },
    ];
    let short = Tensor::from_vec(vec![20], vec![0f32; 20]).unwrap();
    for op in ops {
        let d = desc(&op, &[&x]);
        let w = CpuAccBackend::with_threads(1)
            .create_workload_factory(None)
            .unwrap()
            .create_workload(&d)
            .unwrap();
        let mut outs: Vec<Tensor> = d
            .outputs
            .iter()
            .map(|i| Tensor::zeros(i.clone()).unwrap())
            .collect();
        let mut views: Vec<_> = outs.iter_mut().map(Tensor::view_mut).collect();
        assert!(w.execute(&[short.view()], &mut views).is_err(), "{op:?}");
        assert!(w.execute(&[], &mut views).is_err(), "{op:?}");
    }
}
