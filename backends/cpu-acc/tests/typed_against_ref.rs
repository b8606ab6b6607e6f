//! CpuAcc's typed elementwise ops against CpuRef, byte for byte: comparisons and logical
//! operators (bool results), IsNaN/IsInf/Not, integer arithmetic, and Pow's short forms of
//! constant exponents; every type they take, odd and broadcast shapes, special values, one
//! and two threads, constant and run-time operands.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use backplane_backend_api::{Backend, LayerDesc, Support};
use backplane_core::ops::{BinaryExtOp, BinaryOp, MathOp};
use backplane_core::{DataType, Op, Tensor, TensorInfo};
use backplane_cpu_acc::CpuAccBackend;
use support::{acc, reference, Rng};

/// Shapes that broadcast, odd sizes and a large one (parallel on two threads).
const SHAPES: [(&[usize], &[usize]); 7] = [
    (&[1], &[1]),
    (&[7], &[1]),
    (&[3, 5], &[5]),
    (&[2, 1, 13], &[3, 1]),
    (&[1, 31], &[17, 1]),
    (&[4, 3, 1, 1], &[1, 3, 5, 7]),
    (&[3, 300, 97], &[300, 97]),
];

/// A tensor of `dt` from values that make comparisons interesting: repeats (so Equal is
/// often true), signs, and for floats ±0, ±inf and NaN.
fn values(r: &mut Rng, dt: DataType, dims: &[usize]) -> Tensor {
    let n: usize = dims.iter().product();
    let special = [0.0, -0.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY];
    let v: Vec<f64> = (0..n)
        .map(|_| {
            let k = r.next() % 16;
            if dt.is_float() && k == 0 {
                special[(r.next() % 5) as usize]
            } else if dt.is_float() && k == 1 {
                f64::from(r.unit()) * 1e3
            } else if dt == DataType::Bool {
                (k % 2) as f64
            } else {
                // Small integers: equal often; unsigned types take them modulo their range.
                (r.next() % 7) as f64
                    - if DataType::SIGNED.contains(&dt) {
                        3.0
                    } else {
                        0.0
                    }
            }
        })
        .collect();
    Tensor::from_f64_values(TensorInfo::new(dt, dims.to_vec()), &v).unwrap()
}

/// `op` on CpuAcc (1 and 2 threads; b run-time and constant) has CpuRef's bytes.
fn same_bytes(what: &str, op: &Op, inputs: &[&Tensor]) {
    let want = reference(op, inputs);
    for threads in [1, 2] {
        for constant in [&[false, false][..], &[false, true]] {
            let got = acc(op, inputs, &constant[..inputs.len()], threads);
            for (g, w) in got.iter().zip(&want) {
                assert_eq!(g.info(), w.info(), "{what}");
                assert!(
                    g.bytes() == w.bytes(),
                    "{what} threads={threads} const={constant:?}: {:?} vs CpuRef {:?}",
                    g.to_f64_vec(),
                    w.to_f64_vec()
                );
            }
        }
    }
}

/// The claimed types of comparisons.
const ORDERED: [DataType; 10] = [
    DataType::F32,
    DataType::F64,
    DataType::F16,
    DataType::I8,
    DataType::U8,
    DataType::I16,
    DataType::U16,
    DataType::I32,
    DataType::U32,
    DataType::I64,
];

#[test]
fn comparisons_match_cpu_ref_on_every_type_and_shape() {
    let mut r = Rng(11);
    let ops = [
        BinaryExtOp::Equal,
        BinaryExtOp::Less,
        BinaryExtOp::LessOrEqual,
        BinaryExtOp::Greater,
        BinaryExtOp::GreaterOrEqual,
    ];
    for dt in ORDERED {
        for (ad, bd) in SHAPES {
            let (a, b) = (values(&mut r, dt, ad), values(&mut r, dt, bd));
            for op in ops {
                let what = format!("{op:?} {dt} {ad:?} {bd:?}");
                same_bytes(&what, &Op::BinaryExt(op), &[&a, &b]);
                same_bytes(&what, &Op::BinaryExt(op), &[&b, &a]);
            }
        }
    }
}

#[test]
fn logical_ops_and_bool_equal_match_cpu_ref() {
    let mut r = Rng(12);
    for (ad, bd) in SHAPES {
        let (a, b) = (
            values(&mut r, DataType::Bool, ad),
            values(&mut r, DataType::Bool, bd),
        );
        for op in [
            BinaryExtOp::And,
            BinaryExtOp::Or,
            BinaryExtOp::Xor,
            BinaryExtOp::Equal,
        ] {
            same_bytes(
                &format!("{op:?} {ad:?} {bd:?}"),
                &Op::BinaryExt(op),
                &[&a, &b],
            );
        }
        same_bytes(&format!("Not {ad:?}"), &Op::Math(MathOp::Not), &[&a]);
    }
}

#[test]
fn float_classification_matches_cpu_ref() {
    let mut r = Rng(13);
    let ops = [
        MathOp::IsNaN,
        MathOp::IsInf {
            detect_negative: true,
            detect_positive: true,
        },
        MathOp::IsInf {
            detect_negative: false,
            detect_positive: true,
        },
        MathOp::IsInf {
            detect_negative: true,
            detect_positive: false,
        },
    ];
    for dt in [DataType::F32, DataType::F64, DataType::F16] {
        for dims in [&[1][..], &[17], &[3, 300, 97]] {
            let x = values(&mut r, dt, dims);
            let got_some = reference(&Op::Math(MathOp::IsNaN), &[&x])[0]
                .bytes()
                .contains(&1);
            assert!(got_some || dims.len() < 3, "the large inputs hold NaNs");
            for m in ops {
                same_bytes(&format!("{m:?} {dt} {dims:?}"), &Op::Math(m), &[&x]);
            }
        }
    }
}

#[test]
fn integer_arithmetic_wraps_and_truncates_like_cpu_ref() {
    let mut r = Rng(14);
    let types = [
        DataType::I8,
        DataType::U8,
        DataType::I16,
        DataType::U16,
        DataType::I32,
        DataType::U32,
        DataType::I64,
        DataType::U64,
    ];
    for dt in types {
        for (ad, bd) in SHAPES {
            let n: usize = ad.iter().product();
            let m: usize = bd.iter().product();
            // Wide values, so products and sums wrap; divisors never zero.
            let big = |r: &mut Rng, n: usize, nonzero: bool| -> Vec<f64> {
                (0..n)
                    .map(|_| {
                        let v = (r.next() % 200_001) as f64
                            - if DataType::SIGNED.contains(&dt) {
                                100_000.0
                            } else {
                                0.0
                            };
                        if nonzero && v == 0.0 {
                            3.0
                        } else {
                            v
                        }
                    })
                    .collect()
            };
            let info = |d: &[usize]| TensorInfo::new(dt, d.to_vec());
            let a = Tensor::from_f64_values(info(ad), &big(&mut r, n, false)).unwrap();
            let b = Tensor::from_f64_values(info(bd), &big(&mut r, m, true)).unwrap();
            // Narrow types saturate the conversion above; cast-free wrap comes from the ops.
            for op in [
                BinaryOp::Add,
                BinaryOp::Sub,
                BinaryOp::Mul,
                BinaryOp::Div,
                BinaryOp::Max,
                BinaryOp::Min,
            ] {
                if op == BinaryOp::Div && b.to_f64_vec().contains(&0.0) {
                    continue;
                }
                same_bytes(
                    &format!("{op:?} {dt} {ad:?} {bd:?}"),
                    &Op::Binary(op),
                    &[&a, &b],
                );
            }
        }
    }
    // MIN / -1 wraps to MIN, as CpuRef's.
    let a = Tensor::from_vec(vec![3], vec![i32::MIN, -7, 7]).unwrap();
    let b = Tensor::from_vec(vec![3], vec![-1i32, 2, -2]).unwrap();
    same_bytes("Div MIN/-1", &Op::Binary(BinaryOp::Div), &[&a, &b]);
}

#[test]
fn integer_division_by_zero_is_an_error_naming_the_layer() {
    let a = Tensor::from_vec(vec![3], vec![1i64, 2, 3]).unwrap();
    let b = Tensor::from_vec(vec![3], vec![1i64, 0, 3]).unwrap();
    let op = Op::Binary(BinaryOp::Div);
    let infos = vec![a.info().clone(), b.info().clone()];
    let refs: Vec<&TensorInfo> = infos.iter().collect();
    let desc = LayerDesc {
        name: "under_test".into(),
        outputs: op.infer(&refs).unwrap(),
        inputs: infos,
        op,
        constants: vec![None, None],
    };
    let backend = CpuAccBackend::with_threads(1);
    assert!(backend
        .layer_support()
        .is_layer_supported(&desc)
        .is_supported());
    let workload = backend
        .create_workload_factory(None)
        .unwrap()
        .create_workload(&desc)
        .unwrap();
    let mut y = Tensor::zeros(desc.outputs[0].clone()).unwrap();
    let err = workload
        .execute(&[a.view(), b.view()], &mut [y.view_mut()])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("under_test") && err.contains("division by zero"),
        "{err}"
    );
}

/// Bases that find the edges of each short form.
fn bases(r: &mut Rng) -> Tensor {
    let mut v = vec![
        0.0,
        -0.0,
        1.0,
        -1.0,
        2.5,
        -2.5,
        1e-20,
        -1e-20,
        1e-40,
        3e10,
        -3e10,
        1e13,
        f32::MAX,
        f32::MIN_POSITIVE,
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
    ];
    v.extend((0..3000).map(|_| r.unit() * 8.0));
    Tensor::from_vec(vec![v.len()], v).unwrap()
}

#[test]
fn pow_short_forms_have_cpu_refs_bits() {
    let mut r = Rng(15);
    let x = bases(&mut r);
    for e in [0.0f64, 1.0, 2.0, 3.0, 4.0, -1.0, -2.0, 0.5, 1.5, -0.5, 7.0] {
        // Exponents of each type CpuAcc reads, constant (short forms) and not (general).
        let exps = [
            Tensor::from_vec(vec![1], vec![e as f32]).unwrap(),
            Tensor::from_vec(vec![], vec![e]).unwrap(),
            Tensor::from_vec(
                vec![x.shape().dims()[0]],
                vec![e as f32; x.shape().dims()[0]],
            )
            .unwrap(),
        ];
        for ex in &exps {
            same_bytes(
                &format!("Pow by {e} ({})", ex.info()),
                &Op::Binary(BinaryOp::Pow),
                &[&x, ex],
            );
        }
        if e.fract() == 0.0 {
            let ei = Tensor::from_vec(vec![1], vec![e as i64]).unwrap();
            same_bytes(
                &format!("Pow by {e} (i64)"),
                &Op::Binary(BinaryOp::Pow),
                &[&x, &ei],
            );
        }
    }
    // A constant exponent that broadcasts the base to a larger output takes the general path.
    let small = Tensor::from_vec(vec![3], vec![-1.5f32, 0.0, 2.0]).unwrap();
    let e = Tensor::from_vec(vec![2, 3], vec![3.0f32; 6]).unwrap();
    same_bytes("Pow broadcast", &Op::Binary(BinaryOp::Pow), &[&small, &e]);
}

#[test]
fn refused_typed_ops_say_why() {
    let backend = CpuAccBackend::new();
    let refused = |op: Op, inputs: Vec<TensorInfo>| {
        let refs: Vec<&TensorInfo> = inputs.iter().collect();
        let d = LayerDesc {
            name: "under_test".into(),
            outputs: op.infer(&refs).unwrap(),
            constants: vec![None; inputs.len()],
            inputs,
            op: op.clone(),
        };
        match backend.layer_support().is_layer_supported(&d) {
            Support::Unsupported(reason) => assert!(reason.contains("CpuAcc"), "{reason}"),
            other => panic!("{op:?}: {other:?}"),
        }
    };
    let u64s = TensorInfo::new(DataType::U64, vec![4]);
    refused(
        Op::BinaryExt(BinaryExtOp::Less),
        vec![u64s.clone(), u64s.clone()],
    );
    refused(Op::Math(MathOp::BitwiseNot), vec![u64s.clone()]);
    refused(Op::Binary(BinaryOp::Pow), vec![u64s.clone(), u64s]);
}
