//! Memory planning with CpuRef: sub-tensors for Concat and Split (no copy, the layer does not
//! run), planned arena bytes against the lower bound on real models, and identical results.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use backplane::core::ops::UnaryOp;
use backplane::core::Op;
use backplane::{
    BackendId, DataType, ImportOptions, Network, OptimizerOptions, Tensor, TensorInfo,
};
use support::repo;

fn cpuref() -> OptimizerOptions {
    OptimizerOptions::new(vec![BackendId::new("CpuRef").unwrap()])
}

/// a, b [2x3] -> neg each -> concat(axis 0) [4x3] -> abs -> split(axis 0, [1, 3]) -> relu each.
fn network() -> Network {
    let mut n = Network::new();
    let info = TensorInfo::new(DataType::F32, vec![2, 3]);
    let a = n.add_input("a", info.clone()).unwrap();
    let b = n.add_input("b", info).unwrap();
    let na = n.add_layer("neg_a", Op::Unary(UnaryOp::Neg), &[a]).unwrap()[0];
    let nb = n.add_layer("neg_b", Op::Unary(UnaryOp::Neg), &[b]).unwrap()[0];
    let c = n
        .add_layer("concat", Op::Concat { axis: 0 }, &[na, nb])
        .unwrap()[0];
    let m = n.add_layer("abs", Op::Unary(UnaryOp::Abs), &[c]).unwrap()[0];
    let parts = n
        .add_layer(
            "split",
            Op::Split {
                axis: 0,
                splits: vec![1, 3],
            },
            &[m],
        )
        .unwrap();
    let y0 = n
        .add_layer_named(
            "relu0",
            Op::Unary(UnaryOp::Relu),
            &[parts[0]],
            &["y0".into()],
        )
        .unwrap()[0];
    let y1 = n
        .add_layer_named(
            "relu1",
            Op::Unary(UnaryOp::Relu),
            &[parts[1]],
            &["y1".into()],
        )
        .unwrap()[0];
    // The concatenated tensor is also read directly, beside one of its parts.
    let s = n
        .add_layer_named(
            "sum",
            Op::Binary(backplane::core::ops::BinaryOp::Add),
            &[c, m],
            &["s".into()],
        )
        .unwrap()[0];
    n.mark_output(y0).unwrap();
    n.mark_output(y1).unwrap();
    n.mark_output(s).unwrap();
    n
}

#[test]
fn concat_and_split_are_sub_tensors_that_copy_nothing() {
    let rt = backplane::RuntimeBuilder::new().build().unwrap();
    let opt = rt.optimize(&network(), &cpuref()).unwrap();
    assert_eq!(
        opt.memory_plan().sub_tensor_layers,
        2,
        "concat and split placed in place"
    );
    let id = rt.load_network(opt).unwrap();
    let a = Tensor::from_vec(vec![2, 3], vec![1.0f32, -2.0, 3.0, -4.0, 5.0, -6.0]).unwrap();
    let b = Tensor::from_vec(vec![2, 3], vec![7.0f32, 8.0, -9.0, 10.0, -11.0, 12.0]).unwrap();
    let (out, timings) = rt.execute_profiled(id, &[("a", &a), ("b", &b)]).unwrap();
    let ran: Vec<&str> = timings.iter().map(|t| t.layer.as_str()).collect();
    assert!(
        !ran.contains(&"concat") && !ran.contains(&"split"),
        "{ran:?}"
    );
    assert_eq!(ran.len(), 6);
    // Values: c = [-a; -b], m = |c|, y0 = relu(m[0]), y1 = relu(m[1..4]), s = c + m.
    assert_eq!(out[0].1.as_slice::<f32>().unwrap(), &[1.0, 2.0, 3.0]);
    assert_eq!(
        out[1].1.as_slice::<f32>().unwrap(),
        &[4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0]
    );
    assert_eq!(
        out[2].1.as_slice::<f32>().unwrap(),
        &[0.0, 4.0, 0.0, 8.0, 0.0, 12.0, 0.0, 0.0, 18.0, 0.0, 22.0, 0.0]
    );
}

#[test]
fn concat_along_an_inner_axis_is_not_a_sub_tensor_but_still_correct() {
    let mut n = Network::new();
    let info = TensorInfo::new(DataType::F32, vec![2, 2]);
    let a = n.add_input("a", info.clone()).unwrap();
    let na = n.add_layer("neg", Op::Unary(UnaryOp::Neg), &[a]).unwrap()[0];
    let ab = n.add_layer("abs", Op::Unary(UnaryOp::Abs), &[a]).unwrap()[0];
    let c = n
        .add_layer_named("concat", Op::Concat { axis: 1 }, &[na, ab], &["c".into()])
        .unwrap()[0];
    n.mark_output(c).unwrap();
    let rt = backplane::RuntimeBuilder::new().build().unwrap();
    let opt = rt.optimize(&n, &cpuref()).unwrap();
    assert_eq!(opt.memory_plan().sub_tensor_layers, 0);
    let id = rt.load_network(opt).unwrap();
    let x = Tensor::from_vec(vec![2, 2], vec![1.0f32, -2.0, 3.0, -4.0]).unwrap();
    let out = rt.execute(id, &[("a", &x)]).unwrap();
    assert_eq!(
        out[0].1.as_slice::<f32>().unwrap(),
        &[-1.0, 2.0, 1.0, 2.0, -3.0, 4.0, 3.0, 4.0]
    );
}

/// Planned arena bytes against the largest live set on the shipped and e2e models: the aim
/// is at most 1.2x.
#[test]
fn planned_arena_is_close_to_the_largest_live_set() {
    let rt = backplane::RuntimeBuilder::new().build().unwrap();
    for (model, dims) in [
        ("models/digits/model.onnx", vec![("batch", 8)]),
        ("testdata/e2e/convnet.onnx", vec![]),
    ] {
        let mut options = ImportOptions::default();
        for (k, v) in dims {
            options.dim_values.insert(k.into(), v);
        }
        let net = backplane::load_onnx(&repo().join(model), &options).unwrap();
        let plan = rt.optimize(&net, &cpuref()).unwrap().memory_plan().clone();
        let ratio = plan.arena_bytes as f64 / plan.lower_bound as f64;
        println!(
            "{model}: arena {} bytes, tensors {} bytes, lower bound {} bytes, ratio {ratio:.3}",
            plan.arena_bytes, plan.tensor_bytes, plan.lower_bound
        );
        assert!(ratio <= 1.2, "{model}: {ratio}");
        assert!(plan.arena_bytes < plan.tensor_bytes);
    }
}

/// CpuRef and CpuAcc share the host factory: a network alternating between them makes no
/// copy, and its outputs match CpuRef alone.
#[test]
fn cpuref_and_cpuacc_alternating_make_zero_copies() {
    let rt = backplane::RuntimeBuilder::new().build().unwrap();
    let net = backplane::load_onnx(
        &repo().join("testdata/e2e/convnet.onnx"),
        &ImportOptions::default(),
    )
    .unwrap();
    let mut opts = OptimizerOptions::new(vec![
        BackendId::new("CpuAcc").unwrap(),
        BackendId::new("CpuRef").unwrap(),
    ]);
    // Every second layer goes to CpuRef first.
    for (i, layer) in net.layers().iter().enumerate() {
        if i % 2 == 1 {
            opts.layer_backends
                .push((layer.name.clone(), BackendId::new("CpuRef").unwrap()));
        }
    }
    let mixed = rt.optimize(&net, &opts).unwrap();
    let counts = mixed.layer_counts();
    assert!(
        counts.iter().any(|(b, _)| b.as_str() == "CpuAcc"),
        "{counts:?}"
    );
    assert!(
        counts.iter().any(|(b, _)| b.as_str() == "CpuRef"),
        "{counts:?}"
    );
    let switches = mixed
        .assignment()
        .windows(2)
        .filter(|w| w[0] != w[1])
        .count();
    assert!(
        switches >= 4,
        "the network should alternate: {:?}",
        mixed.assignment()
    );
    assert_eq!(mixed.tensor_strategy().copies, 0);
    assert_eq!(mixed.tensor_strategy().bytes_copied, 0);

    let x = backplane::npy::read_file(&repo().join("testdata/e2e/input_x.npy")).unwrap();
    let id = rt.load_network(mixed).unwrap();
    let out = rt.execute(id, &[("x", &x)]).unwrap();
    let alone = rt
        .load_network(rt.optimize(&net, &cpuref()).unwrap())
        .unwrap();
    let reference = rt.execute(alone, &[("x", &x)]).unwrap();
    for ((_, got), (_, want)) in out.iter().zip(&reference) {
        support::compare(got, want, 1e-4, 1e-5).unwrap();
    }
}

/// x [1] -> Expand to `[n]` ("huge") -> Neg -> y: a layer whose output is `4 n` bytes.
fn huge(n: usize) -> Network {
    let mut net = Network::new();
    let x = net
        .add_input("x", TensorInfo::new(DataType::F32, vec![1]))
        .unwrap();
    let big = net
        .add_layer("huge", Op::Expand { shape: vec![n] }, &[x])
        .unwrap()[0];
    let y = net
        .add_layer_named("neg", Op::Unary(UnaryOp::Neg), &[big], &["y".into()])
        .unwrap()[0];
    net.mark_output(y).unwrap();
    net
}

#[test]
fn a_network_over_the_memory_budget_is_an_optimize_and_a_load_error_naming_the_layer() {
    // 1 MiB layer outputs against a 1 MiB budget.
    let rt = backplane::RuntimeBuilder::new()
        .max_memory(1 << 20)
        .build()
        .unwrap();
    let check = |err: backplane::RuntimeError| match &err {
        backplane::RuntimeError::MemoryBudget {
            budget,
            layer,
            tensor_bytes,
            ..
        } => {
            assert_eq!(*budget, 1 << 20);
            assert_eq!(*tensor_bytes, 1 << 20);
            assert!(layer == "huge" || layer == "neg", "{layer}");
        }
        other => panic!("{other:?}"),
    };
    // Refused at optimize already.
    check(rt.optimize(&huge(1 << 18), &cpuref()).unwrap_err());
    // Optimized without a budget elsewhere, it is refused at load.
    let unbounded = backplane::RuntimeBuilder::new()
        .max_memory(usize::MAX)
        .build()
        .unwrap();
    let optimized = unbounded.optimize(&huge(1 << 18), &cpuref()).unwrap();
    assert!(optimized.working_bytes() > 1 << 20);
    check(rt.load_network(optimized).unwrap_err());
    // Within the budget it runs.
    let optimized = rt.optimize(&huge(1 << 10), &cpuref()).unwrap();
    let id = rt.load_network(optimized).unwrap();
    let x = Tensor::from_vec(vec![1], vec![2.0f32]).unwrap();
    let out = rt.execute(id, &[("x", &x)]).unwrap();
    assert_eq!(out[0].1.as_slice::<f32>().unwrap()[..2], [-2.0, -2.0]);
}

#[test]
fn a_terabyte_layer_output_is_an_error_with_the_default_budget() {
    // 4 TiB per tensor: more than any machine running the tests has available.
    let rt = backplane::RuntimeBuilder::new().build().unwrap();
    let err = rt.optimize(&huge(1 << 40), &cpuref()).unwrap_err();
    assert!(
        matches!(err, backplane::RuntimeError::MemoryBudget { .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("4398046511104 bytes"), "{err}");
}

#[test]
fn an_arena_that_cannot_be_allocated_is_an_error_not_an_abort() {
    // No budget: the 2^50-byte arena reaches the allocation, which fails as an error.
    let rt = backplane::RuntimeBuilder::new()
        .max_memory(usize::MAX)
        .build()
        .unwrap();
    let optimized = rt.optimize(&huge(1 << 48), &cpuref()).unwrap();
    let id = rt.load_network(optimized).unwrap();
    let x = Tensor::from_vec(vec![1], vec![2.0f32]).unwrap();
    let err = rt.execute(id, &[("x", &x)]).unwrap_err();
    assert!(
        matches!(err, backplane::RuntimeError::OutOfMemory { .. }),
        "{err:?}"
    );
    // The runtime keeps working.
    let optimized = rt.optimize(&huge(4), &cpuref()).unwrap();
    let id = rt.load_network(optimized).unwrap();
    assert!(rt.execute(id, &[("x", &x)]).is_ok());
}

#[test]
fn a_device_is_not_read_as_an_npy_file() {
    let zero = std::path::Path::new("/dev/zero");
    if zero.exists() {
        let err = backplane::npy::read_file(zero).unwrap_err();
        assert!(err.to_string().contains("a device"), "{err}");
    }
}

/// Reshape, Unsqueeze and a Slice of one contiguous range are views of their input's memory
/// (the layers do not run; a view of a view points at the memory's owner); a Slice across
/// rows and a Reshape that is a network output still copy. Values as computed by hand.
#[test]
fn reshapes_and_contiguous_slices_are_views_that_copy_nothing() {
    use backplane::core::ops::SliceDesc;
    let slice = |axis: i64, start: i64, end: i64| {
        Op::Slice(SliceDesc {
            starts: vec![start],
            ends: vec![end],
            axes: vec![axis],
            steps: vec![],
        })
    };
    let mut n = Network::new();
    let a = n
        .add_input("a", TensorInfo::new(DataType::F32, vec![2, 3, 4]))
        .unwrap();
    let n1 = n.add_layer("neg", Op::Unary(UnaryOp::Neg), &[a]).unwrap()[0];
    let r = n
        .add_layer("rows", Op::Reshape { shape: vec![6, 4] }, &[n1])
        .unwrap()[0];
    let s1 = n.add_layer("middle_rows", slice(0, 2, 5), &[r]).unwrap()[0];
    let y0 = n
        .add_layer_named("relu", Op::Unary(UnaryOp::Relu), &[s1], &["y0".into()])
        .unwrap()[0];
    let s2 = n.add_layer("middle_columns", slice(1, 1, 3), &[r]).unwrap()[0];
    let y1 = n
        .add_layer_named("abs", Op::Unary(UnaryOp::Abs), &[s2], &["y1".into()])
        .unwrap()[0];
    let u = n
        .add_layer("batch", Op::Unsqueeze { axes: vec![0] }, &[s1])
        .unwrap()[0];
    let y2 = n
        .add_layer_named("neg_again", Op::Unary(UnaryOp::Neg), &[u], &["y2".into()])
        .unwrap()[0];
    let flat = n
        .add_layer_named(
            "flat",
            Op::Reshape { shape: vec![24] },
            &[n1],
            &["flat".into()],
        )
        .unwrap()[0];
    for y in [y0, y1, y2, flat] {
        n.mark_output(y).unwrap();
    }
    let rt = backplane::RuntimeBuilder::new().build().unwrap();
    let opt = rt.optimize(&n, &cpuref()).unwrap();
    assert_eq!(
        opt.memory_plan().sub_tensor_layers,
        3,
        "rows, middle_rows, batch"
    );
    let id = rt.load_network(opt).unwrap();
    let x = Tensor::from_vec(vec![2, 3, 4], (0..24).map(|v| v as f32 - 12.0).collect()).unwrap();
    let (out, timings) = rt.execute_profiled(id, &[("a", &x)]).unwrap();
    let ran: Vec<&str> = timings.iter().map(|t| t.layer.as_str()).collect();
    assert_eq!(
        ran,
        ["neg", "relu", "middle_columns", "abs", "neg_again", "flat"]
    );
    // neg: element k is 12 - k; rows 2..5 are elements 8..20.
    let middle: Vec<f32> = (8..20).map(|k| 12.0 - k as f32).collect();
    let relu: Vec<f32> = middle.iter().map(|v| v.max(0.0)).collect();
    let columns: Vec<f32> = (0..6)
        .flat_map(|i| [11.0 - 4.0 * i as f32, 10.0 - 4.0 * i as f32])
        .map(f32::abs)
        .collect();
    let negated: Vec<f32> = middle.iter().map(|v| -v).collect();
    let all: Vec<f32> = (0..24).map(|k| 12.0 - k as f32).collect();
    assert_eq!(out[0].1.as_slice::<f32>().unwrap(), relu.as_slice());
    assert_eq!(out[1].1.as_slice::<f32>().unwrap(), columns.as_slice());
    assert_eq!(out[2].1.shape().dims(), &[1, 3, 4]);
    assert_eq!(out[2].1.as_slice::<f32>().unwrap(), negated.as_slice());
    assert_eq!(out[3].1.as_slice::<f32>().unwrap(), all.as_slice());
}

/// Runs `n` on CpuRef with input `a` = [1, -2, 3] (shape [1, 1, 3]); returns the number of
/// sub-tensor layers, the layers that ran, and the outputs.
fn run_concat_chain(n: &Network) -> (usize, Vec<String>, Vec<Vec<f32>>) {
    let rt = backplane::RuntimeBuilder::new().build().unwrap();
    let opt = rt.optimize(n, &cpuref()).unwrap();
    let sub = opt.memory_plan().sub_tensor_layers;
    let id = rt.load_network(opt).unwrap();
    let a = Tensor::from_vec(vec![1, 1, 3], vec![1.0f32, -2.0, 3.0]).unwrap();
    let (out, timings) = rt.execute_profiled(id, &[("a", &a)]).unwrap();
    let ran = timings.iter().map(|t| t.layer.clone()).collect();
    let values = out
        .iter()
        .map(|(_, t)| t.as_slice::<f32>().unwrap().to_vec())
        .collect();
    (sub, ran, values)
}

/// x0 = -a, y1 = |x0|, c1 = concat(x0, y1), y2 = x0 + y1, then `second(x0, y1, c1, y2)` is
/// the second concat; outputs relu(c1) and -c2 (DenseNet's shape of growing concatenations).
fn concat_chain(
    second: impl Fn(&mut Network, [backplane::core::TensorId; 4]) -> backplane::core::TensorId,
) -> Network {
    use backplane::core::ops::BinaryOp;
    let mut n = Network::new();
    let a = n
        .add_input("a", TensorInfo::new(DataType::F32, vec![1, 1, 3]))
        .unwrap();
    let x0 = n.add_layer("x0", Op::Unary(UnaryOp::Neg), &[a]).unwrap()[0];
    let y1 = n.add_layer("y1", Op::Unary(UnaryOp::Abs), &[x0]).unwrap()[0];
    let c1 = n
        .add_layer("c1", Op::Concat { axis: 1 }, &[x0, y1])
        .unwrap()[0];
    let o1 = n.add_layer("o1", Op::Unary(UnaryOp::Relu), &[c1]).unwrap()[0];
    let y2 = n
        .add_layer("y2", Op::Binary(BinaryOp::Add), &[x0, y1])
        .unwrap()[0];
    let c2 = second(&mut n, [x0, y1, c1, y2]);
    let o2 = n.add_layer("o2", Op::Unary(UnaryOp::Neg), &[c2]).unwrap()[0];
    n.mark_output(o1).unwrap();
    n.mark_output(o2).unwrap();
    n
}

const CHAIN_O1: [f32; 6] = [0.0, 2.0, 0.0, 1.0, 2.0, 3.0];

#[test]
fn growing_concatenations_are_views_of_the_last_one() {
    // c2 = concat(x0, y1, y2): c1 is its prefix, so both copy nothing.
    let n = concat_chain(|n, [x0, y1, _, y2]| {
        n.add_layer("c2", Op::Concat { axis: 1 }, &[x0, y1, y2])
            .unwrap()[0]
    });
    let (sub, ran, out) = run_concat_chain(&n);
    assert_eq!(sub, 2, "both concatenations in place: {ran:?}");
    assert!(!ran.iter().any(|l| l == "c1" || l == "c2"), "{ran:?}");
    assert_eq!(out[0], CHAIN_O1);
    assert_eq!(out[1], [1.0, -2.0, 3.0, -1.0, -2.0, -3.0, 0.0, -4.0, 0.0]);
}

#[test]
fn a_concatenation_of_a_concatenation_is_placed_inside_it() {
    // c2 = concat(c1, y2): c1's parts go straight into c2's memory.
    let n = concat_chain(|n, [_, _, c1, y2]| {
        n.add_layer("c2", Op::Concat { axis: 1 }, &[c1, y2])
            .unwrap()[0]
    });
    let (sub, ran, out) = run_concat_chain(&n);
    assert_eq!(sub, 2, "both concatenations in place: {ran:?}");
    assert_eq!(out[0], CHAIN_O1);
    assert_eq!(out[1], [1.0, -2.0, 3.0, -1.0, -2.0, -3.0, 0.0, -4.0, 0.0]);
}

#[test]
fn a_concatenation_whose_parts_sit_out_of_order_still_copies_them() {
    // c2 = concat(y1, x0, y2) holds x0 and y1 the other way round: c1 cannot be a view of
    // it, so c1 runs, and the results stay right.
    let n = concat_chain(|n, [x0, y1, _, y2]| {
        n.add_layer("c2", Op::Concat { axis: 1 }, &[y1, x0, y2])
            .unwrap()[0]
    });
    let (sub, ran, out) = run_concat_chain(&n);
    assert_eq!(sub, 1, "only the last concatenation in place: {ran:?}");
    assert!(ran.iter().any(|l| l == "c1"), "{ran:?}");
    assert_eq!(out[0], CHAIN_O1);
    assert_eq!(out[1], [-1.0, -2.0, -3.0, 1.0, -2.0, 3.0, 0.0, -4.0, 0.0]);
}
