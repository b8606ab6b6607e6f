//! GpuAcc's f16 kernels against CpuRef: each case's tensors are drawn in f32 and stored as
//! f16; the reference is CpuRef's kernel on the same values widened to f32, rounded once to
//! f16 (the backend test kit's `half_sweeps`), within two f16 units in the last place
//! (rtol 2e-3, atol 1e-4). Every layout of products and convolutions is forced once, and the
//! fused epilogues (activation, MatMul bias) run in f16 too. Casts
//! between f16 and f32 need no device feature and are exact. An adapter without
//! `SHADER_F16` (or the option `f16=off`) refuses f16 compute layers with the reason.
//!
//! Needs a Vulkan adapter (lavapipe accepted, see `common`); the f16 compute tests also need
//! `SHADER_F16`: without it they print why and pass, unless `BACKPLANE_REQUIRE_GPU_F16=1`
//! (set by the device script on a real GPU) makes that a failure.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::type_complexity
)]

use backplane::core::ops::{
    BinaryOp, ConvDesc, GemmDesc, MathOp, PoolDesc, PoolKind, ReduceDesc, ReduceKind, UnaryOp,
    Window,
};
use backplane::core::{DataType, Op};
use backplane::{Runtime, Tensor, TensorInfo};
use backplane_backend_tests::half_sweeps::{half_case, run_half_case};
use backplane_backend_tests::sweeps::{run_case, Rng, SweepCase};
use backplane_backend_tests::{Outcome, Report};

mod common;

use common::{case, expect_all, gpu, runtime_with, t};

/// The adapter's f16 answer in `backplane backends` ("yes", or "no (why)").
fn f16_capability(rt: &Runtime) -> String {
    let caps = rt.backend(&gpu()).unwrap().capabilities();
    caps.get("F16").map(|v| v.to_string()).unwrap_or_default()
}

/// A runtime whose GpuAcc runs f16 kernels, or `None` (after saying why, loudly) when the
/// adapter has no `SHADER_F16` and `BACKPLANE_REQUIRE_GPU_F16=1` is not set.
fn f16_runtime(extra: &[(&str, &str)]) -> Option<Runtime> {
    let rt = runtime_with(extra)?;
    let f16 = f16_capability(&rt);
    if f16 != "yes" {
        if std::env::var("BACKPLANE_REQUIRE_GPU_F16").as_deref() == Ok("1") {
            panic!("BACKPLANE_REQUIRE_GPU_F16=1 but GpuAcc's adapter has no f16 kernels: {f16}");
        }
        println!("SKIPPED: GpuAcc's f16 kernels are not checked on this adapter: F16={f16}");
        return None;
    }
    Some(rt)
}

/// Run every case (drawn in f32) in f16 on GpuAcc alone; all must pass.
fn expect_half_pass(rt: &Runtime, cases: &[SweepCase]) {
    expect_all(cases, "f16 cases", |c| {
        let half = half_case(c).unwrap().expect("an f32 input");
        run_half_case(rt, &gpu(), &half)
    });
}

fn elementwise_cases(r: &mut Rng) -> Vec<SweepCase> {
    let mut cases = Vec::new();
    let odd: [&[usize]; 5] = [&[1], &[7], &[3, 17], &[2, 3, 5, 7], &[100003]];
    let unary = [
        UnaryOp::Relu,
        UnaryOp::LeakyRelu { alpha: 0.1 },
        UnaryOp::Clip {
            min: -0.5,
            max: 1.5,
        },
        UnaryOp::Sigmoid,
        UnaryOp::Tanh,
        UnaryOp::Gelu {
            tanh_approximation: false,
        },
        UnaryOp::Gelu {
            tanh_approximation: true,
        },
        UnaryOp::Exp,
        UnaryOp::Neg,
        UnaryOp::Abs,
        UnaryOp::Erf,
    ];
    for (k, u) in unary.iter().enumerate() {
        cases.push(case(Op::Unary(*u), vec![(t(r, odd[k % odd.len()]), false)]));
    }
    for u in [UnaryOp::Sqrt, UnaryOp::Log] {
        let x = r.tensor(DataType::F32, &[3, 17], 0.1, 4.0).unwrap();
        cases.push(case(Op::Unary(u), vec![(x, false)]));
    }
    for m in [
        MathOp::HardSwish,
        MathOp::Softplus,
        MathOp::Elu { alpha: 1.0 },
    ] {
        cases.push(case(Op::Math(m), vec![(t(r, &[2, 31]), false)]));
    }
    let pairs: [(&[usize], &[usize]); 5] = [
        (&[1], &[1]),
        (&[7], &[1]),
        (&[3, 1, 5], &[4, 1]),
        (&[2, 3, 5, 7], &[7]),
        (&[257, 129], &[257, 129]),
    ];
    let ops = [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Max,
        BinaryOp::Min,
    ];
    for (k, (a, b)) in pairs.iter().enumerate() {
        for (j, op) in ops.iter().enumerate() {
            let bt = if *op == BinaryOp::Div {
                r.tensor(DataType::F32, b, 0.5, 2.0).unwrap()
            } else {
                t(r, b)
            };
            cases.push(case(
                Op::Binary(*op),
                vec![(t(r, a), false), (bt, (k + j) % 2 == 0)],
            ));
        }
    }
    cases
}

#[test]
fn f16_elementwise_kernels_match_cpu_ref() {
    let Some(rt) = f16_runtime(&[]) else { return };
    let cases = elementwise_cases(&mut Rng::new(71));
    expect_half_pass(&rt, &cases);
}

fn product_cases(r: &mut Rng) -> Vec<SweepCase> {
    let mut cases = Vec::new();
    let matmuls: [(&[usize], &[usize]); 7] = [
        (&[1, 1], &[1, 1]),
        (&[3, 17], &[17, 5]),
        (&[7], &[7, 3]),
        (&[2, 3, 5, 7], &[7, 11]),
        (&[2, 1, 5, 7], &[3, 7, 2]),
        (&[65, 33], &[33, 70]),
        // Long K: split-K where the layouts are chosen automatically.
        (&[5, 1031], &[1031, 13]),
    ];
    for (k, (a, b)) in matmuls.iter().enumerate() {
        cases.push(case(
            Op::MatMul,
            vec![(t(r, a), false), (t(r, b), k % 2 == 0)],
        ));
    }
    for (ta, tb, m, k, n, c) in [
        (false, true, 3, 17, 5, Some(vec![5])),
        (true, false, 17, 3, 19, None),
        (true, true, 40, 17, 66, Some(vec![40, 66])),
    ] {
        let a = if ta { vec![k, m] } else { vec![m, k] };
        let b = if tb { vec![n, k] } else { vec![k, n] };
        let mut inputs = vec![(t(r, &a), false), (t(r, &b), true)];
        if let Some(c) = c {
            inputs.push((t(r, &c), true));
        }
        let desc = GemmDesc {
            alpha: 0.5,
            beta: 2.0,
            trans_a: ta,
            trans_b: tb,
        };
        cases.push(case(Op::Gemm(desc), inputs));
    }
    cases
}

fn window(kernel: Vec<usize>, strides: Vec<usize>, pads: Vec<usize>) -> Window {
    Window {
        kernel,
        strides,
        pads,
        ..Window::default()
    }
}

fn conv_cases(r: &mut Rng) -> Vec<SweepCase> {
    // (x, w, group, strides, pads, bias)
    let convs: Vec<(Vec<usize>, Vec<usize>, usize, Vec<usize>, Vec<usize>, bool)> = vec![
        (vec![1, 1, 1, 1], vec![1, 1, 1, 1], 1, vec![], vec![], false),
        (
            vec![1, 3, 7, 5],
            vec![4, 3, 3, 3],
            1,
            vec![],
            vec![1; 4],
            true,
        ),
        // Depthwise, grouped, 1-D.
        (
            vec![1, 5, 9, 9],
            vec![5, 1, 3, 3],
            5,
            vec![1, 1],
            vec![1; 4],
            true,
        ),
        (
            vec![2, 4, 11, 13],
            vec![6, 2, 3, 2],
            2,
            vec![2, 1],
            vec![1, 0, 0, 1],
            true,
        ),
        (vec![2, 3, 31], vec![9, 3, 5], 1, vec![2], vec![2, 1], true),
        // Wide enough for tiles: 1x1 and 3x3 past a tile, two groups.
        (
            vec![2, 33, 9, 9],
            vec![65, 33, 1, 1],
            1,
            vec![],
            vec![],
            true,
        ),
        (
            vec![1, 8, 12, 11],
            vec![40, 8, 3, 3],
            1,
            vec![],
            vec![1; 4],
            true,
        ),
        (
            vec![1, 8, 9, 9],
            vec![16, 4, 3, 3],
            2,
            vec![],
            vec![1; 4],
            false,
        ),
        // Long K (split-K automatically).
        (
            vec![1, 64, 5, 5],
            vec![16, 64, 3, 3],
            1,
            vec![],
            vec![1; 4],
            true,
        ),
    ];
    let mut cases = Vec::new();
    for (k, (x, w, group, strides, pads, bias)) in convs.into_iter().enumerate() {
        let spatial = w.len() - 2;
        let desc = ConvDesc {
            window: window(w[2..].to_vec(), strides, pads),
            group,
        };
        debug_assert_eq!(desc.window.kernel.len(), spatial);
        let mut inputs = vec![(t(r, &x), false), (t(r, &w), k % 2 == 0)];
        if bias {
            inputs.push((t(r, &[w[0]]), true));
        }
        cases.push(case(Op::Conv(desc), inputs));
    }
    cases
}

#[test]
fn f16_products_and_convolutions_match_cpu_ref_in_every_layout() {
    let Some(rt) = f16_runtime(&[]) else { return };
    let mut r = Rng::new(73);
    let mut cases = product_cases(&mut r);
    cases.extend(conv_cases(&mut r));
    expect_half_pass(&rt, &cases);
    for tiles in ["direct", "16", "64", "splitk"] {
        println!("tiles={tiles}");
        let rt = f16_runtime(&[("tiles", tiles)]).unwrap();
        expect_half_pass(&rt, &cases);
    }
}

#[test]
fn f16_pools_normalizations_reductions_and_resize_match_cpu_ref() {
    let Some(rt) = f16_runtime(&[]) else { return };
    let mut r = Rng::new(79);
    let mut cases = Vec::new();
    for (kind, x, kernel, strides, pads) in [
        (
            PoolKind::Max,
            vec![1, 3, 9, 9],
            vec![3, 3],
            vec![2, 2],
            vec![1; 4],
        ),
        (
            PoolKind::Average,
            vec![2, 5, 7, 11],
            vec![2, 3],
            vec![1, 2],
            vec![0, 1, 1, 0],
        ),
        (PoolKind::Max, vec![1, 2, 17], vec![3], vec![2], vec![1, 1]),
    ] {
        let desc = PoolDesc {
            kind,
            window: window(kernel, strides, pads),
            ceil_mode: false,
            count_include_pad: false,
        };
        cases.push(case(Op::Pool(desc), vec![(t(&mut r, &x), false)]));
    }
    for kind in [PoolKind::Max, PoolKind::Average] {
        cases.push(case(
            Op::GlobalPool(kind),
            vec![(t(&mut r, &[2, 7, 5, 3]), false)],
        ));
    }
    // Softmax along the last axis (row kernel) and a strided one; LayerNorm rows of 1,
    // prime and long lengths.
    for (x, axis) in [
        (vec![3, 17], -1),
        (vec![1, 1], -1),
        (vec![2, 301], -1),
        (vec![2, 7, 3], 1),
    ] {
        cases.push(case(Op::Softmax { axis }, vec![(t(&mut r, &x), false)]));
        cases.push(case(Op::LogSoftmax { axis }, vec![(t(&mut r, &x), false)]));
    }
    for (x, row) in [
        (vec![3, 17], vec![17]),
        (vec![1, 1], vec![1]),
        (vec![5, 257], vec![257]),
        (vec![2, 3, 7], vec![3, 7]),
    ] {
        let axis = -(row.len() as i64);
        let scale = r.tensor(DataType::F32, &row, 0.5, 1.5).unwrap();
        cases.push(case(
            Op::LayerNormalization {
                axis,
                epsilon: 1e-5,
            },
            vec![
                (t(&mut r, &x), false),
                (scale, true),
                (t(&mut r, &row), true),
            ],
        ));
    }
    for (kind, axes) in [
        (ReduceKind::Mean, vec![-1]),
        (ReduceKind::Sum, vec![0, 2]),
        (ReduceKind::Max, vec![1]),
        (ReduceKind::L2, vec![-1]),
    ] {
        let desc = ReduceDesc {
            kind,
            axes,
            keepdims: true,
            noop_with_empty_axes: false,
        };
        cases.push(case(Op::Reduce(desc), vec![(t(&mut r, &[3, 5, 7]), false)]));
    }
    // BatchNormalization with per-channel parameters.
    let c = 5;
    let var = r.tensor(DataType::F32, &[c], 0.5, 2.0).unwrap();
    cases.push(case(
        Op::BatchNormalization { epsilon: 1e-5 },
        vec![
            (t(&mut r, &[2, c, 3, 3]), false),
            (t(&mut r, &[c]), true),
            (t(&mut r, &[c]), true),
            (t(&mut r, &[c]), true),
            (var, true),
        ],
    ));
    expect_half_pass(&rt, &cases);
}

/// The kit's f16 sweeps (every float family, LayerNorm included) on GpuAcc: none fails and,
/// with f16 kernels, none is refused.
#[test]
fn the_kit_f16_sweeps_pass_on_gpu_acc() {
    let Some(rt) = f16_runtime(&[]) else { return };
    let mut report = Report::new("GpuAcc");
    backplane_backend_tests::half_sweeps::run(&rt, &gpu(), 5, 3, &mut report);
    let text = report.to_text();
    println!("{text}");
    assert!(report.ok(), "{text}");
    let (passed, _) = report.totals();
    assert!(passed >= 30, "too little was checked: {text}");
}

fn values(dtype: DataType, v: &[f64]) -> Tensor {
    Tensor::from_f64_values(TensorInfo::new(dtype, vec![v.len()]), v).unwrap()
}

/// Cast between f16 and f32 runs on any adapter (no device feature) and is exact: ties,
/// subnormals, overflow, infinities and NaN as the host converts them.
#[test]
fn f16_casts_are_exact_on_any_adapter() {
    let Some(rt) = runtime_with(&[("f16", "off")]) else {
        return;
    };
    let mut r = Rng::new(83);
    let specials = [
        0.0,
        -0.0,
        1.0,
        -2.5,
        65504.0,
        65519.9,
        65520.0,
        1e6,
        -1e6,
        6.1e-5,
        5.96e-8,
        2.98e-8,
        2.99e-8,
        1e-9,
        1.0 + 1.0 / 2048.0,
        1.0 + 3.0 / 2048.0,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
    ];
    let exact = |op, x: Tensor| SweepCase {
        rtol: 0.0,
        atol: 0.0,
        ..case(op, vec![(x, false)])
    };
    let mut cases = vec![
        exact(
            Op::Cast {
                to: DataType::F16,
                saturate: true,
            },
            values(DataType::F32, &specials),
        ),
        exact(
            Op::Cast {
                to: DataType::F32,
                saturate: true,
            },
            values(DataType::F16, &specials),
        ),
    ];
    let wide = r
        .tensor(DataType::F32, &[10007], -70000.0, 70000.0)
        .unwrap();
    cases.push(exact(
        Op::Cast {
            to: DataType::F16,
            saturate: true,
        },
        wide.clone(),
    ));
    let tiny = r.tensor(DataType::F32, &[4099], -1e-4, 1e-4).unwrap();
    cases.push(exact(
        Op::Cast {
            to: DataType::F16,
            saturate: true,
        },
        tiny,
    ));
    let halves = backplane_backend_tests::half_sweeps::to_f16(&wide).unwrap();
    cases.push(exact(
        Op::Cast {
            to: DataType::F32,
            saturate: true,
        },
        halves.clone(),
    ));
    cases.push(exact(
        Op::Cast {
            to: DataType::I32,
            saturate: true,
        },
        halves,
    ));
    let mut failures = Vec::new();
    for c in &cases {
        match run_case(&rt, &gpu(), c) {
            Outcome::Passed => {}
            other => failures.push(format!("{:?}: {other:?}", c.op)),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Without f16 kernels (`f16=off`, as on an adapter without `SHADER_F16`) GpuAcc refuses f16
/// compute layers with the reason, still moves f16 tensors, and says so in its capabilities.
#[test]
fn without_f16_kernels_f16_compute_layers_are_refused_with_the_reason() {
    let Some(rt) = runtime_with(&[("f16", "off")]) else {
        return;
    };
    let f16 = f16_capability(&rt);
    assert!(f16.starts_with("no (") && f16.contains("f16=off"), "{f16}");
    let mut r = Rng::new(89);
    let refused = [
        case(
            Op::MatMul,
            vec![(t(&mut r, &[3, 5]), false), (t(&mut r, &[5, 2]), false)],
        ),
        case(Op::Unary(UnaryOp::Relu), vec![(t(&mut r, &[7]), false)]),
        case(Op::Softmax { axis: -1 }, vec![(t(&mut r, &[2, 9]), false)]),
    ];
    for c in &refused {
        let half = half_case(c).unwrap().unwrap();
        match run_half_case(&rt, &gpu(), &half) {
            Outcome::Refused(why) => assert!(
                why.contains("f16") && why.contains("f16=off"),
                "{:?}: the reason should name f16 and the option: {why}",
                c.op
            ),
            other => panic!("{:?} in f16 should be refused, got {other:?}", c.op),
        }
    }
    // Data movement of f16 tensors needs no f16 arithmetic: it still runs.
    let moved = case(
        Op::Transpose { perm: vec![1, 0] },
        vec![(t(&mut r, &[3, 17]), false)],
    );
    let half = half_case(&moved).unwrap().unwrap();
    assert_eq!(run_half_case(&rt, &gpu(), &half), Outcome::Passed);
}

/// Conv, Gemm and MatMul followed by an activation (or a MatMul by a bias Add) run as one
/// fused f16 layer whose epilogue applies the activation before the one rounding: it matches
/// CpuRef's two layers on the widened values, rounded once.
#[test]
fn f16_fused_products_match_cpu_ref() {
    use backplane::compare::compare;
    use backplane_backend_tests::exec::{run_network, Run};
    use backplane_backend_tests::half_sweeps::{to_f16, F16_ATOL, F16_RTOL};
    let Some(rt) = f16_runtime(&[]) else { return };
    let mut r = Rng::new(97);
    let conv = Op::Conv(ConvDesc {
        window: window(vec![3, 3], vec![], vec![1, 1, 1, 1]),
        group: 1,
    });
    let gemm = Op::Gemm(GemmDesc {
        trans_b: true,
        ..GemmDesc::default()
    });
    let half = |t: Tensor| to_f16(&t).unwrap();
    let cases: Vec<(Op, Vec<Tensor>, Op, Option<Tensor>)> = vec![
        (
            conv,
            vec![
                half(t(&mut r, &[1, 3, 7, 5])),
                half(t(&mut r, &[4, 3, 3, 3])),
                half(t(&mut r, &[4])),
            ],
            Op::Unary(UnaryOp::Relu),
            None,
        ),
        (
            gemm,
            vec![
                half(t(&mut r, &[3, 17])),
                half(t(&mut r, &[5, 17])),
                half(t(&mut r, &[5])),
            ],
            Op::Unary(UnaryOp::Sigmoid),
            None,
        ),
        (
            Op::MatMul,
            vec![half(t(&mut r, &[2, 3, 7])), half(t(&mut r, &[7, 11]))],
            Op::Unary(UnaryOp::Gelu {
                tanh_approximation: false,
            }),
            None,
        ),
        (
            Op::MatMul,
            vec![half(t(&mut r, &[5, 19])), half(t(&mut r, &[19, 13]))],
            Op::Binary(BinaryOp::Add),
            Some(half(t(&mut r, &[13]))),
        ),
    ];
    let widen = |t: &Tensor| {
        Tensor::from_f64_values(
            TensorInfo::new(DataType::F32, t.info().shape.dims().to_vec()),
            &t.to_f64_vec(),
        )
        .unwrap()
    };
    for (product, inputs, act, bias) in cases {
        let wide: Vec<Tensor> = inputs.iter().map(widen).collect();
        let refs: Vec<&Tensor> = wide.iter().collect();
        let mid = backplane::cpu_ref::evaluate(&product, &refs).unwrap();
        let want = match &bias {
            Some(b) => backplane::cpu_ref::evaluate(&act, &[&mid[0], &widen(b)]).unwrap(),
            None => backplane::cpu_ref::evaluate(&act, &[&mid[0]]).unwrap(),
        };
        let want = to_f16(&want[0]).unwrap();
        let mut net = backplane::Network::new();
        let x = net.add_input("x", inputs[0].info().clone()).unwrap();
        let mut ids = vec![x];
        for (k, w) in inputs.iter().enumerate().skip(1) {
            ids.push(net.add_constant(&format!("w{k}"), w.clone()).unwrap());
        }
        let m = net.add_layer("product", product.clone(), &ids).unwrap();
        let mut act_inputs = vec![m[0]];
        if let Some(b) = &bias {
            act_inputs.push(net.add_constant("bias", b.clone()).unwrap());
        }
        let y = net.add_layer("act", act.clone(), &act_inputs).unwrap();
        net.mark_output(y[0]).unwrap();
        let feed = vec![("x".to_string(), inputs[0].clone())];
        match run_network(&rt, &net, &[gpu()], &feed) {
            Run::Ran { layers, outputs } => {
                assert_eq!(
                    layers, 1,
                    "{product:?} + {act:?} should run as one fused layer"
                );
                let got = outputs.unwrap();
                assert_eq!(got[0].1.dtype(), DataType::F16);
                compare(&got[0].1, &want, F16_RTOL, F16_ATOL).unwrap();
            }
            Run::Refused(why) => panic!("{product:?} + {act:?} refused: {why}"),
        }
    }
}
