//! The harness shared by the CpuAcc-against-CpuRef tests: a seeded generator, one layer run
//! on CpuAcc (with garbage in its output buffers) and on CpuRef, and the comparison.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, dead_code)]

pub mod bn;
pub mod qconv;
pub mod qpair;

use backplane_backend_api::{Backend, LayerDesc, ReplacementLayer, SubgraphView, ValueRef};
use backplane_core::ops::{AutoPad, ConvDesc, Window};
use backplane_core::{DataType, LayerId, Network, Op, Tensor, TensorId, TensorInfo};
use backplane_cpu_acc::CpuAccBackend;
use std::collections::HashMap;
use std::sync::Arc;

/// A small deterministic generator (an LCG): the same inputs on every run.
pub struct Rng(pub u64);

impl Rng {
    /// The next 31 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }
    /// Uniform in [-1, 1].
    pub fn unit(&mut self) -> f32 {
        (self.next() % 2_000_001) as f32 / 1_000_000.0 - 1.0
    }
    /// An f32 tensor of `dims`, uniform in [-scale, scale].
    pub fn tensor(&mut self, dims: &[usize], scale: f32) -> Tensor {
        let n: usize = dims.iter().product();
        Tensor::from_vec(dims.to_vec(), (0..n).map(|_| self.unit() * scale).collect()).unwrap()
    }
    /// One of `v`.
    pub fn pick<T: Copy>(&mut self, v: &[T]) -> T {
        v[(self.next() % v.len() as u64) as usize]
    }
    /// `n` random bytes.
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// An 8-bit tensor (`dt` I8 or U8) of `dims` holding `bytes`.
/// DequantizeLinear to f32 along `axis` (per-axis parameters; any axis for per-tensor).
pub fn dq_op(axis: i64) -> Op {
    Op::DequantizeLinear {
        axis,
        to: DataType::F32,
        block_size: 0,
    }
}

/// Saturating QuantizeLinear to `to` along axis 1.
pub fn q_op(to: DataType) -> Op {
    Op::QuantizeLinear {
        axis: 1,
        to,
        block_size: 0,
        saturate: true,
        requant: backplane_core::quant::Requantization::F32,
    }
}

pub fn q8(dt: DataType, dims: &[usize], bytes: Vec<u8>) -> Tensor {
    Tensor::from_bytes(TensorInfo::new(dt, dims.to_vec()), &bytes).unwrap()
}

/// A zero point `v` of the 8-bit type `dt`, as a scalar.
pub fn zp(dt: DataType, v: i32) -> Tensor {
    match dt {
        DataType::I8 => Tensor::scalar(v as i8),
        _ => Tensor::scalar(v as u8),
    }
}

/// Adds constant `t` to `net` under a fresh name.
pub fn konst(net: &mut Network, t: Tensor) -> TensorId {
    let name = format!("k{}", net.tensors().len());
    net.add_constant(&name, t).unwrap()
}

/// Adds a layer of one output to `net` under a fresh name.
pub fn layer(net: &mut Network, op: Op, inputs: &[TensorId]) -> TensorId {
    let name = format!("l{}", net.layers().len());
    net.add_layer(&name, op, inputs).unwrap()[0]
}

/// Adds `DequantizeLinear(x; s, z)` to `net`.
pub fn add_dq(net: &mut Network, x: TensorId, dt: DataType, (s, z): (f32, i32)) -> TensorId {
    let sc = konst(net, Tensor::scalar(s));
    let zc = konst(net, zp(dt, z));
    layer(net, dq_op(1), &[x, sc, zc])
}

/// Adds `QuantizeLinear(t; s, z)` to `net`.
pub fn add_q(net: &mut Network, t: TensorId, dt: DataType, (s, z): (f32, i32)) -> TensorId {
    let sc = konst(net, Tensor::scalar(s));
    let zc = konst(net, zp(dt, z));
    layer(net, q_op(dt), &[t, sc, zc])
}

/// Every byte value, then random bytes, over `dims`.
pub fn all_bytes(r: &mut Rng, dt: DataType, dims: &[usize]) -> Tensor {
    let n: usize = dims.iter().product();
    let mut b = r.bytes(n);
    for (i, v) in b.iter_mut().take(256).enumerate() {
        *v = i as u8;
    }
    q8(dt, dims, b)
}

/// The type of a custom op (empty for other ops).
pub fn custom(op: &Op) -> &str {
    match op {
        Op::Custom(c) => c.op_type.as_str(),
        _ => "",
    }
}

/// `net` (input `x` fed `input`) on CpuRef and on CpuAcc, one and two threads, CpuAcc's one
/// substitution checked by `ops`: the output bytes must be equal.
pub fn same_output_bytes(
    what: &str,
    net: &Network,
    x: TensorId,
    input: Tensor,
    ops: impl Fn(&[Op]),
) {
    let feeds = HashMap::from([(x, input)]);
    let want = run_reference(net, &feeds);
    let y = net.outputs()[0];
    for threads in [1, 2] {
        let (got, replacement) = run_acc(net, &feeds, threads);
        ops(&replacement);
        assert_eq!(
            got[&y].bytes(),
            want[&y].bytes(),
            "{what}, {threads} thread(s): {replacement:?}"
        );
    }
}

/// An int8 `[1, H, W, C]` input `x` and its transpose to NCHW (how the TFLite importer hands
/// a channels-last image to channels-first layers): `(x, transposed)`.
pub fn nhwc_image(net: &mut Network, [h, w, c]: [usize; 3]) -> (TensorId, TensorId) {
    let info = q8(DataType::I8, &[1, h, w, c], vec![0; h * w * c])
        .info()
        .clone();
    let x = net.add_input("x", info).unwrap();
    let perm = Op::Transpose {
        perm: vec![0, 3, 1, 2],
    };
    (x, layer(net, perm, &[x]))
}

/// Assert that an optimized int8 region's ops hold one Transpose: its exit (the layers
/// between stayed channels-last).
pub fn only_the_exit_transpose(what: &str, ops: &[Op]) {
    let transposes = ops
        .iter()
        .filter(|o| matches!(o, Op::Transpose { .. }))
        .count();
    assert_eq!(transposes, 1, "{what}: only the exit: {ops:?}");
}

/// A 1×1 convolution, stride 1, no padding, one group.
pub fn pointwise() -> Op {
    Op::Conv(ConvDesc {
        window: Window {
            kernel: vec![1, 1],
            strides: vec![1, 1],
            dilations: vec![1, 1],
            pads: vec![0; 4],
            auto_pad: AutoPad::NotSet,
        },
        group: 1,
    })
}

/// A QDQ 1×1 convolution of int8 `x` (quantization `xq`) to `ws.len()` channels: int8
/// weights `w` (`[m, c, 1, 1]` bytes) with per-channel scales `ws`, an int32 bias on scales
/// `ws · xq.0`, the output quantized to int8 on `yq`.
pub fn qdq_pointwise(
    net: &mut Network,
    x: TensorId,
    xq: (f32, i32),
    w: Vec<u8>,
    ws: Vec<f32>,
    bias: Vec<i32>,
    yq: (f32, i32),
) -> TensorId {
    let m = ws.len();
    let c = w.len() / m.max(1);
    let xf = add_dq(net, x, DataType::I8, xq);
    let wt = konst(net, q8(DataType::I8, &[m, c, 1, 1], w));
    let bs: Vec<f32> = ws.iter().map(|s| s * xq.0).collect();
    let wsc = konst(net, Tensor::from_vec(vec![m], ws).unwrap());
    let wz = konst(net, q8(DataType::I8, &[m], vec![0; m]));
    let dq0 = Op::DequantizeLinear {
        axis: 0,
        to: DataType::F32,
        block_size: 0,
    };
    let wf = layer(net, dq0.clone(), &[wt, wsc, wz]);
    let bc = konst(net, Tensor::from_vec(vec![m], bias).unwrap());
    let bs = konst(net, Tensor::from_vec(vec![m], bs).unwrap());
    let bz = konst(net, Tensor::from_vec(vec![m], vec![0i32; m]).unwrap());
    let bf = layer(net, dq0, &[bc, bs, bz]);
    let y = layer(net, pointwise(), &[xf, wf, bf]);
    add_q(net, y, DataType::I8, yq)
}

/// Run `op` on CpuAcc with `threads`; `constant[i]` makes input i a load-time constant.
pub fn acc(op: &Op, inputs: &[&Tensor], constant: &[bool], threads: usize) -> Vec<Tensor> {
    run_desc(&layer_desc(op, inputs, constant), inputs, threads)
}

/// The description of a layer `under_test` computing `op` on `inputs`, those marked in
/// `constant` given as load-time constants.
pub fn layer_desc(op: &Op, inputs: &[&Tensor], constant: &[bool]) -> LayerDesc {
    let infos: Vec<TensorInfo> = inputs.iter().map(|t| t.info().clone()).collect();
    let refs: Vec<&TensorInfo> = infos.iter().collect();
    let outputs = op.infer(&refs).unwrap();
    LayerDesc {
        name: "under_test".into(),
        op: op.clone(),
        inputs: infos,
        outputs,
        constants: inputs
            .iter()
            .enumerate()
            .map(|(i, t)| {
                constant
                    .get(i)
                    .copied()
                    .unwrap_or(false)
                    .then(|| Arc::new((*t).clone()))
            })
            .collect(),
    }
}

/// Run the layer `desc` on CpuAcc with `threads` (checking that CpuAcc claims it), the
/// output buffers filled with all-ones bits first.
pub fn run_desc(desc: &LayerDesc, inputs: &[&Tensor], threads: usize) -> Vec<Tensor> {
    let backend = CpuAccBackend::with_threads(threads);
    let support = backend.layer_support().is_layer_supported(desc);
    assert!(support.is_supported(), "{}: {support:?}", desc.op.name());
    let factory = backend.create_workload_factory(None).unwrap();
    let workload = factory.create_workload(desc).unwrap();
    let mut outs: Vec<Tensor> = desc
        .outputs
        .iter()
        .map(|i| {
            // Garbage in the output buffers: kernels must not rely on zeroed memory (all
            // bits set: NaN for floats, -1 or the largest value for integers).
            let mut t = Tensor::zeros(i.clone()).unwrap();
            t.bytes_mut().fill(0xff);
            t
        })
        .collect();
    let views: Vec<_> = inputs.iter().map(|t| t.view()).collect();
    let mut out_views: Vec<_> = outs.iter_mut().map(Tensor::view_mut).collect();
    workload.execute(&views, &mut out_views).unwrap();
    outs
}

/// The one layer `backend` replaces all of `net` with (asserted: one substitution, no layer
/// left untouched), as the runtime builds it: its description and its input values — a
/// network input's from `feeds`, a constant's (existing or new) otherwise.
pub fn sole_replacement(
    backend: &CpuAccBackend,
    net: &Network,
    feeds: &[(TensorId, &Tensor)],
) -> (LayerDesc, Vec<Tensor>) {
    let all = (0..net.layers().len()).map(LayerId).collect();
    let views = backend.optimize_subgraph(&SubgraphView::new(net, all));
    assert_eq!(views.substitutions.len(), 1, "one substitution");
    assert!(views.untouched.is_empty(), "every layer fused");
    let rep = &views.substitutions[0].replacement[0];
    let (mut inputs, mut constants) = (Vec::new(), Vec::new());
    for v in &rep.inputs {
        let (t, k) = match v {
            ValueRef::Existing(t) => match feeds.iter().find(|(id, _)| id == t) {
                Some((_, x)) => ((*x).clone(), None),
                None => {
                    let k = net.tensor(*t).constant().expect("a constant").clone();
                    ((*k).clone(), Some(k))
                }
            },
            ValueRef::NewConstant(k) => ((**k).clone(), Some(k.clone())),
            ValueRef::Produced { .. } => panic!("a single-layer replacement"),
        };
        inputs.push(t);
        constants.push(k);
    }
    let output = rep.outputs[0].expect("the replacement writes a network tensor");
    let desc = LayerDesc {
        name: rep.name.clone(),
        op: rep.op.clone(),
        inputs: inputs.iter().map(|t| t.info().clone()).collect(),
        outputs: vec![net.tensor(output).info.clone()],
        constants,
    };
    (desc, inputs)
}

/// `op` run by CpuRef, the oracle.
pub fn reference(op: &Op, inputs: &[&Tensor]) -> Vec<Tensor> {
    backplane_cpu_ref::evaluate(op, inputs).unwrap()
}

/// `got` equals `want` within `atol + rtol·|want|` per element (NaN where NaN).
pub fn close(what: &str, got: &Tensor, want: &Tensor, rtol: f64, atol: f64) {
    assert_eq!(got.shape(), want.shape(), "{what}");
    for (i, (g, w)) in got.to_f64_vec().iter().zip(want.to_f64_vec()).enumerate() {
        let ok = if w.is_nan() {
            g.is_nan()
        } else if w.is_infinite() {
            *g == w
        } else {
            (g - w).abs() <= atol + rtol * w.abs()
        };
        assert!(ok, "{what}: element {i}: got {g}, expected {w}");
    }
}

/// Check `op` on CpuAcc (both thread counts, all constant choices given) against CpuRef.
pub fn check(what: &str, op: &Op, inputs: &[&Tensor], constants: &[&[bool]], rtol: f64, atol: f64) {
    let want = reference(op, inputs);
    for threads in [1, 2] {
        for c in constants {
            let got = acc(op, inputs, c, threads);
            for (g, w) in got.iter().zip(&want) {
                close(
                    &format!("{what} threads={threads} const={c:?}"),
                    g,
                    w,
                    rtol,
                    atol,
                );
            }
        }
    }
}

/// A convolution `op` of `x` and weights `w` against CpuRef with the bias `b` (weights and
/// bias constant, then all given at run time) and without it; `what` names the case.
pub fn check_conv(what: &str, op: &Op, x: &Tensor, w: &Tensor, b: &Tensor, atol: f64) {
    let both = [&[false, true, true][..], &[false, false, false][..]];
    check(what, op, &[x, w, b], &both, 1e-4, atol);
    check(
        &format!("{what} no bias"),
        op,
        &[x, w],
        &[&[false, true]],
        1e-4,
        atol,
    );
}

/// A 2-D convolution of a `k`×`k` kernel, stride 1, padding that keeps the size (`k` odd),
/// `group` groups.
pub fn same_conv(k: usize, group: usize) -> Op {
    let p = k / 2;
    Op::Conv(ConvDesc {
        window: Window {
            kernel: vec![k, k],
            strides: vec![1, 1],
            dilations: vec![1, 1],
            pads: vec![p, p, p, p],
            auto_pad: AutoPad::NotSet,
        },
        group,
    })
}

/// Every layer of `net` on CpuRef, in order, except those whose outputs `feeds` already
/// gives: the value of each tensor.
pub fn run_reference(
    net: &Network,
    feeds: &HashMap<TensorId, Tensor>,
) -> HashMap<TensorId, Tensor> {
    let mut values = feeds.clone();
    for layer in net.layers() {
        // A layer whose outputs are given (a run started part way) is not run again.
        if layer.outputs.iter().all(|t| values.contains_key(t)) {
            continue;
        }
        let inputs: Vec<Tensor> = layer
            .inputs
            .iter()
            .map(|t| match values.get(t) {
                Some(v) => v.clone(),
                None => (**net.tensor(*t).constant().unwrap()).clone(),
            })
            .collect();
        let refs: Vec<&Tensor> = inputs.iter().collect();
        for (t, v) in layer.outputs.iter().zip(reference(&layer.op, &refs)) {
            values.insert(*t, v);
        }
    }
    values
}

/// A substitution's replacement layers run one after the other as CpuAcc workloads, the
/// tensors they read outside it taken from `values` (or the network's constants): the
/// tensors they produce.
pub fn run_replacement(
    net: &Network,
    values: &HashMap<TensorId, Tensor>,
    rep: &[ReplacementLayer],
    threads: usize,
) -> HashMap<TensorId, Tensor> {
    let mut produced: Vec<Vec<Tensor>> = Vec::new();
    let mut outputs = HashMap::new();
    for layer in rep {
        let (inputs, constants) = replacement_inputs(net, values, &produced, &layer.inputs);
        let infos: Vec<_> = inputs.iter().map(|t| t.info().clone()).collect();
        let info_refs: Vec<_> = infos.iter().collect();
        let desc = LayerDesc {
            name: layer.name.clone(),
            op: layer.op.clone(),
            inputs: infos.clone(),
            outputs: layer.op.infer(&info_refs).unwrap(),
            constants,
        };
        let refs: Vec<&Tensor> = inputs.iter().collect();
        let out = run_desc(&desc, &refs, threads);
        for (t, v) in layer.outputs.iter().zip(&out) {
            if let Some(t) = t {
                outputs.insert(*t, v.clone());
            }
        }
        produced.push(out);
    }
    outputs
}

/// The replacement layers of CpuAcc's one substitution of `net`, run one after the other as
/// CpuAcc workloads: the network's outputs, and the replacement's ops.
pub fn run_acc(
    net: &Network,
    feeds: &HashMap<TensorId, Tensor>,
    threads: usize,
) -> (HashMap<TensorId, Tensor>, Vec<Op>) {
    let all: Vec<LayerId> = (0..net.layers().len()).map(LayerId).collect();
    let views =
        CpuAccBackend::with_threads(threads).optimize_subgraph(&SubgraphView::new(net, all));
    assert_eq!(views.substitutions.len(), 1, "one region: {views:?}");
    assert!(views.untouched.is_empty(), "every layer in the region");
    let rep = &views.substitutions[0].replacement;
    let outputs = run_replacement(net, feeds, rep, threads);
    (outputs, rep.iter().map(|l| l.op.clone()).collect())
}

/// The values of a replacement layer's inputs, and which are constants: a network tensor's
/// value from `values` (its constant in `net` when it has none there), a new constant, or an
/// output of an earlier replacement layer from `produced`.
pub fn replacement_inputs(
    net: &Network,
    values: &HashMap<TensorId, Tensor>,
    produced: &[Vec<Tensor>],
    ins: &[ValueRef],
) -> (Vec<Tensor>, Vec<Option<Arc<Tensor>>>) {
    ins.iter()
        .map(|v| match v {
            ValueRef::Existing(t) => match values.get(t) {
                Some(x) => (x.clone(), None),
                None => {
                    let k = net.tensor(*t).constant().unwrap().clone();
                    ((*k).clone(), Some(k))
                }
            },
            ValueRef::NewConstant(k) => ((**k).clone(), Some(k.clone())),
            ValueRef::Produced { layer, slot } => (produced[*layer][*slot].clone(), None),
        })
        .unzip()
}

/// A QDQ 1×1 convolution of `c` channels that copies its input: identity int8 weights of
/// scale 1, a zero bias, the output quantized as the input. Its integer result needs no
/// rounding, so it is exact under any requantization rule (CpuAcc's int8 convolution
/// rounds as XNNPACK does, which may differ from the f32 chain by a quantum elsewhere), and
/// the layer after it is checked alone.
pub fn conv_copy(net: &mut Network, x: TensorId, xq: (f32, i32), c: usize) -> TensorId {
    let eye: Vec<u8> = (0..c * c).map(|i| u8::from(i / c == i % c)).collect();
    qdq_pointwise(net, x, xq, eye, vec![1.0; c], vec![0; c], xq)
}
