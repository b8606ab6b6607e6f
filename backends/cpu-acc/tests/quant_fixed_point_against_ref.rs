//! CpuAcc's int8 convolutions and fully connected layers under the fixed-point
//! requantization (`Requantization::FixedPoint`, LiteRT's builtin kernels' rule, which the
//! TFLite importer writes with `--int8-requant litert`) against CpuRef bit for bit: chains as
//! the importer writes mobilenet_v3_small's (the stem, pointwise, depthwise 3×3 and 5×5 with
//! strides 1 and 2, a ReLU6, the classifier's fully connected layer) on channels 1, 3, 16,
//! 17, 33 and 1, 7, 113 pixels; and the multiplication of two int8 tensors (same shapes,
//! broadcast per channel or from a scalar) as CpuRef's `QMulFixedPoint`, and the mean over
//! the pixels as its `QMeanFixedPoint` (channel counts on both sides of its blocks of 16).
//! CpuAcc must fold every such chain (none left to CpuRef or to float layers), and the rule
//! must matter: the same networks under the f32 rule differ somewhere.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use backplane_backend_api::{Backend, LayerDesc, SubgraphView, ValueRef};
use backplane_core::ops::{AutoPad, ConvDesc, GemmDesc, UnaryOp, Window};
use backplane_core::quant::Requantization;
use backplane_core::{DataType, LayerId, Network, Op, Tensor, TensorId};
use backplane_cpu_ref::CpuRefBackend;
use std::collections::{BTreeSet, HashMap};
use support::{add_dq, all_bytes, custom, konst, layer, nhwc_image, q8, zp, Rng};

/// `net` on CpuRef as the runtime runs it: CpuRef's folds (its integer layers follow the
/// fixed-point rule; the unfolded float chain would not), then every layer in data order.
/// Returns the value of each tensor the layers produce.
fn run_reference(net: &Network, feeds: &HashMap<TensorId, Tensor>) -> HashMap<TensorId, Tensor> {
    let backend = CpuRefBackend::new();
    let all: Vec<LayerId> = (0..net.layers().len()).map(LayerId).collect();
    let views = backend.optimize_subgraph(&SubgraphView::new(net, all.clone()));
    let factory = backend.create_workload_factory(None).unwrap();
    let replaced: BTreeSet<LayerId> = views
        .substitutions
        .iter()
        .flat_map(|s| s.replaced.iter().copied())
        .collect();
    // Each unit: replacement layers (ops, inputs, outputs), run in order.
    type Unit = Vec<(Op, Vec<ValueRef>, Vec<Option<TensorId>>)>;
    let mut units: Vec<Unit> = views
        .substitutions
        .iter()
        .map(|s| {
            s.replacement
                .iter()
                .map(|r| (r.op.clone(), r.inputs.clone(), r.outputs.clone()))
                .collect()
        })
        .collect();
    for l in all.iter().filter(|l| !replaced.contains(l)) {
        let layer = net.layer(*l);
        let inputs = layer
            .inputs
            .iter()
            .map(|&t| ValueRef::Existing(t))
            .collect();
        let outputs = layer.outputs.iter().map(|&t| Some(t)).collect();
        units.push(vec![(layer.op.clone(), inputs, outputs)]);
    }
    let mut values = feeds.clone();
    let ready = |values: &HashMap<TensorId, Tensor>, t: &TensorId| {
        values.contains_key(t) || net.tensor(*t).constant().is_some()
    };
    while !units.is_empty() {
        let at = units
            .iter()
            .position(|u| {
                u.iter().all(|(_, ins, _)| {
                    ins.iter().all(|v| match v {
                        ValueRef::Existing(t) => ready(&values, t),
                        _ => true,
                    })
                })
            })
            .expect("a unit whose inputs are ready");
        let unit = units.remove(at);
        let mut produced: Vec<Vec<Tensor>> = Vec::new();
        for (op, ins, outs) in unit {
            let (inputs, constants) = support::replacement_inputs(net, &values, &produced, &ins);
            let infos: Vec<_> = inputs.iter().map(|t| t.info().clone()).collect();
            let info_refs: Vec<_> = infos.iter().collect();
            let desc = LayerDesc {
                name: "ref".into(),
                op: op.clone(),
                inputs: infos.clone(),
                outputs: op.infer(&info_refs).unwrap(),
                constants,
            };
            let workload = factory.create_workload(&desc).unwrap();
            let mut out: Vec<Tensor> = desc
                .outputs
                .iter()
                .map(|i| Tensor::zeros(i.clone()).unwrap())
                .collect();
            let views: Vec<_> = inputs.iter().map(|t| t.view()).collect();
            let mut out_views: Vec<_> = out.iter_mut().map(Tensor::view_mut).collect();
            workload.execute(&views, &mut out_views).unwrap();
            for (t, v) in outs.iter().zip(&out) {
                if let Some(t) = t {
                    values.insert(*t, v.clone());
                }
            }
            produced.push(out);
        }
    }
    values
}

/// `QuantizeLinear(t)` to int8 on `(s, z)` by `rule`.
fn quantize(net: &mut Network, t: TensorId, (s, z): (f32, i32), rule: Requantization) -> TensorId {
    let sc = konst(net, Tensor::scalar(s));
    let zc = konst(net, zp(DataType::I8, z));
    let op = Op::QuantizeLinear {
        axis: 1,
        to: DataType::I8,
        block_size: 0,
        saturate: true,
        requant: rule,
    };
    layer(net, op, &[t, sc, zc])
}

/// Per-channel int8 weights `dims` (output channels first, zero points 0), their
/// dequantization along `axis`, and an int32 bias on `x_scale · w_scale`, dequantized.
fn weights(
    net: &mut Network,
    r: &mut Rng,
    dims: &[usize],
    axis: i64,
    x_scale: f32,
) -> (TensorId, TensorId) {
    let m = dims[axis as usize];
    let n: usize = dims.iter().product();
    // Scales that are not powers of two, so that the rules round differently somewhere.
    let ws: Vec<f32> = (0..m).map(|i| 0.0037 + 0.00071 * (i % 13) as f32).collect();
    let bias: Vec<i32> = (0..m).map(|_| (r.next() % 4001) as i32 - 2000).collect();
    let bs: Vec<f32> = ws.iter().map(|s| s * x_scale).collect();
    let dq = |axis| Op::DequantizeLinear {
        axis,
        to: DataType::F32,
        block_size: 0,
    };
    let wt = konst(net, q8(DataType::I8, dims, r.bytes(n)));
    let wsc = konst(net, Tensor::from_vec(vec![m], ws).unwrap());
    let wz = konst(net, q8(DataType::I8, &[m], vec![0; m]));
    let wf = layer(net, dq(axis), &[wt, wsc, wz]);
    let bc = konst(net, Tensor::from_vec(vec![m], bias).unwrap());
    let bsc = konst(net, Tensor::from_vec(vec![m], bs).unwrap());
    let bz = konst(net, Tensor::from_vec(vec![m], vec![0i32; m]).unwrap());
    let bf = layer(net, dq(0), &[bc, bsc, bz]);
    (wf, bf)
}

/// One convolution of the chain: `m` outputs, kernel `k`, `stride`, SAME-like padding,
/// depthwise when `depthwise`.
#[derive(Clone, Copy)]
struct Step {
    m: usize,
    k: usize,
    stride: usize,
    depthwise: bool,
}

/// An NHWC int8 image `[1, h, w, c]` through the convolutions `steps` (each a QDQ chain
/// ending in a QuantizeLinear by `rule`, the odd ones with a ReLU6), each reading the
/// previous one's output. Returns the network and its input.
fn conv_net(
    h: usize,
    w: usize,
    c: usize,
    steps: &[Step],
    rule: Requantization,
) -> (Network, TensorId) {
    let mut net = Network::new();
    let mut r = Rng((h * 131 + w * 17 + c) as u64);
    let (x, mut t) = nhwc_image(&mut net, [h, w, c]);
    let mut q = (0.023f32, -3);
    let mut ch = c;
    for (i, s) in steps.iter().enumerate() {
        let xf = add_dq(&mut net, t, DataType::I8, q);
        let (group, dims) = if s.depthwise {
            (ch, [ch, 1, s.k, s.k])
        } else {
            (1, [s.m, ch, s.k, s.k])
        };
        let (wf, bf) = weights(&mut net, &mut r, &dims, 0, q.0);
        let conv = Op::Conv(ConvDesc {
            window: Window {
                kernel: vec![s.k, s.k],
                strides: vec![s.stride; 2],
                dilations: vec![1, 1],
                pads: vec![s.k / 2; 4],
                auto_pad: AutoPad::NotSet,
            },
            group,
        });
        let mut y = layer(&mut net, conv, &[xf, wf, bf]);
        if i % 2 == 1 {
            y = layer(
                &mut net,
                Op::Unary(UnaryOp::Clip { min: 0.0, max: 6.0 }),
                &[y],
            );
        }
        let next = (0.041 + 0.007 * i as f32, (i as i32 % 5) - 2);
        t = quantize(&mut net, y, next, rule);
        q = next;
        ch = dims[0];
    }
    net.mark_output(t).unwrap();
    (net, x)
}

/// An int8 `[rows, c]` input through a fully connected layer (Gemm, weights `[n, c]`,
/// transposed) quantized by `rule`.
fn fc_net(rows: usize, c: usize, n: usize, rule: Requantization) -> (Network, TensorId) {
    let mut net = Network::new();
    let mut r = Rng((rows * 7 + c * 3 + n) as u64);
    let info = q8(DataType::I8, &[rows, c], vec![0; rows * c])
        .info()
        .clone();
    let x = net.add_input("x", info).unwrap();
    let xq = (0.031f32, 4);
    let xf = add_dq(&mut net, x, DataType::I8, xq);
    let (wf, bf) = weights(&mut net, &mut r, &[n, c], 0, xq.0);
    let gemm = Op::Gemm(GemmDesc {
        trans_b: true,
        ..GemmDesc::default()
    });
    let y = layer(&mut net, gemm, &[xf, wf, bf]);
    let t = quantize(&mut net, y, (0.087, -7), rule);
    net.mark_output(t).unwrap();
    (net, x)
}

/// `net` on CpuRef and on CpuAcc (one and two threads; CpuAcc must take every layer into
/// its one substitution, holding `ops` of its integer layers): equal bytes. Returns CpuRef's
/// output bytes.
fn equal_on_both(what: &str, net: &Network, x: TensorId, input: Tensor, integer: &str) -> Vec<u8> {
    equal_fed(what, net, HashMap::from([(x, input)]), integer)
}

/// [`equal_on_both`] with every input fed by `feeds`.
fn equal_fed(
    what: &str,
    net: &Network,
    feeds: HashMap<TensorId, Tensor>,
    integer: &str,
) -> Vec<u8> {
    let all: Vec<LayerId> = (0..net.layers().len()).map(LayerId).collect();
    let views =
        backplane_cpu_acc::CpuAccBackend::new().optimize_subgraph(&SubgraphView::new(net, all));
    assert!(
        views.failed.is_empty(),
        "{what}: CpuAcc refused {:?}",
        views.failed
    );
    let want = run_reference(net, &feeds);
    let y = net.outputs()[0];
    for threads in [1, 2] {
        let (got, ops) = support::run_acc(net, &feeds, threads);
        assert!(
            ops.iter().any(|o| custom(o) == integer),
            "{what}: folded into {integer}: {ops:?}"
        );
        assert_eq!(
            got[&y].bytes(),
            want[&y].bytes(),
            "{what}, {threads} thread(s)"
        );
    }
    want[&y].bytes().to_vec()
}

#[test]
fn fixed_point_convolutions_equal_cpu_ref() {
    let stem = Step {
        m: 16,
        k: 3,
        stride: 2,
        depthwise: false,
    };
    let dw = |k, stride| Step {
        m: 0,
        k,
        stride,
        depthwise: true,
    };
    let pw = |m| Step {
        m,
        k: 1,
        stride: 1,
        depthwise: false,
    };
    let mut differ = 0;
    let mut cases = 0;
    for (h, w) in [(1, 1), (1, 7), (7, 1), (113, 1), (9, 13)] {
        // 1283: blocks of channels shared by two threads, the last holding the odd three.
        for c in [1, 3, 16, 17, 33, 1283] {
            let steps = [stem, dw(3, 1), pw(17), dw(5, 2), pw(c), dw(3, 2), pw(33)];
            let (net, x) = conv_net(h, w, c, &steps, Requantization::FixedPoint);
            let mut r = Rng((h * w * c) as u64 + 5);
            let input = all_bytes(&mut r, DataType::I8, &[1, h, w, c]);
            let what = format!("{h}x{w}x{c}");
            let fixed = equal_on_both(&what, &net, x, input.clone(), "QLinearConv");
            let (net_f32, x_f32) = conv_net(h, w, c, &steps, Requantization::F32);
            let feeds = HashMap::from([(x_f32, input)]);
            let f32_out = run_reference(&net_f32, &feeds);
            differ += usize::from(f32_out[&net_f32.outputs()[0]].bytes() != fixed.as_slice());
            cases += 1;
        }
    }
    assert!(
        differ > 0,
        "the rules agree on all {cases} networks: the test tells nothing"
    );
}

#[test]
fn fixed_point_fully_connected_equals_cpu_ref() {
    let mut differ = 0;
    for rows in [1, 7, 113] {
        for c in [1, 3, 16, 17, 33, 1024] {
            for n in [1, 17, 100] {
                let (net, x) = fc_net(rows, c, n, Requantization::FixedPoint);
                let mut r = Rng((rows * c * n) as u64);
                let input = all_bytes(&mut r, DataType::I8, &[rows, c]);
                let what = format!("fc {rows}x{c}x{n}");
                let fixed = equal_on_both(&what, &net, x, input.clone(), "QLinearGemm");
                let (net_f32, x_f32) = fc_net(rows, c, n, Requantization::F32);
                let f32_out = run_reference(&net_f32, &HashMap::from([(x_f32, input)]));
                differ += usize::from(f32_out[&net_f32.outputs()[0]].bytes() != fixed.as_slice());
            }
        }
    }
    assert!(
        differ > 0,
        "the rules agree on every layer: the test tells nothing"
    );
}

/// Two int8 inputs `a` `[1, C, H, W]` and `b` (`b_dims`, broadcast to a's shape), each
/// dequantized, multiplied, an optional ReLU, quantized by `rule`.
fn mul_net(
    c: usize,
    hw: [usize; 2],
    b_dims: &[usize],
    relu: bool,
    rule: Requantization,
) -> (Network, [TensorId; 2]) {
    let mut net = Network::new();
    let info = |d: &[usize]| {
        q8(DataType::I8, d, vec![0; d.iter().product()])
            .info()
            .clone()
    };
    let a = net.add_input("a", info(&[1, c, hw[0], hw[1]])).unwrap();
    let b = net.add_input("b", info(b_dims)).unwrap();
    let af = add_dq(&mut net, a, DataType::I8, (0.0173, -9));
    let bf = add_dq(&mut net, b, DataType::I8, (0.0061, 3));
    let mut y = layer(
        &mut net,
        Op::Binary(backplane_core::ops::BinaryOp::Mul),
        &[af, bf],
    );
    if relu {
        y = layer(&mut net, Op::Unary(UnaryOp::Relu), &[y]);
    }
    let t = quantize(&mut net, y, (0.0093, 11), rule);
    net.mark_output(t).unwrap();
    (net, [a, b])
}

#[test]
fn fixed_point_multiplications_equal_cpu_ref() {
    let mut differ = 0;
    // 1283: blocks of channels shared by two threads, the last holding the odd three.
    for c in [1, 3, 16, 17, 33, 1283] {
        for hw in [[1, 1], [1, 7], [113, 1], [9, 13]] {
            // Same shapes, a squeeze-excite gate per channel, one scalar.
            for b_dims in [vec![1, c, hw[0], hw[1]], vec![1, c, 1, 1], vec![1]] {
                for relu in [false, true] {
                    let (net, [a, b]) = mul_net(c, hw, &b_dims, relu, Requantization::FixedPoint);
                    let mut r = Rng((c * 31 + hw[0] * 7 + hw[1] + b_dims.len()) as u64);
                    let av = all_bytes(&mut r, DataType::I8, &[1, c, hw[0], hw[1]]);
                    let bv = all_bytes(&mut r, DataType::I8, &b_dims);
                    let feeds = HashMap::from([(a, av.clone()), (b, bv.clone())]);
                    let what = format!("mul {c} {hw:?} by {b_dims:?} relu {relu}");
                    let fixed = equal_fed(&what, &net, feeds, "QLinearBinary");
                    let (n32, [a32, b32]) = mul_net(c, hw, &b_dims, relu, Requantization::F32);
                    let f32_out = run_reference(&n32, &HashMap::from([(a32, av), (b32, bv)]));
                    differ += usize::from(f32_out[&n32.outputs()[0]].bytes() != fixed.as_slice());
                }
            }
        }
    }
    assert!(
        differ > 0,
        "the rules agree on every multiplication: the test tells nothing"
    );
}

/// An int8 image `[1, C, H, W]` (or `[1, H, W, C]` then the importer's transpose, when
/// `nhwc`) through a 1×1 convolution to `c` channels (so the region holds the mean
/// channels-last), then dequantized, its mean over H and W kept as `[1, C, 1, 1]`,
/// quantized by `rule`.
fn mean_net(c: usize, hw: [usize; 2], nhwc: bool, rule: Requantization) -> (Network, TensorId) {
    let mut net = Network::new();
    let (x, mut t) = if nhwc {
        nhwc_image(&mut net, [hw[0], hw[1], c])
    } else {
        let info = q8(
            DataType::I8,
            &[1, c, hw[0], hw[1]],
            vec![0; c * hw[0] * hw[1]],
        );
        let x = net.add_input("x", info.info().clone()).unwrap();
        (x, x)
    };
    let mut q = (0.029f32, 6);
    if nhwc {
        let mut r = Rng(c as u64 + 1);
        let xf = add_dq(&mut net, t, DataType::I8, q);
        let (wf, bf) = weights(&mut net, &mut r, &[c, c, 1, 1], 0, q.0);
        let conv = Op::Conv(ConvDesc {
            window: Window {
                kernel: vec![1, 1],
                strides: vec![1, 1],
                dilations: vec![1, 1],
                pads: vec![0; 4],
                auto_pad: AutoPad::NotSet,
            },
            group: 1,
        });
        let y = layer(&mut net, conv, &[xf, wf, bf]);
        q = (0.047, -5);
        t = quantize(&mut net, y, q, rule);
    }
    let xf = add_dq(&mut net, t, DataType::I8, q);
    let mean = Op::Reduce(backplane_core::ops::ReduceDesc {
        kind: backplane_core::ops::ReduceKind::Mean,
        axes: vec![2, 3],
        keepdims: true,
        noop_with_empty_axes: false,
    });
    let m = layer(&mut net, mean, &[xf]);
    let y = quantize(&mut net, m, (0.0113, -17), rule);
    net.mark_output(y).unwrap();
    (net, x)
}

#[test]
fn fixed_point_means_equal_cpu_ref() {
    let mut differ = 0;
    // 1283: blocks of channels shared by two threads, the last holding the odd three.
    for c in [1, 3, 16, 17, 33, 1283] {
        let planes: &[[usize; 2]] = if c > 64 {
            &[[9, 13]]
        } else {
            &[[1, 1], [1, 7], [113, 1], [9, 13], [24, 24]]
        };
        for &hw in planes {
            for nhwc in [false, true] {
                let (net, x) = mean_net(c, hw, nhwc, Requantization::FixedPoint);
                let mut r = Rng((c * 13 + hw[0] * 5 + hw[1]) as u64);
                let dims = if nhwc {
                    [1, hw[0], hw[1], c]
                } else {
                    [1, c, hw[0], hw[1]]
                };
                let input = all_bytes(&mut r, DataType::I8, &dims);
                let what = format!("mean {c} {hw:?} nhwc {nhwc}");
                let fixed = equal_on_both(&what, &net, x, input.clone(), "QLinearMean");
                let (n32, x32) = mean_net(c, hw, nhwc, Requantization::F32);
                let f32_out = run_reference(&n32, &HashMap::from([(x32, input)]));
                differ += usize::from(f32_out[&n32.outputs()[0]].bytes() != fixed.as_slice());
            }
        }
    }
    assert!(
        differ > 0,
        "the rules agree on every mean: the test tells nothing"
    );
}

/// An 8-bit image `[1, C, H, W]` (`dt`) dequantized and multiplied by a dequantized 8-bit
/// constant of one value (the hard-sigmoid's 1/6 as Keras's int8 squeeze-excite gates
/// import), an optional ReLU, quantized by `rule`.
fn mul_by_constant_net(
    dt: DataType,
    dims: &[usize],
    constant_first: bool,
    relu: bool,
    rule: Requantization,
) -> (Network, TensorId) {
    let mut net = Network::new();
    let x = net
        .add_input(
            "x",
            q8(dt, dims, vec![0; dims.iter().product()]).info().clone(),
        )
        .unwrap();
    let xf = add_dq(
        &mut net,
        x,
        dt,
        (0.0625, if dt == DataType::I8 { -3 } else { 131 }),
    );
    let k = konst(&mut net, q8(dt, &[], vec![85]));
    let kf = add_dq(&mut net, k, dt, (1.0 / 510.0, 0));
    let operands = if constant_first { [kf, xf] } else { [xf, kf] };
    let mut y = layer(
        &mut net,
        Op::Binary(backplane_core::ops::BinaryOp::Mul),
        &operands,
    );
    if relu {
        y = layer(&mut net, Op::Unary(UnaryOp::Relu), &[y]);
    }
    // The multiplier 1 / (2 · 85): every odd input lands on half a quantum.
    let s = konst(&mut net, Tensor::scalar(0.0625f32 / 3.0));
    let z = konst(&mut net, zp(dt, if dt == DataType::I8 { 5 } else { 120 }));
    let op = Op::QuantizeLinear {
        axis: 1,
        to: dt,
        block_size: 0,
        saturate: true,
        requant: rule,
    };
    let t = layer(&mut net, op, &[y, s, z]);
    net.mark_output(t).unwrap();
    (net, x)
}

/// A multiplication by a dequantized 8-bit constant under the fixed-point rule is LiteRT's
/// builtin MUL as CpuRef folds it (`QMulFixedPoint`), not a table of the f32 chain (which
/// the backend test kit's QSqueezeExciteFixedPoint family found off by one to two quanta):
/// CpuAcc's binary layer computes it, int8 and uint8, either operand order, with and
/// without a ReLU.
#[test]
fn fixed_point_multiplication_by_a_constant_equals_cpu_ref() {
    let mut differ = 0;
    for dt in [DataType::I8, DataType::U8] {
        for dims in [vec![1, 1, 1, 1], vec![1, 17, 3, 5], vec![2, 3, 1, 7]] {
            for constant_first in [false, true] {
                for relu in [false, true] {
                    let (net, x) = mul_by_constant_net(
                        dt,
                        &dims,
                        constant_first,
                        relu,
                        Requantization::FixedPoint,
                    );
                    let mut r = Rng(dims.iter().product::<usize>() as u64 + u64::from(relu));
                    let input = all_bytes(&mut r, dt, &dims);
                    let what = format!("{dt} {dims:?} constant first {constant_first} relu {relu}");
                    let fixed = equal_on_both(&what, &net, x, input.clone(), "QLinearBinary");
                    let (n32, x32) =
                        mul_by_constant_net(dt, &dims, constant_first, relu, Requantization::F32);
                    let f32_out = run_reference(&n32, &HashMap::from([(x32, input)]));
                    differ += usize::from(f32_out[&n32.outputs()[0]].bytes() != fixed.as_slice());
                }
            }
        }
    }
    assert!(
        differ > 0,
        "the rules agree on every multiplication: the test tells nothing"
    );
}
