//! GpuAcc's kernels over other element types than f32 and the fusions transformers need,
//! against CpuRef on the same inputs, on GpuAcc alone (a refusal fails the case): Gather
//! (i32 and i64 indices, negative ones, any data type), Where, the comparisons and logical
//! ops, Cast between f32, i32, i64 and bool, Split, Resize (nearest on any type, linear on
//! f32) and MatMul + bias (+ activation) as one fused layer. The random cases come from the
//! backend test kit's generators, so any backend's kit run covers the same ground.
//!
//! Needs a Vulkan adapter (a software one is accepted); without one the tests print why and
//! pass, unless `BACKPLANE_REQUIRE_GPU_ADAPTER=1` (CI) makes that a failure.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use backplane::core::ops::{BinaryExtOp, BinaryOp, UnaryOp};
use backplane::core::{DataType, Op};
use backplane::Tensor;
use backplane_backend_tests::sweeps::{Rng, SweepCase, FAMILIES};
use common::{case, expect_pass, gpu, runtime, t};

/// Cases of the kit's family `name`, from seeds `0..n`, keeping those `keep` accepts.
fn family(name: &str, n: u64, keep: impl Fn(&SweepCase) -> bool) -> Vec<SweepCase> {
    let generate = FAMILIES
        .iter()
        .find(|(f, _)| *f == name)
        .map(|(_, g)| *g)
        .unwrap_or_else(|| panic!("the kit has no family {name}"));
    (0..n)
        .map(|seed| generate(&mut Rng::new(1000 + seed)).unwrap())
        .filter(|c| keep(c))
        .collect()
}

fn i64s(dims: &[usize], v: &[i64]) -> Tensor {
    Tensor::from_vec(dims.to_vec(), v.to_vec()).unwrap()
}

#[test]
fn gather_matches_cpu_ref() {
    let Some(rt) = runtime() else { return };
    let mut r = Rng::new(3);
    let mut cases = family("Gather", 24, |_| true);
    // A scalar index, negative indices, constant and run-time, size 1 and an embedding table.
    cases.push(case(
        Op::Gather { axis: 0 },
        vec![(t(&mut r, &[1]), false), (i64s(&[], &[-1]), false)],
    ));
    cases.push(case(
        Op::Gather { axis: 1 },
        vec![
            (t(&mut r, &[2, 7, 3]), false),
            (i64s(&[2, 3], &[0, -1, 6, -7, 3, 3]), true),
        ],
    ));
    cases.push(case(
        Op::Gather { axis: 0 },
        vec![
            (t(&mut r, &[1009, 64]), true),
            (
                r.tensor(DataType::I64, &[1, 257], 0.0, 1009.0).unwrap(),
                false,
            ),
        ],
    ));
    let i32_idx = Tensor::from_vec(vec![4], vec![2i32, -3, 0, 4]).unwrap();
    cases.push(case(
        Op::Gather { axis: -1 },
        vec![(t(&mut r, &[3, 5]), false), (i32_idx, false)],
    ));
    expect_pass(&rt, cases);
}

#[test]
fn a_constant_gather_index_out_of_range_is_refused() {
    use backplane_backend_tests::exec::{run_network, Run};
    use backplane_backend_tests::sweeps::network;
    let Some(rt) = runtime() else { return };
    let mut r = Rng::new(5);
    let c = case(
        Op::Gather { axis: 0 },
        vec![(t(&mut r, &[3, 2]), false), (i64s(&[1], &[3]), true)],
    );
    let (net, feed) = network(&c).unwrap();
    match run_network(&rt, &net, &[gpu()], &feed) {
        Run::Refused(why) => assert!(why.contains("outside the axis"), "{why}"),
        Run::Ran { .. } => panic!("an index past the axis should be left to the host"),
    }
}

/// A run-time index past the axis: the kernel reads zeros but sets the layer's status word,
/// and the execution fails with an error naming the Gather layer, as on CpuRef; the next
/// execution with good indices succeeds (the word is cleared per run). Checked with the
/// Gather's output read back by its own layer, and kept on the device for a later GPU layer
/// whose read-back finds it.
#[test]
fn a_run_time_gather_index_out_of_range_is_an_error_naming_the_layer() {
    use backplane::{Network, OptimizerOptions};
    let Some(rt) = runtime() else { return };
    let mut r = Rng::new(9);
    for then_relu in [false, true] {
        let data = t(&mut r, &[3, 2]);
        let mut net = Network::new();
        let d = net.add_constant("data", data).unwrap();
        let info = backplane::TensorInfo::new(DataType::I64, vec![2]);
        let idx = net.add_input("idx", info).unwrap();
        let mut out = net
            .add_layer("the_gather", Op::Gather { axis: 0 }, &[d, idx])
            .unwrap()[0];
        if then_relu {
            out = net
                .add_layer("relu", Op::Unary(UnaryOp::Relu), &[out])
                .unwrap()[0];
        }
        net.mark_output(out).unwrap();
        let optimized = rt
            .optimize(&net, &OptimizerOptions::new(vec![gpu()]))
            .unwrap();
        let id = rt.load_network(optimized).unwrap();
        let good = i64s(&[2], &[2, -3]);
        let bad = i64s(&[2], &[0, 3]);
        assert!(rt.execute(id, &[("idx", &good)]).is_ok());
        let err = rt.execute(id, &[("idx", &bad)]).unwrap_err().to_string();
        assert!(
            err.contains("the_gather") && err.contains("outside"),
            "then_relu={then_relu}: {err}"
        );
        let again = rt.execute(id, &[("idx", &good)]);
        assert!(again.is_ok(), "then_relu={then_relu}: {again:?}");
        rt.unload_network(id).unwrap();
    }
}

#[test]
fn where_comparisons_and_logical_ops_match_cpu_ref() {
    let Some(rt) = runtime() else { return };
    let mut r = Rng::new(7);
    let mut cases = family("Where", 24, |_| true);
    // The kit's comparisons on the types GpuAcc compares.
    let claimed = [
        DataType::F32,
        DataType::I32,
        DataType::I64,
        DataType::Bool,
        DataType::U8,
        DataType::U16,
    ];
    cases.extend(family("Compare", 60, |c| {
        claimed.contains(&c.inputs[0].0.dtype())
    }));
    // i64 values that differ only in the high word, and in sign.
    let big = [
        1i64 << 40,
        -(1 << 40),
        (1 << 40) + 1,
        -1,
        0,
        i64::MAX,
        i64::MIN,
    ];
    let a = i64s(&[7], &big);
    let b = i64s(&[7, 1], &big);
    for op in [
        BinaryExtOp::Equal,
        BinaryExtOp::Less,
        BinaryExtOp::LessOrEqual,
        BinaryExtOp::Greater,
        BinaryExtOp::GreaterOrEqual,
    ] {
        cases.push(case(
            Op::BinaryExt(op),
            vec![(a.clone(), false), (b.clone(), false)],
        ));
        // f32 with a size-1 and a prime broadcast.
        cases.push(case(
            Op::BinaryExt(op),
            vec![(t(&mut r, &[3, 1, 5]), false), (t(&mut r, &[1]), true)],
        ));
    }
    for op in [BinaryExtOp::And, BinaryExtOp::Or, BinaryExtOp::Xor] {
        let a = r.tensor(DataType::Bool, &[2, 3, 1], 0.0, 2.0).unwrap();
        let b = r.tensor(DataType::Bool, &[13], 0.0, 2.0).unwrap();
        cases.push(case(Op::BinaryExt(op), vec![(a, false), (b, false)]));
    }
    let cond = r.tensor(DataType::Bool, &[1000, 3], 0.0, 2.0).unwrap();
    cases.push(case(
        Op::Where,
        vec![
            (cond, false),
            (t(&mut r, &[1000, 3]), false),
            (t(&mut r, &[3]), true),
        ],
    ));
    expect_pass(&rt, cases);
}

#[test]
fn casts_split_and_resize_match_cpu_ref() {
    let Some(rt) = runtime() else { return };
    let mut r = Rng::new(11);
    let mut cases = family("Cast", 40, |_| true);
    cases.extend(family("Split", 16, |_| true));
    cases.extend(family("Resize", 24, |_| true));
    // Every pair of the four types on one tensor each way.
    let types = [DataType::F32, DataType::I32, DataType::I64, DataType::Bool];
    for from in types {
        for to in types {
            if from != to {
                let x = r.tensor(from, &[2, 17], -40.0, 40.0).unwrap();
                cases.push(case(Op::Cast { to, saturate: true }, vec![(x, false)]));
            }
        }
    }
    let x = t(&mut r, &[1, 1]);
    cases.push(case(
        Op::Split {
            axis: 0,
            splits: vec![1],
        },
        vec![(x, false)],
    ));
    expect_pass(&rt, cases);
}

#[test]
fn expand_tile_and_predicates_on_other_types_match_cpu_ref() {
    let Some(rt) = runtime() else { return };
    let mut r = Rng::new(17);
    // IsNaN, IsInf and Not from the kit, on the types GpuAcc takes (f32, bool).
    let mut cases = family("Predicate", 40, |c| {
        matches!(c.inputs[0].0.dtype(), DataType::F32 | DataType::Bool)
    });
    for dtype in [DataType::I64, DataType::Bool, DataType::F16, DataType::I32] {
        let x = r.tensor(dtype, &[3, 1, 7], 0.0, 2.0).unwrap();
        cases.push(case(
            Op::Expand {
                shape: vec![2, 3, 5, 7],
            },
            vec![(x, false)],
        ));
        let x = r.tensor(dtype, &[2, 5], 0.0, 2.0).unwrap();
        cases.push(case(
            Op::Tile {
                repeats: vec![3, 2],
            },
            vec![(x, false)],
        ));
    }
    let x = r.tensor(DataType::Bool, &[1], 0.0, 2.0).unwrap();
    cases.push(case(Op::Expand { shape: vec![1] }, vec![(x, false)]));
    expect_pass(&rt, cases);
}

/// MatMul + Add(bias) and MatMul + Add(bias) + activation each run as one GpuAcc layer
/// matching CpuRef's layers, with the bias on either side of the Add.
#[test]
fn matmul_bias_fuses_and_matches_cpu_ref() {
    use backplane::compare::compare;
    use backplane_backend_tests::exec::{run_network, Run};
    let Some(rt) = runtime() else { return };
    let mut r = Rng::new(13);
    for (a_dims, b_dims, bias_dims, bias_first, act) in [
        (vec![3, 17], vec![17, 5], vec![5], false, None),
        (
            vec![2, 40, 16],
            vec![16, 65],
            vec![65],
            false,
            Some(UnaryOp::Relu),
        ),
        (vec![2, 7, 16], vec![16, 33], vec![1, 33], true, None),
        (vec![1, 1], vec![1, 1], vec![1], false, Some(UnaryOp::Relu)),
        (
            vec![2, 3, 5, 7],
            vec![7, 11],
            vec![1, 1, 11],
            true,
            Some(UnaryOp::Gelu {
                tanh_approximation: false,
            }),
        ),
    ] {
        let x = t(&mut r, &a_dims);
        let w = t(&mut r, &b_dims);
        let bias = t(&mut r, &bias_dims);
        let mut net = backplane::Network::new();
        let xi = net.add_input("x", x.info().clone()).unwrap();
        let wi = net.add_constant("w", w.clone()).unwrap();
        let bi = net.add_constant("b", bias.clone()).unwrap();
        let m = net.add_layer("matmul", Op::MatMul, &[xi, wi]).unwrap()[0];
        let pair = if bias_first { [bi, m] } else { [m, bi] };
        let mut y = net
            .add_layer("add", Op::Binary(BinaryOp::Add), &pair)
            .unwrap()[0];
        let mid = backplane::cpu_ref::evaluate(&Op::MatMul, &[&x, &w]).unwrap();
        let (p, q) = if bias_first {
            (&bias, &mid[0])
        } else {
            (&mid[0], &bias)
        };
        let mut want = backplane::cpu_ref::evaluate(&Op::Binary(BinaryOp::Add), &[p, q]).unwrap();
        if let Some(u) = act {
            y = net.add_layer("act", Op::Unary(u), &[y]).unwrap()[0];
            want = backplane::cpu_ref::evaluate(&Op::Unary(u), &[&want[0]]).unwrap();
        }
        net.mark_output(y).unwrap();
        let feed = vec![("x".to_string(), x.clone())];
        match run_network(&rt, &net, &[gpu()], &feed) {
            Run::Ran { layers, outputs } => {
                assert_eq!(
                    layers, 1,
                    "{a_dims:?} x {b_dims:?} + {bias_dims:?}: one fused layer"
                );
                let got = outputs.unwrap();
                compare(&got[0].1, &want[0], 1e-4, 1e-5).unwrap();
            }
            Run::Refused(why) => panic!("MatMul + bias refused: {why}"),
        }
    }
}
