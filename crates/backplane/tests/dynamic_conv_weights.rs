//! Convolution weights packed once across a `DynamicNetwork`'s plans: a CNN served at several
//! batch sizes and image sizes equals separate static imports bit for bit, and CpuAcc's
//! packing counts show each convolution's prepared weights made once per form and reused by
//! every later plan (`backplane_cpu_acc::weights`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use backplane::cpu_acc::weights::PackingStats;
use backplane::cpu_acc::CpuAccBackend;
use backplane::onnx::proto::{
    attribute_proto::AttributeType, AttributeProto, GraphProto, ModelProto, NodeProto,
    OperatorSetIdProto, TensorProto, ValueInfoProto,
};
use backplane::{DynamicNetwork, ImportOptions, Tensor};
use std::sync::Arc;
use support::{onnx_f32_input, repo, runtime_with};

/// Deterministic values in [-1, 1).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(1);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn ints(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Ints as i32),
        ints: v.to_vec(),
        ..Default::default()
    }
}

fn int(name: &str, v: i64) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Int as i32),
        i: Some(v),
        ..Default::default()
    }
}

fn weight(name: &str, dims: &[usize], seed: u64) -> TensorProto {
    let n = dims.iter().product();
    TensorProto {
        name: Some(name.into()),
        data_type: Some(1),
        dims: dims.iter().map(|&d| d as i64).collect(),
        float_data: values(n, seed).iter().map(|v| v * 0.3).collect(),
        ..Default::default()
    }
}

/// One convolution node `name` reading `x`, with weights `[m, c / group, k, k]` and a bias.
fn conv(
    name: &str,
    x: &str,
    (c, m, k): (usize, usize, usize),
    (stride, pad, group): (i64, i64, i64),
    seed: u64,
) -> (NodeProto, Vec<TensorProto>) {
    let (w, b) = (format!("{name}.w"), format!("{name}.b"));
    let node = NodeProto {
        op_type: Some("Conv".into()),
        name: Some(name.into()),
        input: vec![x.into(), w.clone(), b.clone()],
        output: vec![name.into()],
        attribute: vec![
            ints("kernel_shape", &[k as i64, k as i64]),
            ints("strides", &[stride, stride]),
            ints("pads", &[pad; 4]),
            int("group", group),
        ],
        ..Default::default()
    };
    let cg = c / group as usize;
    let inits = vec![
        weight(&w, &[m, cg, k, k], seed),
        weight(&b, &[m], seed + 100),
    ];
    (node, inits)
}

fn relu(x: &str, y: &str) -> NodeProto {
    NodeProto {
        op_type: Some("Relu".into()),
        name: Some(y.into()),
        input: vec![x.into()],
        output: vec![y.into()],
        ..Default::default()
    }
}

/// One convolution layer of a test model: name, input, (c, m, k), (stride, pad, group),
/// and whether a Relu follows (its output `<name>_r`).
type Layer = (
    &'static str,
    &'static str,
    (usize, usize, usize),
    (i64, i64, i64),
    bool,
);

/// A model of `layers` on x `[n, channels, h, w]` (n, h, w symbolic); its output is the last
/// layer's.
fn model(channels: &str, layers: &[Layer]) -> ModelProto {
    let mut nodes = Vec::new();
    let mut inits = Vec::new();
    let mut last = String::new();
    for (i, &(name, x, shape, window, act)) in layers.iter().enumerate() {
        let (node, w) = conv(name, x, shape, window, i as u64 + 1);
        nodes.push(node);
        inits.extend(w);
        last = name.to_string();
        if act {
            last = format!("{name}_r");
            nodes.push(relu(name, &last));
        }
    }
    let y = ValueInfoProto {
        name: Some(last),
        ..Default::default()
    };
    ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(17),
        }],
        graph: Some(GraphProto {
            name: Some("cnn".into()),
            node: nodes,
            initializer: inits,
            input: vec![onnx_f32_input("x", &["n", channels, "h", "w"])],
            output: vec![y],
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// x `[n, 32, h, w]` → a Winograd-eligible 3×3 convolution (32 → 32) → Relu → a 3×3
/// depthwise one → a pointwise one (32 → 48) → BatchNormalization → Relu → a 3×3 stride-2
/// one (48 → 16): NCHW layers (no channels-last region: the depthwise convolution is not
/// fused); the normalization is folded into the pointwise weights anew in every plan.
fn cnn() -> ModelProto {
    let mut m = model(
        "32",
        &[
            ("wino", "x", (32, 32, 3), (1, 1, 1), true),
            ("dw", "wino_r", (32, 32, 3), (1, 1, 32), false),
            ("pw", "dw", (32, 48, 1), (1, 0, 1), true),
            ("down", "pw_r", (48, 16, 3), (2, 1, 1), false),
        ],
    );
    with_batch_norm(&mut m, "pw", 48);
    m
}

/// A BatchNormalization (`[m]` constant parameters) inserted after convolution `conv`: its
/// readers read the normalization's output. CpuAcc folds it into the weights in every plan.
fn with_batch_norm(model: &mut ModelProto, conv: &str, m: usize) {
    let graph = model.graph.as_mut().unwrap();
    let out = format!("{conv}_bn");
    for node in &mut graph.node {
        for input in &mut node.input {
            if input == conv {
                *input = out.clone();
            }
        }
    }
    let names = ["scale", "bias", "mean", "var"].map(|p| format!("{out}.{p}"));
    for (i, name) in names.iter().enumerate() {
        let mut t = weight(name, &[m], 50 + i as u64);
        if i == 3 {
            // A positive variance.
            t.float_data.iter_mut().for_each(|v| *v = v.abs() + 0.5);
        }
        graph.initializer.push(t);
    }
    let at = graph
        .node
        .iter()
        .position(|n| n.name.as_deref() == Some(conv))
        .unwrap();
    let mut inputs = vec![conv.to_string()];
    inputs.extend(names);
    graph.node.insert(
        at + 1,
        NodeProto {
            op_type: Some("BatchNormalization".into()),
            name: Some(out.clone()),
            input: inputs,
            output: vec![out],
            ..Default::default()
        },
    );
}

/// A MobileNet-style body, every layer followed by a Relu: x `[n, 3, h, w]` → a stride-2
/// 3×3 stem (3 → 16) → depthwise → pointwise (16 → 24) → depthwise → pointwise (24 → 16):
/// CpuAcc runs it as a channels-last region.
fn mobile() -> ModelProto {
    model(
        "3",
        &[
            ("stem", "x", (3, 16, 3), (2, 1, 1), true),
            ("dw1", "stem_r", (16, 16, 3), (1, 1, 16), true),
            ("pw1", "dw1_r", (16, 24, 1), (1, 0, 1), true),
            ("dw2", "pw1_r", (24, 24, 3), (1, 1, 24), true),
            ("pw2", "dw2_r", (24, 16, 1), (1, 0, 1), true),
        ],
    )
}

/// `model` imported for `x`'s shape alone, optimized and loaded on a fresh runtime (a CpuAcc
/// with `threads` threads), run on `x`.
fn static_run(model: &ModelProto, name: &str, x: &Tensor, threads: usize) -> Vec<Tensor> {
    let rt = runtime_with(&CpuAccBackend::with_threads(threads));
    let mut options = ImportOptions::default().with_input_shape(name, x.shape().dims().to_vec());
    options.evaluator = Some(Arc::new(backplane::cpu_ref::CpuRefEvaluator));
    let network = backplane::onnx::import_model(model.clone(), None, &options).unwrap();
    let optimized = rt
        .optimize(&network, &backplane::default_optimizer_options())
        .unwrap();
    let id = rt.load_network(optimized).unwrap();
    let out = rt.execute(id, &[(name, x)]).unwrap();
    out.into_iter().map(|(_, t)| t).collect()
}

/// The counts of the convolution and int8 kinds of packing (every kind but the f32 MatMul
/// and Gemm B panels).
fn conv_kinds(acc: &CpuAccBackend) -> Vec<(&'static str, PackingStats)> {
    acc.packing_stats_by_kind()
        .into_iter()
        .filter(|(k, _)| !k.starts_with("matmul_b") && !k.starts_with("gemm"))
        .collect()
}

/// Serve `model` at `shapes` (then the first again) on one dynamic network; each output must
/// equal a static import's bit for bit. Returns the convolution packing counts after each
/// execution.
fn serve(
    model: ModelProto,
    name: &str,
    shapes: &[Vec<usize>],
    threads: usize,
    input: impl Fn(&[usize]) -> Tensor,
) -> (CpuAccBackend, Vec<Vec<(&'static str, PackingStats)>>) {
    let acc = CpuAccBackend::with_threads(threads);
    let rt = runtime_with(&acc);
    let net = DynamicNetwork::from_model(
        &rt,
        model.clone(),
        None,
        &ImportOptions::default(),
        backplane::default_optimizer_options(),
    );
    let mut after = Vec::new();
    // The constants of the first plan's network, by name.
    let mut first: Vec<(String, Arc<Tensor>)> = Vec::new();
    let mut all = shapes.to_vec();
    all.extend(shapes.first().cloned());
    for dims in &all {
        let x = input(dims);
        let got: Vec<Tensor> = net
            .execute(&[(name, &x)])
            .unwrap()
            .into_iter()
            .map(|(_, t)| t)
            .collect();
        let want = static_run(&model, name, &x, threads);
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(g.shape(), w.shape(), "{dims:?}");
            assert_eq!(
                g.bytes(),
                w.bytes(),
                "{dims:?}: the dynamic network's output differs from a static import's"
            );
        }
        after.push(conv_kinds(&acc));
        // A BatchNormalization after a convolution was folded into its weights (so the test
        // sees their packing keyed by the original weights, not a plan's folded copy).
        let (plan, _) = net.plan(&[(name, &x)]).unwrap();
        let optimized = plan.optimized.as_ref().unwrap();
        assert!(
            !optimized
                .network()
                .layers()
                .iter()
                .any(|l| matches!(l.op, backplane::core::Op::BatchNormalization { .. })),
            "{dims:?}: a BatchNormalization was left unfolded"
        );
        // Every constant of a later plan's network that the first plan's has too (the
        // model's weights, the folded ones) is the same tensor, not a copy.
        let constants = optimized
            .network()
            .tensors()
            .iter()
            .filter_map(|t| match &t.kind {
                backplane::core::TensorKind::Constant(c) => Some((t.name.clone(), c.clone())),
                _ => None,
            });
        if first.is_empty() {
            first = constants.collect();
        } else {
            for (name, c) in constants {
                if let Some((_, f)) = first.iter().find(|(n, _)| *n == name) {
                    assert!(
                        Arc::ptr_eq(f, &c),
                        "{dims:?}: constant {name} is a copy of the first plan's"
                    );
                }
            }
        }
    }
    assert_eq!(net.stats().misses, shapes.len() as u64);
    // The repeated shape, and the look-up after each execution.
    assert_eq!(net.stats().hits, all.len() as u64 + 1);
    (acc, after)
}

fn total(kinds: &[(&'static str, PackingStats)]) -> PackingStats {
    kinds
        .iter()
        .fold(PackingStats::default(), |a, (_, s)| PackingStats {
            packed: a.packed + s.packed,
            reused: a.reused + s.reused,
        })
}

/// Batch sizes 1, 2, 3 and 1 again: every convolution (Winograd, depthwise, pointwise,
/// strided) prepares its weights for the first plan only; each later plan reuses all of them.
#[test]
fn conv_weights_are_packed_once_across_batch_sizes() {
    let shapes = [
        vec![1, 32, 16, 16],
        vec![2, 32, 16, 16],
        vec![3, 32, 16, 16],
    ];
    let x = |d: &[usize]| Tensor::from_vec(d.to_vec(), values(d.iter().product(), 9)).unwrap();
    let (_acc, after) = serve(cnn(), "x", &shapes, 1, x);
    // Four convolutions' weights and biases, and the normalization folded into one of them
    // (its weights and bias, made once and shared by the plans' networks).
    packed_by_the_first_plan_only(&after, 10);
    for kind in ["batch_norm_bias", "batch_norm_weights", "conv_bias"] {
        assert!(
            after[0].iter().any(|(k, _)| *k == kind),
            "{kind}: {after:?}"
        );
    }
    let shapes = [vec![1, 3, 24, 24], vec![2, 3, 24, 24], vec![3, 3, 24, 24]];
    let (_acc, nhwc) = serve(mobile(), "x", &shapes, 1, x);
    assert!(
        nhwc[0].iter().any(|(k, _)| k.starts_with("nhwc_")),
        "the MobileNet-style body runs channels-last: {nhwc:?}"
    );
    // Five convolutions' weights and biases.
    packed_by_the_first_plan_only(&nhwc, 10);
}

/// Every kind of packing counted after the first execution (`forms` forms in all), and
/// nothing packed since; the plans after the first reused every form it made (the last
/// execution is a cache hit).
fn packed_by_the_first_plan_only(after: &[Vec<(&'static str, PackingStats)>], forms: u64) {
    eprintln!("conv packing after each run: {after:?}");
    let first = total(&after[0]);
    assert_eq!(
        first.packed, forms,
        "the first plan prepares each convolution's weights once: {after:?}"
    );
    for (i, kinds) in after.iter().enumerate().skip(1) {
        let kinds_first: Vec<_> = after[0].iter().map(|(k, s)| (*k, s.packed)).collect();
        let kinds_now: Vec<_> = kinds.iter().map(|(k, s)| (*k, s.packed)).collect();
        assert_eq!(kinds_now, kinds_first, "run {i} packed again: {after:?}");
    }
    // Plans 2 and 3 reuse every form the first made; the repeat is a cache hit.
    assert_eq!(total(&after[3]).reused, 2 * first.packed, "{after:?}");
}

/// Image sizes 16×16, 20×20 and 13×13 (and batch 2): the forms that do not depend on the
/// plane (Winograd, depthwise, GEMM, channel-lanes blocks) are made by the first plan only
/// (a dilated layer's per-tap weights would be made again for a plane with other live taps:
/// `tap_region_weights_are_shared_across_image_sizes`).
#[test]
fn conv_weights_are_shared_across_image_sizes() {
    let shapes = [
        vec![1, 32, 16, 16],
        vec![1, 32, 20, 20],
        vec![2, 32, 13, 13],
    ];
    let x = |d: &[usize]| Tensor::from_vec(d.to_vec(), values(d.iter().product(), 5)).unwrap();
    let (_acc, after) = serve(cnn(), "x", &shapes, 1, x);
    plane_free_forms_packed_once(&after);
    assert!(
        after[0].iter().any(|(k, _)| *k == "conv_winograd_f4"),
        "the 3x3 layer takes the Winograd path: {after:?}"
    );
    let shapes = [vec![1, 3, 24, 24], vec![1, 3, 32, 32], vec![2, 3, 18, 18]];
    let (_acc, nhwc) = serve(mobile(), "x", &shapes, 1, x);
    plane_free_forms_packed_once(&nhwc);
    // The channels-last first layer takes the channel lanes with AVX-512 only.
    let lanes = backplane::cpu_acc::simd::has_avx512().then_some("nhwc_channel_lanes");
    for kind in std::iter::once("nhwc_depthwise").chain(lanes) {
        assert!(
            nhwc[0].iter().any(|(k, _)| *k == kind),
            "{kind} (a channels-last body and its first layer): {nhwc:?}"
        );
    }
}

/// The kinds of packing whose form does not depend on the plane (all but the tap-region
/// weights, which depend on the live taps) were made by the first plan only.
fn plane_free_forms_packed_once(after: &[Vec<(&'static str, PackingStats)>]) {
    eprintln!("conv packing after each run: {after:?}");
    let last = &after[after.len() - 1];
    let by_plane = |kind: &str| kind.contains("tap_regions");
    for (kind, s) in last {
        let first = after[0].iter().find(|(k, _)| k == kind);
        if !by_plane(kind) {
            assert_eq!(
                first.map(|(_, f)| f.packed),
                Some(s.packed),
                "{kind}: made by the first plan only, for every image size: {after:?}"
            );
        }
    }
    assert!(
        total(last).reused >= 2,
        "later plans reused the first plan's forms: {after:?}"
    );
}

/// The QDQ model of testdata/qdq_entry (an int8 stem, depthwise and pointwise convolution)
/// with its input's batch and plane made symbolic.
fn qdq_model() -> ModelProto {
    symbolic("qdq_entry", &["n", "3", "h", "w"])
}

/// The model of testdata/`dir` with its input `x` of `dims` (symbols allowed).
fn symbolic(dir: &str, dims: &[&str]) -> ModelProto {
    let path = repo().join("testdata").join(dir).join("model.onnx");
    let mut model = backplane::onnx::decode_model_file(&path).unwrap();
    let graph = model.graph.as_mut().unwrap();
    graph.input[0] = onnx_f32_input("x", dims);
    // Shapes inferred at the static size would contradict the others.
    graph.value_info.clear();
    for o in &mut graph.output {
        o.r#type = None;
    }
    model
}

/// The int8 QDQ convolutions (folded into CpuAcc's int8 layers, channels-last) pack their
/// weights once for batch sizes 1, 2, 3 and plane sizes 13×11 and 17×9.
#[test]
fn int8_conv_weights_are_packed_once() {
    let shapes = [vec![1, 3, 13, 11], vec![2, 3, 13, 11], vec![3, 3, 17, 9]];
    let x = |d: &[usize]| Tensor::from_vec(d.to_vec(), values(d.iter().product(), 3)).unwrap();
    let (acc, after) = serve(qdq_model(), "x", &shapes, 1, x);
    eprintln!("int8 conv packing after each run: {after:#?}");
    let int8: Vec<_> = after
        .iter()
        .map(|kinds| {
            kinds
                .iter()
                .filter(|(k, _)| k.starts_with("qconv"))
                .map(|(k, s)| (*k, *s))
                .collect::<Vec<_>>()
        })
        .collect();
    // The stem and the pointwise layer as GEMM B panels and their requantizations, the
    // depthwise layer's weights with its bias and requantization folded in.
    let kinds: Vec<_> = int8[0].iter().map(|(k, s)| (*k, s.packed)).collect();
    assert_eq!(
        kinds,
        vec![
            ("qconv_nhwc_b", 2),
            ("qconv_nhwc_depthwise", 1),
            ("qconv_nhwc_requant", 2)
        ],
        "the folded int8 convolutions packed through the cache: {:?}",
        acc.packing_stats_by_kind()
    );
    for kinds in &int8[1..] {
        let packed: Vec<_> = kinds.iter().map(|(k, s)| (*k, s.packed)).collect();
        let first: Vec<_> = int8[0].iter().map(|(k, s)| (*k, s.packed)).collect();
        assert_eq!(
            packed, first,
            "a later plan packed int8 weights again: {int8:?}"
        );
    }
    assert!(
        total(&int8[3]).reused >= 2 * total(&int8[0]).packed,
        "{int8:?}"
    );
}

/// x `[n, 32, h, w]` → a grouped 3×3 convolution (4 groups, 32 → 32) → Relu → a dilated
/// 3×3 one (dilation 2, 32 → 32; at 15×15 the im2col GEMM with packed weight panels).
fn grouped_and_dilated() -> ModelProto {
    let mut m = model(
        "32",
        &[
            ("grouped", "x", (32, 32, 3), (1, 1, 4), true),
            ("dilated", "grouped_r", (32, 32, 3), (1, 2, 1), false),
        ],
    );
    let graph = m.graph.as_mut().unwrap();
    let node = graph
        .node
        .iter_mut()
        .find(|n| n.name.as_deref() == Some("dilated"))
        .unwrap();
    node.attribute.push(ints("dilations", &[2, 2]));
    m
}

/// Batch sizes 1, 2, 3 and 1 again at one plane: the grouped convolution and the dilated one
/// prepare their weights for the first plan only, and the later plans reuse them all.
#[test]
fn grouped_and_dilated_conv_weights_are_packed_once_across_batch_sizes() {
    let shapes = [
        vec![1, 32, 15, 15],
        vec![2, 32, 15, 15],
        vec![3, 32, 15, 15],
    ];
    let x = |d: &[usize]| Tensor::from_vec(d.to_vec(), values(d.iter().product(), 11)).unwrap();
    let (_acc, after) = serve(grouped_and_dilated(), "x", &shapes, 1, x);
    eprintln!("conv packing after each run: {after:?}");
    let first = total(&after[0]);
    assert!(first.packed >= 2, "both convolutions packed: {after:?}");
    assert!(
        after[0].iter().any(|(k, _)| *k == "conv_grouped"),
        "the grouped path: {after:?}"
    );
    for (i, kinds) in after.iter().enumerate().skip(1) {
        let now: Vec<_> = kinds.iter().map(|(k, s)| (*k, s.packed)).collect();
        let then: Vec<_> = after[0].iter().map(|(k, s)| (*k, s.packed)).collect();
        assert_eq!(now, then, "run {i} packed again: {after:?}");
    }
    assert_eq!(total(&after[3]).reused, 2 * first.packed, "{after:?}");
}

/// A node `op` named `name` reading `inputs`, writing `name`.
fn node(op: &str, name: &str, inputs: &[&str], attribute: Vec<AttributeProto>) -> NodeProto {
    NodeProto {
        op_type: Some(op.into()),
        name: Some(name.into()),
        input: inputs.iter().map(|&i| i.to_string()).collect(),
        output: vec![name.into()],
        attribute,
        ..Default::default()
    }
}

/// A constant of ONNX type `data_type` (2 uint8, 3 int8, 6 int32) held as int32 values.
fn ints_of(name: &str, data_type: i32, dims: &[usize], v: Vec<i32>) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        data_type: Some(data_type),
        dims: dims.iter().map(|&d| d as i64).collect(),
        int32_data: v,
        ..Default::default()
    }
}

fn floats_of(name: &str, dims: &[usize], v: Vec<f32>) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        data_type: Some(1),
        dims: dims.iter().map(|&d| d as i64).collect(),
        float_data: v,
        ..Default::default()
    }
}

/// Scale of the int8 test models' activations (input and every layer's output).
const ACT_SCALE: f32 = 0.02;

/// `x` quantized to uint8 (zero point 128) and dequantized again as `<x>_dq`: the nodes and
/// their constants.
fn quantized(x: &str) -> (Vec<NodeProto>, Vec<TensorProto>) {
    let (s, z) = (format!("{x}_s"), format!("{x}_z"));
    let (q, dq) = (format!("{x}_q"), format!("{x}_dq"));
    let nodes = vec![
        node("QuantizeLinear", &q, &[x, &s, &z], vec![]),
        node("DequantizeLinear", &dq, &[&q, &s, &z], vec![]),
    ];
    let inits = vec![
        floats_of(&s, &[], vec![ACT_SCALE]),
        ints_of(&z, 2, &[], vec![128]),
    ];
    (nodes, inits)
}

/// The int8 weights `<name>.w` of `dims` (per output channel along axis 0: scales varying by
/// channel, zero points 0) and an int32 bias `<name>.b` of `dims[0]` values dequantized by
/// the products of the scales, as quantizers write them: the nodes (dequantizations named
/// `<name>.wd`, `<name>.bd`) and constants.
fn int8_weights(name: &str, dims: &[usize], seed: u64) -> (Vec<NodeProto>, Vec<TensorProto>) {
    let m = dims[0];
    let n: usize = dims.iter().product();
    let w: Vec<i32> = values(n, seed).iter().map(|v| (v * 120.0) as i32).collect();
    let ws: Vec<f32> = (0..m).map(|c| 0.004 + 0.0005 * (c % 5) as f32).collect();
    let bias: Vec<i32> = values(m, seed + 7)
        .iter()
        .map(|v| (v * 900.0) as i32)
        .collect();
    let bs: Vec<f32> = ws.iter().map(|s| s * ACT_SCALE).collect();
    let p = |s: &str| format!("{name}.{s}");
    let axis0 = || vec![int("axis", 0)];
    let nodes = vec![
        node(
            "DequantizeLinear",
            &p("wd"),
            &[&p("w"), &p("ws"), &p("wz")],
            axis0(),
        ),
        node(
            "DequantizeLinear",
            &p("bd"),
            &[&p("b"), &p("bs"), &p("bz")],
            axis0(),
        ),
    ];
    let inits = vec![
        ints_of(&p("w"), 3, dims, w),
        floats_of(&p("ws"), &[m], ws),
        ints_of(&p("wz"), 3, &[m], vec![0; m]),
        ints_of(&p("b"), 6, &[m], bias),
        floats_of(&p("bs"), &[m], bs),
        ints_of(&p("bz"), 6, &[m], vec![0; m]),
    ];
    (nodes, inits)
}

/// A model on x (`dims`, symbols allowed) of `layers`: each an operator (`Conv` or `Gemm`)
/// with its attributes and weight shape, reading the previous output quantized (QDQ), its
/// output quantized again; the last one dequantized is the output. CpuAcc folds each into one
/// int8 layer.
fn qdq_layers(dims: &[&str], layers: &[(&str, Vec<AttributeProto>, Vec<usize>)]) -> ModelProto {
    let (mut nodes, mut inits) = (Vec::new(), Vec::new());
    let mut x = "x".to_string();
    for (i, (op, attrs, w)) in layers.iter().enumerate() {
        let name = format!("l{i}");
        let (qn, qi) = quantized(&x);
        let (wn, wi) = int8_weights(&name, w, 20 + i as u64);
        nodes.extend(qn.into_iter().chain(wn));
        inits.extend(qi.into_iter().chain(wi));
        let inputs = [
            format!("{x}_dq"),
            format!("{name}.wd"),
            format!("{name}.bd"),
        ];
        let inputs: Vec<&str> = inputs.iter().map(String::as_str).collect();
        nodes.push(node(op, &name, &inputs, attrs.clone()));
        x = name;
    }
    let (qn, qi) = quantized(&x);
    nodes.extend(qn);
    inits.extend(qi);
    let y = ValueInfoProto {
        name: Some(format!("{x}_dq")),
        ..Default::default()
    };
    graph_model(nodes, inits, onnx_f32_input("x", dims), y)
}

fn graph_model(
    node: Vec<NodeProto>,
    initializer: Vec<TensorProto>,
    x: ValueInfoProto,
    y: ValueInfoProto,
) -> ModelProto {
    ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(17),
        }],
        graph: Some(GraphProto {
            name: Some("layers".into()),
            node,
            initializer,
            input: vec![x],
            output: vec![y],
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Each of `kinds` was packed by the first plan and never again (every kind's count fixed
/// after the first execution), and each later plan reused all of the first plan's forms of
/// those kinds (the reuses grow by that much with each new plan; the repeat is a hit).
fn kinds_packed_once(after: &[Vec<(&'static str, PackingStats)>], kinds: &[&str]) {
    eprintln!("packing after each run: {after:?}");
    let of = |run: &[(&'static str, PackingStats)], kind: &str| {
        run.iter()
            .find(|(k, _)| *k == kind)
            .map(|(_, s)| *s)
            .unwrap_or_default()
    };
    for kind in kinds {
        let first = of(&after[0], kind);
        assert!(
            first.packed > 0,
            "{kind} packed by the first plan: {after:?}"
        );
        for (i, run) in after.iter().enumerate().skip(1) {
            let now = of(run, kind);
            assert_eq!(
                now.packed, first.packed,
                "{kind}: run {i} packed again: {after:?}"
            );
            let misses = i.min(after.len() - 2) as u64;
            assert_eq!(
                now.reused,
                first.reused + misses * first.packed,
                "{kind}: run {i} did not reuse every form: {after:?}"
            );
        }
    }
}

/// One int8 QDQ convolution (8 → 24 channels, 3×3, pad 1) alone: no channels-last region
/// (which needs two layers), so it runs NCHW as the centered weight rows times the packed
/// im2col. Batch sizes 1, 2, 3 and planes 9×9, 11×7, 6×13: its centered weights, its
/// requantization and its folded int32 bias are made by the first plan only.
#[test]
fn int8_nchw_conv_rows_are_packed_once() {
    let conv = vec![ints("kernel_shape", &[3, 3]), ints("pads", &[1; 4])];
    let model = qdq_layers(&["n", "8", "h", "w"], &[("Conv", conv, vec![24, 8, 3, 3])]);
    let shapes = [vec![1, 8, 9, 9], vec![2, 8, 11, 7], vec![3, 8, 6, 13]];
    let x = |d: &[usize]| Tensor::from_vec(d.to_vec(), values(d.iter().product(), 13)).unwrap();
    let (_acc, after) = serve(model, "x", &shapes, 1, x);
    kinds_packed_once(&after, &["qconv_rows", "qconv_rows_requant", "int8_bias"]);
}

/// Two int8 QDQ fully connected layers (Gemm with transposed weights, 37 → 20 → 11) served
/// at batch sizes 1, 4 and 7: their packed weights, folded int32 biases and requantizations
/// (with the byte GEMM, the bias with the weights' column sums folded in) are made by the
/// first plan only.
#[test]
fn int8_fully_connected_weights_are_packed_once() {
    let trans = || vec![int("transB", 1)];
    let model = qdq_layers(
        &["n", "37"],
        &[
            ("Gemm", trans(), vec![20, 37]),
            ("Gemm", trans(), vec![11, 20]),
        ],
    );
    let shapes = [vec![1, 37], vec![4, 37], vec![7, 37]];
    let x = |d: &[usize]| Tensor::from_vec(d.to_vec(), values(d.iter().product(), 17)).unwrap();
    let (_acc, after) = serve(model, "x", &shapes, 1, x);
    let kinds = ["qgemm_b", "qgemm_requant", "int8_bias"];
    kinds_packed_once(&after, &kinds);
    for kind in kinds {
        let first = after[0].iter().find(|(k, _)| *k == kind);
        assert_eq!(first.map(|(_, s)| s.packed), Some(2), "{kind}: {after:?}");
    }
}

/// A ConvTranspose (8 → 6 channels, 3×3, stride 2, pad 1, output padding 1, a bias) served at
/// batch sizes and planes 1×5×5, 2×7×4, 3×3×9: its weights are packed by the first plan only.
#[test]
fn conv_transpose_weights_are_packed_once() {
    let attrs = vec![
        ints("kernel_shape", &[3, 3]),
        ints("strides", &[2, 2]),
        ints("pads", &[1; 4]),
        ints("output_padding", &[1, 1]),
    ];
    let nodes = vec![node("ConvTranspose", "up", &["x", "up.w", "up.b"], attrs)];
    let inits = vec![weight("up.w", &[8, 6, 3, 3], 31), weight("up.b", &[6], 32)];
    let y = ValueInfoProto {
        name: Some("up".into()),
        ..Default::default()
    };
    let model = graph_model(nodes, inits, onnx_f32_input("x", &["n", "8", "h", "w"]), y);
    let shapes = [vec![1, 8, 5, 5], vec![2, 8, 7, 4], vec![3, 8, 3, 9]];
    let x = |d: &[usize]| Tensor::from_vec(d.to_vec(), values(d.iter().product(), 19)).unwrap();
    let (_acc, after) = serve(model, "x", &shapes, 1, x);
    kinds_packed_once(&after, &["conv_bias", "conv_transpose_a"]);
}

/// A pointwise convolution (32 → 48, then Relu) on small planes, which takes the pixel-row
/// GEMM where AVX2 is in use: served at 1×7×7, 2×6×6, 3×9×9, its weights are packed by the
/// first plan only (on other tiers by whichever path the planes take).
#[test]
fn pixel_row_weights_are_packed_once() {
    let model = model("32", &[("pw", "x", (32, 48, 1), (1, 0, 1), true)]);
    let shapes = [vec![1, 32, 7, 7], vec![2, 32, 6, 6], vec![3, 32, 9, 9]];
    let x = |d: &[usize]| Tensor::from_vec(d.to_vec(), values(d.iter().product(), 23)).unwrap();
    let (_acc, after) = serve(model, "x", &shapes, 1, x);
    let kinds: Vec<&str> = after[0].iter().map(|(k, _)| *k).collect();
    if backplane::cpu_acc::simd::avx2_in_use() {
        let path = ["conv_bias", "conv_pixel_rows"];
        assert_eq!(kinds, path, "the pixel-row path: {after:?}");
    }
    kinds_packed_once(&after, &kinds);
}

/// The dynamically quantized model of testdata/dynamic_quant (two MatMulInteger layers with
/// constant int8 weights and f32 biases, a residual Add and a LayerNormalization) served at
/// batch and sequence sizes 1×9, 1×5 and 2×7: the integer products' packed weights and their
/// biases are made by the first plan only.
#[test]
fn int8_matmul_integer_weights_are_packed_once() {
    let model = symbolic("dynamic_quant", &["n", "s", "64"]);
    let shapes = [vec![1, 9, 64], vec![1, 5, 64], vec![2, 7, 64]];
    let x = |d: &[usize]| Tensor::from_vec(d.to_vec(), values(d.iter().product(), 29)).unwrap();
    let (_acc, after) = serve(model, "x", &shapes, 1, x);
    kinds_packed_once(&after, &["matmul_integer_b", "matmul_integer_bias"]);
    let first = after[0].iter().find(|(k, _)| *k == "matmul_integer_b");
    assert_eq!(first.map(|(_, s)| s.packed), Some(2), "{after:?}");
}

/// An atrous convolution (16 → 16, 3×3, dilation 6, pad 6), whose off-centre taps read the
/// input for a band of the output only: it takes the per-tap products (`tap_regions`) at
/// planes 9×9, 11×11 and 13×13, where every tap is live, so the first plan's per-tap weights
/// serve them all (each plan places the taps' rectangles on its own plane).
#[test]
fn tap_region_weights_are_shared_across_image_sizes() {
    let mut model = model("16", &[("atrous", "x", (16, 16, 3), (1, 6, 1), false)]);
    let graph = model.graph.as_mut().unwrap();
    graph.node[0].attribute.push(ints("dilations", &[6, 6]));
    let shapes = [vec![1, 16, 9, 9], vec![2, 16, 11, 11], vec![1, 16, 13, 13]];
    let x = |d: &[usize]| Tensor::from_vec(d.to_vec(), values(d.iter().product(), 37)).unwrap();
    let (_acc, after) = serve(model, "x", &shapes, 1, x);
    let kinds: Vec<&str> = after[0].iter().map(|(k, _)| *k).collect();
    let path = ["conv_bias", "conv_tap_regions"];
    assert_eq!(kinds, path, "the per-tap path: {after:?}");
    kinds_packed_once(&after, &kinds);
}
