//! CpuAcc's graph-level fusions through the whole pipeline (optimize, load, execute) against
//! CpuRef running the unfused network: which layers remain, and identical results within
//! the GEMM tolerance (|acc - ref| <= 1e-4 + 1e-4·|ref|).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use backplane::core::ops::BinaryOp;
use backplane::core::{Op, TensorId};
use backplane::{BackendId, DataType, Network, OptimizerOptions, Runtime, Tensor, TensorInfo};

fn options(backend: &str) -> OptimizerOptions {
    OptimizerOptions::new(vec![BackendId::new(backend).unwrap()])
}

/// Deterministic values in [-1, 1).
fn random(dims: &[usize], seed: u64) -> Tensor {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let n: usize = dims.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect();
    Tensor::from_vec(dims.to_vec(), v).unwrap()
}

/// `[1, s, h·d]` → Reshape `[1, s, h, d]` → Transpose `(0, 2, 1, 3)`: one head per batch.
/// A square 2-D convolution: kernel `k`, stride `s`, padding `p` on every side, `group`
/// groups.
fn conv2d(k: usize, s: usize, p: usize, group: usize) -> Op {
    use backplane::core::ops::{AutoPad, ConvDesc, Window};
    Op::Conv(ConvDesc {
        window: Window {
            kernel: vec![k, k],
            strides: vec![s, s],
            dilations: vec![1, 1],
            pads: vec![p; 4],
            auto_pad: AutoPad::NotSet,
        },
        group,
    })
}

/// The channels-last layout of a CpuAcc fused convolution (`nhwc`, or `nchw_to_nhwc` for a
/// region's first layer), from the typed payload it carries; `None` for NCHW ones, pairs and
/// other layers.
fn conv_layout(op: &Op) -> Option<&'static str> {
    use backplane_cpu_acc::fusion::{ConvLayout, Fused};
    let Op::Custom(c) = op else { return None };
    match Fused::decode(c).ok()? {
        Fused::Conv(spec) => match spec.layout {
            ConvLayout::Nchw => None,
            ConvLayout::Nhwc => Some("nhwc"),
            ConvLayout::NchwToNhwc => Some("nchw_to_nhwc"),
        },
        _ => None,
    }
}

/// How many layers of an optimized network are CpuAcc `FusedConvPair`s.
fn conv_pairs(net: &Network) -> usize {
    net.layers()
        .iter()
        .filter(|l| matches!(&l.op, Op::Custom(c) if c.op_type == "FusedConvPair"))
        .count()
}

fn split_heads(n: &mut Network, name: &str, x: TensorId, s: usize, h: usize, d: usize) -> TensorId {
    let r = n
        .add_layer(
            &format!("{name}_reshape"),
            Op::Reshape {
                shape: vec![1, s, h, d],
            },
            &[x],
        )
        .unwrap()[0];
    n.add_layer(
        &format!("{name}_transpose"),
        Op::Transpose {
            perm: vec![0, 2, 1, 3],
        },
        &[r],
    )
    .unwrap()[0]
}

/// Self-attention on `q`, `k`, `v` inputs of `[1, s, h·d]`: heads split by Reshape and
/// Transpose, `softmax(q·kᵀ / √d)·v`, heads merged by Transpose and Reshape. With
/// `expose`, the split q heads and the unscaled scores are network outputs too (so the
/// layers computing them must stay).
fn attention(s: usize, h: usize, d: usize, expose: bool) -> Network {
    let mut n = Network::new();
    let info = TensorInfo::new(DataType::F32, vec![1, s, h * d]);
    let (q, k, v) = (
        n.add_input("q", info.clone()).unwrap(),
        n.add_input("k", info.clone()).unwrap(),
        n.add_input("v", info).unwrap(),
    );
    let q = split_heads(&mut n, "q", q, s, h, d);
    let k = split_heads(&mut n, "k", k, s, h, d);
    let kt = n
        .add_layer(
            "k_transpose_last",
            Op::Transpose {
                perm: vec![0, 1, 3, 2],
            },
            &[k],
        )
        .unwrap()[0];
    let v = split_heads(&mut n, "v", v, s, h, d);
    let scores = n.add_layer("scores", Op::MatMul, &[q, kt]).unwrap()[0];
    let root = n
        .add_constant("sqrt_d", Tensor::scalar((d as f32).sqrt()))
        .unwrap();
    let scaled = n
        .add_layer("scale", Op::Binary(BinaryOp::Div), &[scores, root])
        .unwrap()[0];
    let p = n
        .add_layer("softmax", Op::Softmax { axis: -1 }, &[scaled])
        .unwrap()[0];
    let o = n.add_layer("context", Op::MatMul, &[p, v]).unwrap()[0];
    let ot = n
        .add_layer(
            "merge_transpose",
            Op::Transpose {
                perm: vec![0, 2, 1, 3],
            },
            &[o],
        )
        .unwrap()[0];
    let y = n
        .add_layer(
            "merge_reshape",
            Op::Reshape {
                shape: vec![1, s, h * d],
            },
            &[ot],
        )
        .unwrap()[0];
    n.mark_output(y).unwrap();
    if expose {
        n.mark_output(q).unwrap();
        n.mark_output(scores).unwrap();
    }
    n
}

fn run(rt: &Runtime, net: &Network, backend: &str, feeds: &[(&str, &Tensor)]) -> Vec<Tensor> {
    let id = rt
        .load_network(rt.optimize(net, &options(backend)).unwrap())
        .unwrap();
    rt.execute(id, feeds)
        .unwrap()
        .into_iter()
        .map(|(_, t)| t)
        .collect()
}

fn assert_close(what: &str, got: &Tensor, want: &Tensor) {
    assert_eq!(got.shape(), want.shape(), "{what}");
    for (i, (g, w)) in got.to_f64_vec().iter().zip(want.to_f64_vec()).enumerate() {
        assert!(
            (g - w).abs() <= 1e-4 + 1e-4 * w.abs(),
            "{what}: element {i}: got {g}, expected {w}"
        );
    }
}

/// The head split and merge of attention (Reshape, Transpose) and the 1/√d scale fold into
/// the two MatMuls: only they and the Softmax remain, and the results match CpuRef, for odd
/// sequence lengths, head counts and head sizes.
#[test]
fn attention_reshapes_transposes_and_scale_fold_into_the_matmuls() {
    let rt = backplane::RuntimeBuilder::new().build().unwrap();
    for (s, h, d) in [(7, 2, 5), (17, 3, 16), (1, 1, 3), (63, 4, 8)] {
        let net = attention(s, h, d, false);
        let opt = rt.optimize(&net, &options("CpuAcc")).unwrap();
        let ops: Vec<&str> = opt
            .network()
            .layers()
            .iter()
            .map(|l| match &l.op {
                Op::Custom(c) => c.op_type.as_str(),
                other => other.name(),
            })
            .collect();
        assert_eq!(
            ops,
            ["FusedMatMul", "Softmax", "FusedMatMul"],
            "s{s} h{h} d{d}"
        );
        let names: Vec<&str> = opt
            .network()
            .layers()
            .iter()
            .map(|l| l.name.as_str())
            .collect();
        assert_eq!(
            names[0],
            "q_reshape+q_transpose+k_reshape+k_transpose+k_transpose_last+scores+scale"
        );
        assert_eq!(
            names[2],
            "v_reshape+v_transpose+context+merge_transpose+merge_reshape"
        );

        let dims = [1, s, h * d];
        let (q, k, v) = (random(&dims, 1), random(&dims, 2), random(&dims, 3));
        let feeds = [("q", &q), ("k", &k), ("v", &v)];
        let got = run(&rt, &net, "CpuAcc", &feeds);
        let want = run(&rt, &net, "CpuRef", &feeds);
        assert_close(&format!("attention s{s} h{h} d{d}"), &got[0], &want[0]);
    }
}

/// A tensor another consumer (here: the network's caller) needs is never folded away: with
/// the split q heads and the unscaled scores outputs, their Transpose and the scale stay
/// layers of their own, and every output matches.
#[test]
fn attention_keeps_what_is_used_elsewhere() {
    let rt = backplane::RuntimeBuilder::new().build().unwrap();
    let (s, h, d) = (7, 2, 5);
    let net = attention(s, h, d, true);
    let opt = rt.optimize(&net, &options("CpuAcc")).unwrap();
    let names: Vec<&str> = opt
        .network()
        .layers()
        .iter()
        .map(|l| l.name.as_str())
        .collect();
    for kept in ["q_transpose", "scale"] {
        assert!(names.contains(&kept), "{kept} must stay: {names:?}");
    }
    let dims = [1, s, h * d];
    let (q, k, v) = (random(&dims, 4), random(&dims, 5), random(&dims, 6));
    let feeds = [("q", &q), ("k", &k), ("v", &v)];
    let got = run(&rt, &net, "CpuAcc", &feeds);
    let want = run(&rt, &net, "CpuRef", &feeds);
    assert_eq!(got.len(), 3);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_close(&format!("output {i}"), g, w);
    }
}

/// `x → MatMul(w) + b → Add(x) → LayerNormalization`: the projection with its bias, then
/// the residual sum and the normalization as one layer; with the sum a network output too,
/// the Add stays. Results match CpuRef for odd row lengths, with and without a norm bias.
#[test]
fn residual_add_and_layer_norm_fuse() {
    let rt = backplane::RuntimeBuilder::new().build().unwrap();
    for (rows, width, norm_bias, expose_sum) in [
        (7, 17, true, false),
        (1, 3, false, false),
        (63, 128, true, false),
        (5, 9, true, true),
    ] {
        let mut n = Network::new();
        let x = n
            .add_input("x", TensorInfo::new(DataType::F32, vec![1, rows, width]))
            .unwrap();
        let w = n.add_constant("w", random(&[width, width], 7)).unwrap();
        let b = n.add_constant("b", random(&[width], 8)).unwrap();
        let scale = n.add_constant("scale", random(&[width], 9)).unwrap();
        let mm = n.add_layer("proj", Op::MatMul, &[x, w]).unwrap()[0];
        let h = n
            .add_layer("proj_bias", Op::Binary(BinaryOp::Add), &[mm, b])
            .unwrap()[0];
        let sum = n
            .add_layer("residual", Op::Binary(BinaryOp::Add), &[h, x])
            .unwrap()[0];
        let mut norm_in = vec![sum, scale];
        if norm_bias {
            norm_in.push(n.add_constant("beta", random(&[width], 10)).unwrap());
        }
        let y = n
            .add_layer(
                "norm",
                Op::LayerNormalization {
                    axis: -1,
                    epsilon: 1e-5,
                },
                &norm_in,
            )
            .unwrap()[0];
        n.mark_output(y).unwrap();
        if expose_sum {
            n.mark_output(sum).unwrap();
        }
        let opt = rt.optimize(&n, &options("CpuAcc")).unwrap();
        let names: Vec<&str> = opt
            .network()
            .layers()
            .iter()
            .map(|l| l.name.as_str())
            .collect();
        let want_names: &[&str] = if expose_sum {
            &["proj+proj_bias", "residual", "norm"]
        } else {
            &["proj+proj_bias", "residual+norm"]
        };
        assert_eq!(names, want_names);

        let xv = random(&[1, rows, width], 11);
        let got = run(&rt, &n, "CpuAcc", &[("x", &xv)]);
        let want = run(&rt, &n, "CpuRef", &[("x", &xv)]);
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_close(&format!("{rows}x{width} output {i}"), g, w);
        }
    }
}

/// A MobileNet-style body: a first layer (3 input channels, 3×3 stride 2), depthwise and
/// pointwise convolutions, an inverted residual block, a strided depthwise convolution with
/// an activation no kernel computes in registers (Sigmoid), a depthwise convolution with a
/// residual, and a GlobalAveragePool outside.
/// CpuAcc runs the convolutions channels-last (every one a `FusedConv` with a layout, the
/// first reading NCHW), with a Transpose only where a tensor leaves the region (a network
/// output, the pooling's input), and matches CpuRef for odd channel counts (tails of the
/// 32- and 8-channel steps), sizes of 1, and a batch of 2.
#[test]
fn mobilenet_blocks_run_channels_last() {
    use backplane::core::ops::{PoolKind, UnaryOp};
    let rt = backplane::RuntimeBuilder::new().build().unwrap();
    let conv = conv2d;
    let clip = Op::Unary(UnaryOp::Clip { min: 0.0, max: 6.0 });
    for (batch, h, w, c1, c2, c3) in [
        (1, 17, 17, 8, 16, 48),
        (2, 9, 11, 37, 5, 33),
        (1, 1, 1, 3, 7, 17),
        // Rows of 33 and 35 outputs: the 3×3 kernel's wide-row path (eight channels with
        // their weights in registers, four pixels at a time), with channel tails of 4 and 5.
        (1, 70, 66, 12, 24, 37),
        // An expansion to 130×131×62 floats (over CpuAcc's threshold): it and the depthwise
        // convolution reading it run as one `FusedConvPair`. (At least 16 channels per layer:
        // fewer over planes this large stay out of regions.)
        (1, 259, 261, 16, 17, 62),
        // Depthwise outputs of 65×65×64 floats (over CpuAcc's threshold for projections,
        // under the expansions'): dw1 with pw1, and dw2 with the projection adding its
        // residual, each run as one `FusedConvPair`.
        (1, 130, 130, 64, 16, 64),
    ] {
        let mut n = Network::new();
        let x = n
            .add_input("x", TensorInfo::new(DataType::F32, vec![batch, 3, h, w]))
            .unwrap();
        let mut seed = 20;
        let mut layer =
            |n: &mut Network, name: &str, x: TensorId, op: Op, cin: usize, m: usize, k: usize| {
                seed += 2;
                let group = match &op {
                    Op::Conv(d) => d.group,
                    _ => 1,
                };
                let wt = n
                    .add_constant(&format!("{name}_w"), random(&[m, cin / group, k, k], seed))
                    .unwrap();
                let b = n
                    .add_constant(&format!("{name}_b"), random(&[m], seed + 1))
                    .unwrap();
                n.add_layer(name, op, &[x, wt, b]).unwrap()[0]
            };
        let act = |n: &mut Network, name: &str, x: TensorId, op: Op| {
            n.add_layer(name, op, &[x]).unwrap()[0]
        };
        let e = layer(&mut n, "entry", x, conv(3, 2, 1, 1), 3, c1, 3);
        let e = act(&mut n, "entry_clip", e, clip.clone());
        let d = layer(&mut n, "dw1", e, conv(3, 1, 1, c1), c1, c1, 3);
        let d = act(&mut n, "dw1_relu", d, Op::Unary(UnaryOp::Relu));
        let t = layer(&mut n, "pw1", d, conv(1, 1, 0, 1), c1, c2, 1);
        let t = act(&mut n, "pw1_relu", t, Op::Unary(UnaryOp::Relu));
        let u = layer(&mut n, "expand", t, conv(1, 1, 0, 1), c2, c3, 1);
        let u = act(&mut n, "expand_clip", u, clip.clone());
        let u = layer(&mut n, "dw2", u, conv(3, 1, 1, c3), c3, c3, 3);
        let u = act(&mut n, "dw2_clip", u, clip.clone());
        let u = layer(&mut n, "project", u, conv(1, 1, 0, 1), c3, c2, 1);
        let sum = n
            .add_layer("residual", Op::Binary(BinaryOp::Add), &[u, t])
            .unwrap()[0];
        let s = layer(&mut n, "dw3", sum, conv(3, 2, 1, c2), c2, c2, 3);
        let s = act(&mut n, "dw3_sigmoid", s, Op::Unary(UnaryOp::Sigmoid));
        let pooled = n
            .add_layer("pool", Op::GlobalPool(PoolKind::Average), &[s])
            .unwrap()[0];
        // A depthwise convolution with a residual (on `sum`'s full-size plane).
        let q = layer(&mut n, "dw4", sum, conv(3, 1, 1, c2), c2, c2, 3);
        let q = n
            .add_layer("dw4_residual", Op::Binary(BinaryOp::Add), &[q, sum])
            .unwrap()[0];
        let q = act(&mut n, "dw4_relu", q, Op::Unary(UnaryOp::Relu));
        n.mark_output(t).unwrap();
        n.mark_output(pooled).unwrap();
        n.mark_output(s).unwrap();
        n.mark_output(q).unwrap();

        let opt = rt.optimize(&n, &options("CpuAcc")).unwrap();
        let layouts: Vec<String> = opt
            .network()
            .layers()
            .iter()
            .filter_map(|l| conv_layout(&l.op).map(String::from))
            .collect();
        // Pairs: the expansion (expand, dw2) from 2^20 floats; else from 2^18 floats of a
        // depthwise output, the projections (dw2, project) and (dw1, pw1).
        let plane = batch * h.div_ceil(2) * w.div_ceil(2);
        let expansion = plane * c3 >= 1 << 20;
        let projections =
            usize::from(!expansion && plane * c3 >= 1 << 18) + usize::from(plane * c1 >= 1 << 18);
        let paired = usize::from(expansion) + projections;
        let pairs = conv_pairs(opt.network());
        assert_eq!(pairs, paired, "{batch}x{h}x{w} c{c1}/{c2}/{c3}");
        // A pair's two convolutions carry no layout of their own.
        let channels_last = 7 - 2 * paired;
        let mut want = vec!["nchw_to_nhwc"];
        want.extend(["nhwc"; 7].iter().take(channels_last));
        assert_eq!(layouts, want, "{batch}x{h}x{w} c{c1}/{c2}/{c3}");
        let transposes = opt
            .network()
            .layers()
            .iter()
            .filter(|l| matches!(l.op, Op::Transpose { .. }))
            .count();
        // Out: t and q (network outputs), s (an output and the pooling's input). Nothing in.
        assert_eq!(transposes, 3, "{batch}x{h}x{w}");
        // The pooling joins the region as a mean over the pixels (over a 1×1 plane too: CpuAcc
        // reduces size-1 axes).
        let means = opt
            .network()
            .layers()
            .iter()
            .filter(|l| matches!(l.op, Op::Reduce(_)))
            .count();
        assert_eq!(means, 1, "{batch}x{h}x{w}");

        let xv = random(&[batch, 3, h, w], 99);
        let got = run(&rt, &n, "CpuAcc", &[("x", &xv)]);
        let want = run(&rt, &n, "CpuRef", &[("x", &xv)]);
        assert_eq!(got.len(), 4);
        for (i, (g, r)) in got.iter().zip(&want).enumerate() {
            assert_close(&format!("{batch}x{h}x{w} c{c1}/{c2}/{c3} output {i}"), g, r);
        }
    }
}

/// A projection whose residual is the depthwise output it reads (`pw(dw(x)) + dw(x)`): the
/// two are not paired (a pair never writes the tensor between them), and CpuAcc matches
/// CpuRef.
#[test]
fn projection_reading_its_input_as_residual_stays_apart() {
    use backplane::core::ops::UnaryOp;
    let rt = backplane::RuntimeBuilder::new().build().unwrap();
    let conv = |k: usize, s: usize, group: usize| conv2d(k, s, k / 2, group);
    let (h, c) = (130, 64);
    let mut n = Network::new();
    let x = n
        .add_input("x", TensorInfo::new(DataType::F32, vec![1, 3, h, h]))
        .unwrap();
    let layer = |n: &mut Network, name: &str, x: TensorId, op: Op, cin: usize, k: usize| {
        let group = match &op {
            Op::Conv(d) => d.group,
            _ => 1,
        };
        let wt = n
            .add_constant(
                &format!("{name}_w"),
                random(&[c, cin / group, k, k], 40 + cin as u64),
            )
            .unwrap();
        let b = n
            .add_constant(&format!("{name}_b"), random(&[c], 41 + cin as u64))
            .unwrap();
        n.add_layer(name, op, &[x, wt, b]).unwrap()[0]
    };
    let relu = |n: &mut Network, name: &str, x: TensorId| {
        n.add_layer(name, Op::Unary(UnaryOp::Relu), &[x]).unwrap()[0]
    };
    let e = layer(&mut n, "entry", x, conv(3, 2, 1), 3, 3);
    let e = relu(&mut n, "entry_relu", e);
    let d = layer(&mut n, "dw", e, conv(3, 1, c), c, 3);
    let d = relu(&mut n, "dw_relu", d);
    let p = layer(&mut n, "project", d, conv(1, 1, 1), c, 1);
    let y = n
        .add_layer("residual", Op::Binary(BinaryOp::Add), &[p, d])
        .unwrap()[0];
    n.mark_output(y).unwrap();
    let opt = rt.optimize(&n, &options("CpuAcc")).unwrap();
    let pairs = conv_pairs(opt.network());
    assert_eq!(pairs, 0);
    let xv = random(&[1, 3, h, h], 7);
    let got = run(&rt, &n, "CpuAcc", &[("x", &xv)]);
    let want = run(&rt, &n, "CpuRef", &[("x", &xv)]);
    assert_close("pw(dw(x)) + dw(x)", &got[0], &want[0]);
}

/// A ResNet's stage: a 3×3 stride-2 convolution and a 1×1 stride-2 shortcut, a 3×3
/// convolution adding the shortcut, and a GlobalAveragePool. Onto a 7×7 plane (the last
/// stage) CpuAcc runs the three convolutions channels-last (small output planes: im2col rows
/// of pixels), with one Transpose in and the pool as a mean over the pixels; onto 28×28 only
/// the two strided ones (one region: they read the same tensor, transposed once), the body
/// staying NCHW (Winograd), with their two outputs transposed back. Both match CpuRef on 1
/// and 2 threads (2, on 7×7: each thread a share of the output columns).
#[test]
fn small_plane_stage_runs_channels_last() {
    for (hw, nhwc_want, transposes_want, means_want) in [(14, 3, 1, 1), (56, 2, 3, 0)] {
        stage(hw, nhwc_want, transposes_want, means_want);
    }
}

fn stage(hw: usize, nhwc_want: usize, transposes_want: usize, means_want: usize) {
    use backplane::core::ops::{PoolKind, UnaryOp};
    let rt = backplane::RuntimeBuilder::new().build().unwrap();
    let conv = |k: usize, s: usize, p: usize| conv2d(k, s, p, 1);
    let (c, m) = (13, 40);
    let mut n = Network::new();
    let x = n
        .add_input("x", TensorInfo::new(DataType::F32, vec![1, c, hw, hw]))
        .unwrap();
    let mut seed = 60;
    let mut layer = |n: &mut Network, name: &str, x: TensorId, op: Op, cin: usize, k: usize| {
        seed += 2;
        let wt = n
            .add_constant(&format!("{name}_w"), random(&[m, cin, k, k], seed))
            .unwrap();
        let b = n
            .add_constant(&format!("{name}_b"), random(&[m], seed + 1))
            .unwrap();
        n.add_layer(name, op, &[x, wt, b]).unwrap()[0]
    };
    let relu = Op::Unary(UnaryOp::Relu);
    let a = layer(&mut n, "down", x, conv(3, 2, 1), c, 3);
    let a = n.add_layer("down_relu", relu.clone(), &[a]).unwrap()[0];
    let b = layer(&mut n, "body", a, conv(3, 1, 1), m, 3);
    // The shortcut after the body: the Add fuses into the first convolution reaching it
    // (the body's, as in ResNets); the shortcut's BatchNormalization folds into it.
    let short = layer(&mut n, "shortcut", x, conv(1, 2, 0), c, 1);
    let mut bn_inputs = vec![short];
    for (i, name) in ["scale", "bias", "mean"].iter().enumerate() {
        bn_inputs.push(
            n.add_constant(&format!("bn_{name}"), random(&[m], 90 + i as u64))
                .unwrap(),
        );
    }
    let var = Tensor::from_vec(vec![m], vec![1.5f32; m]).unwrap();
    bn_inputs.push(n.add_constant("bn_var", var).unwrap());
    let bn = Op::BatchNormalization { epsilon: 1e-5 };
    let short = n.add_layer("shortcut_bn", bn, &bn_inputs).unwrap()[0];
    let b = n
        .add_layer("add", Op::Binary(BinaryOp::Add), &[b, short])
        .unwrap()[0];
    let b = n.add_layer("body_relu", relu, &[b]).unwrap()[0];
    let pooled = n
        .add_layer("pool", Op::GlobalPool(PoolKind::Average), &[b])
        .unwrap()[0];
    n.mark_output(pooled).unwrap();

    let opt = rt.optimize(&n, &options("CpuAcc")).unwrap();
    let count =
        |f: &dyn Fn(&Op) -> bool| opt.network().layers().iter().filter(|l| f(&l.op)).count();
    let nhwc = count(&|op| conv_layout(op) == Some("nhwc"));
    assert_eq!(nhwc, nhwc_want, "{hw}x{hw}: channels-last convolutions");
    assert_eq!(
        count(&|op| matches!(op, Op::Transpose { .. })),
        transposes_want,
        "{hw}x{hw}: transposes"
    );
    assert_eq!(
        count(&|op| matches!(op, Op::Reduce(_))),
        means_want,
        "{hw}x{hw}: the pool as a mean"
    );

    let xv = random(&[1, c, hw, hw], 98);
    let want = run(&rt, &n, "CpuRef", &[("x", &xv)]);
    for threads in [1, 2] {
        let mut opts = backplane::BackendOptions::default();
        opts.values.insert("threads".into(), threads.to_string());
        let rt = backplane::RuntimeBuilder::new()
            .backend_options(BackendId::new("CpuAcc").unwrap(), opts)
            .build()
            .unwrap();
        let got = run(&rt, &n, "CpuAcc", &[("x", &xv)]);
        assert_eq!(got.len(), 1);
        assert_close(
            &format!("{hw}x{hw} stage, {threads} threads"),
            &got[0],
            &want[0],
        );
    }
}

/// Values in [-1, 1) scaled by √(3 / fan-in) (the product of all dims but the first), so
/// activations keep their size through a deep network without batch normalization.
fn weights(dims: &[usize], seed: u64) -> Tensor {
    let fan_in: usize = dims[1..].iter().product();
    let scale = (3.0 / fan_in.max(1) as f64).sqrt();
    let v: Vec<f32> = random(dims, seed)
        .to_f64_vec()
        .iter()
        .map(|v| (v * scale) as f32)
        .collect();
    Tensor::from_vec(dims.to_vec(), v).unwrap()
}

/// One bottleneck of MobileNetV3: kernel, expanded channels, output channels,
/// squeeze-excite, hard-swish (else ReLU), stride.
type Bneck = (usize, usize, usize, bool, bool, usize);

/// MobileNetV3-Large's feature extractor as torchvision exports it (batch normalization
/// folded into the convolutions): a 3×3 stride-2 first layer with hard-swish, then
/// bottlenecks (a 1×1 expansion unless the ratio is 1, a depthwise convolution, on some a
/// squeeze-excite block (GlobalAveragePool, 1×1 + ReLU, 1×1 + HardSigmoid, multiplied into
/// the depthwise output), a 1×1 projection with no activation, and a residual Add where
/// stride 1 keeps the channels), a last 1×1 + hard-swish and a GlobalAveragePool. The last
/// bottleneck's output is an output too.
fn mobilenet_v3(hw: usize, blocks: &[Bneck]) -> Network {
    use backplane::core::ops::{MathOp, PoolKind, UnaryOp};
    let mut n = Network::new();
    let mut x = n
        .add_input("x", TensorInfo::new(DataType::F32, vec![1, 3, hw, hw]))
        .unwrap();
    let mut seed = 300;
    let mut conv = |n: &mut Network, name: &str, x: TensorId, op: Op, cin: usize, m: usize| {
        seed += 2;
        let (group, k) = match &op {
            Op::Conv(d) => (d.group, d.window.kernel[0]),
            _ => (1, 1),
        };
        let wt = n
            .add_constant(&format!("{name}_w"), weights(&[m, cin / group, k, k], seed))
            .unwrap();
        let b = n
            .add_constant(&format!("{name}_b"), random(&[m], seed + 1))
            .unwrap();
        n.add_layer(name, op, &[x, wt, b]).unwrap()[0]
    };
    let act = |n: &mut Network, name: &str, x: TensorId, hs: bool| {
        let op = if hs {
            Op::Math(MathOp::HardSwish)
        } else {
            Op::Unary(UnaryOp::Relu)
        };
        n.add_layer(name, op, &[x]).unwrap()[0]
    };
    let s = conv(&mut n, "stem", x, conv2d(3, 2, 1, 1), 3, 16);
    x = act(&mut n, "stem_hs", s, true);
    let mut cin = 16;
    for (i, &(k, exp, out, se, hs, stride)) in blocks.iter().enumerate() {
        let name = |what: &str| format!("b{i}_{what}");
        let input = x;
        let mut y = input;
        if exp != cin {
            y = conv(&mut n, &name("expand"), y, conv2d(1, 1, 0, 1), cin, exp);
            y = act(&mut n, &name("expand_act"), y, hs);
        }
        y = conv(
            &mut n,
            &name("dw"),
            y,
            conv2d(k, stride, k / 2, exp),
            exp,
            exp,
        );
        y = act(&mut n, &name("dw_act"), y, hs);
        if se {
            let squeeze = (exp / 4).div_ceil(8) * 8;
            let p = n
                .add_layer(&name("se_pool"), Op::GlobalPool(PoolKind::Average), &[y])
                .unwrap()[0];
            let f = conv(&mut n, &name("se_fc1"), p, conv2d(1, 1, 0, 1), exp, squeeze);
            let f = act(&mut n, &name("se_relu"), f, false);
            let f = conv(&mut n, &name("se_fc2"), f, conv2d(1, 1, 0, 1), squeeze, exp);
            let gate = MathOp::HardSigmoid {
                alpha: 1.0 / 6.0,
                beta: 0.5,
            };
            let f = n.add_layer(&name("se_hsig"), Op::Math(gate), &[f]).unwrap()[0];
            y = n
                .add_layer(&name("se_scale"), Op::Binary(BinaryOp::Mul), &[f, y])
                .unwrap()[0];
        }
        y = conv(&mut n, &name("project"), y, conv2d(1, 1, 0, 1), exp, out);
        if stride == 1 && cin == out {
            y = n
                .add_layer(&name("add"), Op::Binary(BinaryOp::Add), &[y, input])
                .unwrap()[0];
        }
        x = y;
        cin = out;
    }
    n.mark_output(x).unwrap();
    let last = conv(&mut n, "last", x, conv2d(1, 1, 0, 1), cin, 6 * cin);
    let last = act(&mut n, "last_hs", last, true);
    let pooled = n
        .add_layer("pool", Op::GlobalPool(PoolKind::Average), &[last])
        .unwrap()[0];
    n.mark_output(pooled).unwrap();
    n
}

/// MobileNetV3-Large's bottlenecks (torchvision's configuration). The squeeze-excite blocks
/// (pool, two 1×1 convolutions, the gate's Mul) and the projections without a residual (plain
/// convolutions, nothing to fuse) run inside the channels-last region with the rest: no
/// tensor goes back to NCHW but the network's outputs (before, each squeeze-excite Mul left
/// the region and the block after it read its input from outside two regions). The
/// convolutions run channels-last, and the outputs match CpuRef.
#[test]
fn mobilenet_v3_blocks_run_channels_last() {
    let large: [Bneck; 15] = [
        (3, 16, 16, false, false, 1),
        (3, 64, 24, false, false, 2),
        (3, 72, 24, false, false, 1),
        (5, 72, 40, true, false, 2),
        (5, 120, 40, true, false, 1),
        (5, 120, 40, true, false, 1),
        (3, 240, 80, false, true, 2),
        (3, 200, 80, false, true, 1),
        (3, 184, 80, false, true, 1),
        (3, 184, 80, false, true, 1),
        (3, 480, 112, true, true, 1),
        (3, 672, 112, true, true, 1),
        (5, 672, 160, true, true, 2),
        (5, 960, 160, true, true, 1),
        (5, 960, 160, true, true, 1),
    ];
    let rt = backplane::RuntimeBuilder::new().build().unwrap();
    for hw in [64, 57] {
        let n = mobilenet_v3(hw, &large);
        let opt = rt.optimize(&n, &options("CpuAcc")).unwrap();
        let report = opt.report();
        assert!(
            report.rejected.is_empty(),
            "{hw}x{hw}: {:?}",
            report.rejected
        );
        let net = opt.network();
        let mut convs = 0;
        let mut nhwc = 0;
        for (l, b) in net.layers().iter().zip(opt.assignment()) {
            let conv = match &l.op {
                Op::Conv(_) => true,
                Op::Custom(c) if c.op_type.starts_with("FusedConv") => {
                    nhwc += usize::from(conv_layout(&l.op) == Some("nhwc"));
                    true
                }
                _ => false,
            };
            if conv {
                convs += 1;
                assert_eq!(b.as_str(), "CpuAcc", "{hw}x{hw}: layer '{}'", l.name);
            }
        }
        assert!(convs > 0);
        assert!(nhwc > 0, "{hw}x{hw}: no convolution runs channels-last");
        // One region: the only tensors transposed back to NCHW are the network's outputs.
        let leaving: Vec<&str> = net
            .layers()
            .iter()
            .filter(|l| matches!(&l.op, Op::Transpose { perm } if perm == &[0, 3, 1, 2]))
            .filter(|l| !net.outputs().contains(&l.outputs[0]))
            .map(|l| l.name.as_str())
            .collect();
        assert!(
            leaving.is_empty(),
            "{hw}x{hw}: leave the region: {leaving:?}"
        );
        let muls = net
            .layers()
            .iter()
            .filter(|l| l.op == Op::Binary(BinaryOp::Mul))
            .count();
        assert_eq!(muls, 8, "{hw}x{hw}: the eight squeeze-excite Muls");

        let xv = random(&[1, 3, hw, hw], 77);
        let got = run(&rt, &n, "CpuAcc", &[("x", &xv)]);
        let want = run(&rt, &n, "CpuRef", &[("x", &xv)]);
        assert_eq!(got.len(), 2);
        for (i, (g, r)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g.shape(), r.shape());
            for (j, (g, w)) in g.to_f64_vec().iter().zip(r.to_f64_vec()).enumerate() {
                assert!(
                    (g - w).abs() <= 1e-5 + 1e-4 * w.abs(),
                    "{hw}x{hw} output {i}: element {j}: got {g}, expected {w}"
                );
            }
        }
    }
}

/// A zero Pad of the spatial axes before a convolution (TensorFlow's explicit padding before
/// a strided one, asymmetric) folds into the convolution's pads: no Pad layer remains, and
/// the results match CpuRef, for strides 1 and 2, depthwise and dense, kernels 1 to 5, on
/// top of pads the convolution has itself. A Pad that adds channels, fills with another
/// value, or feeds two readers stays.
#[test]
fn a_zero_pad_before_a_convolution_folds_into_its_pads() {
    use backplane::core::ops::{PadDesc, PadMode};
    let rt = backplane::RuntimeBuilder::new().build().unwrap();
    let pad = |pads: [i64; 8], value: f64| {
        Op::Pad(PadDesc {
            mode: PadMode::Constant,
            pads: pads.to_vec(),
            value,
        })
    };
    // (channels, side, kernel, stride, own pad, group = channels?, Pad, fill, expect folded)
    type Case = (usize, usize, usize, usize, usize, bool, [i64; 8], f64, bool);
    let cases: [Case; 7] = [
        (8, 17, 3, 2, 0, true, [0, 0, 0, 0, 0, 0, 1, 1], 0.0, true),
        (16, 13, 3, 2, 0, false, [0, 0, 1, 1, 0, 0, 1, 1], 0.0, true),
        (5, 11, 5, 1, 1, false, [0, 0, 2, 0, 0, 0, 0, 3], 0.0, true),
        (3, 7, 1, 1, 0, false, [0, 0, 1, 2, 0, 0, 2, 1], 0.0, true),
        (17, 9, 3, 1, 1, true, [0, 0, 1, 1, 0, 0, 1, 1], 0.0, true),
        // Not folded: channels padded, a non-zero fill.
        (4, 9, 3, 1, 0, false, [0, 1, 1, 1, 0, 0, 1, 1], 0.0, false),
        (4, 9, 3, 1, 0, false, [0, 0, 1, 1, 0, 0, 1, 1], 0.5, false),
    ];
    for (i, &(c, side, k, s, p, depthwise, pads, value, folds)) in cases.iter().enumerate() {
        let group = if depthwise { c } else { 1 };
        let m = if depthwise { c } else { c + 3 };
        let added_c = usize::try_from(pads[1] + pads[5]).unwrap();
        let mut n = Network::new();
        let x = n
            .add_input("x", TensorInfo::new(DataType::F32, vec![1, c, side, side]))
            .unwrap();
        let padded = n.add_layer("pad", pad(pads, value), &[x]).unwrap()[0];
        let cin = (c + added_c) / group;
        let w = n
            .add_constant(
                "w",
                random(
                    &[m + added_c * usize::from(depthwise), cin, k, k],
                    7 + i as u64,
                ),
            )
            .unwrap();
        let b = n
            .add_constant("b", random(&[m + added_c * usize::from(depthwise)], 9))
            .unwrap();
        let g = if depthwise { c + added_c } else { 1 };
        let y = n
            .add_layer("conv", conv2d(k, s, p, g), &[padded, w, b])
            .unwrap()[0];
        let z = n
            .add_layer("relu", Op::Unary(backplane::core::ops::UnaryOp::Relu), &[y])
            .unwrap()[0];
        n.mark_output(z).unwrap();
        let opt = rt.optimize(&n, &options("CpuAcc")).unwrap();
        let pads_left = opt
            .network()
            .layers()
            .iter()
            .filter(|l| matches!(l.op, Op::Pad(_)))
            .count();
        assert_eq!(pads_left, usize::from(!folds), "case {i}");
        let xv = random(&[1, c, side, side], 11 + i as u64);
        let got = run(&rt, &n, "CpuAcc", &[("x", &xv)]);
        let want = run(&rt, &n, "CpuRef", &[("x", &xv)]);
        assert_close(&format!("case {i}"), &got[0], &want[0]);
    }
}

/// Depthwise and pointwise convolutions of fewer than 16 channels over a plane of 64×64 or
/// more stay NCHW (the channels-last blocks would be mostly padding lanes); with 16 channels
/// the same body runs channels-last. Both match CpuRef.
#[test]
fn few_channels_over_a_large_plane_stay_channels_first() {
    use backplane::core::ops::UnaryOp;
    let rt = backplane::RuntimeBuilder::new().build().unwrap();
    for (c, side, regioned) in [(8, 131, false), (16, 131, true), (8, 33, true)] {
        let mut n = Network::new();
        let x = n
            .add_input("x", TensorInfo::new(DataType::F32, vec![1, 3, side, side]))
            .unwrap();
        let mut t = x;
        for (i, (cin, m, k, s, g)) in [(3, c, 3, 2, 1), (c, c, 3, 1, c), (c, c, 1, 1, 1)]
            .into_iter()
            .enumerate()
        {
            let w = n
                .add_constant(&format!("w{i}"), random(&[m, cin / g, k, k], 40 + i as u64))
                .unwrap();
            let b = n
                .add_constant(&format!("b{i}"), random(&[m], 50 + i as u64))
                .unwrap();
            let y = n
                .add_layer(&format!("conv{i}"), conv2d(k, s, k / 2, g), &[t, w, b])
                .unwrap()[0];
            t = n
                .add_layer(&format!("relu{i}"), Op::Unary(UnaryOp::Relu), &[y])
                .unwrap()[0];
        }
        n.mark_output(t).unwrap();
        let opt = rt.optimize(&n, &options("CpuAcc")).unwrap();
        let channels_last = opt
            .network()
            .layers()
            .iter()
            .filter(|l| {
                conv_layout(&l.op).is_some()
                    || matches!(&l.op, Op::Custom(c) if c.op_type == "FusedConvPair")
            })
            .count();
        assert_eq!(channels_last > 0, regioned, "c{c} side {side}");
        let xv = random(&[1, 3, side, side], 60);
        let got = run(&rt, &n, "CpuAcc", &[("x", &xv)]);
        let want = run(&rt, &n, "CpuRef", &[("x", &xv)]);
        assert_close(&format!("c{c} side {side}"), &got[0], &want[0]);
    }
}
