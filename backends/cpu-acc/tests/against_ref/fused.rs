//! CpuAcc's fused layers (Conv+BatchNorm+activation, residual blocks, MatMul+Add+Gelu,
//! depthwise+activation) against CpuRef running the unfused chains.

use super::conv::conv_op;
use super::*;
use backplane_cpu_acc::act::Activation;
use backplane_cpu_acc::fusion::Fused;

/// Conv → BatchNormalization → Relu is fused into one CpuAcc layer whose output matches the
/// chain run by CpuRef; MatMul → Add → Gelu likewise.
#[test]
fn fused_chains_match_the_unfused_reference() {
    let mut r = Rng(8);
    let mut net = Network::new();
    // Three input channels: with AVX-512 the direct path, its activation in the tiles.
    let x = r.tensor(&[1, 3, 17, 17], 1.0);
    let w = r.tensor(&[17, 3, 3, 3], 0.5);
    let b = r.tensor(&[17], 0.5);
    let bn: Vec<Tensor> = (0..4)
        .map(|i| {
            let t = r.tensor(&[17], 1.0);
            if i == 3 {
                Tensor::from_vec(
                    vec![17],
                    t.as_slice::<f32>()
                        .unwrap()
                        .iter()
                        .map(|v| v.abs() + 0.5)
                        .collect(),
                )
                .unwrap()
            } else {
                t
            }
        })
        .collect();
    let xi = net.add_input("x", x.info().clone()).unwrap();
    let wi = net.add_constant("w", w.clone()).unwrap();
    let bi = net.add_constant("b", b.clone()).unwrap();
    let conv = conv_op(&[3, 3], &[2, 2], &[1, 1], &[1, 1, 1, 1], 1, AutoPad::NotSet);
    let c = net.add_layer("conv1", conv.clone(), &[xi, wi, bi]).unwrap()[0];
    let ps: Vec<_> = bn
        .iter()
        .enumerate()
        .map(|(i, t)| net.add_constant(&format!("bn{i}"), t.clone()).unwrap())
        .collect();
    let bn_op = Op::BatchNormalization { epsilon: 1e-5 };
    let n = net
        .add_layer("bn1", bn_op.clone(), &[c, ps[0], ps[1], ps[2], ps[3]])
        .unwrap()[0];
    let y = net
        .add_layer("relu1", Op::Unary(UnaryOp::Relu), &[n])
        .unwrap()[0];
    net.mark_output(y).unwrap();
    let (desc, inputs) = sole_replacement(&CpuAccBackend::new(), &net, &[(xi, &x)]);
    assert_eq!(desc.name, "conv1+bn1+relu1");
    let refs: Vec<&Tensor> = inputs.iter().collect();
    let got = run_desc(&desc, &refs, 2);
    let t = reference(&conv, &[&x, &w, &b]).remove(0);
    let t = reference(&bn_op, &[&t, &bn[0], &bn[1], &bn[2], &bn[3]]).remove(0);
    let want = reference(&Op::Unary(UnaryOp::Relu), &[&t]).remove(0);
    close("conv+bn+relu", &got[0], &want, 1e-4, 1e-4);

    // MatMul + bias + Gelu.
    let mut net = Network::new();
    let a = r.tensor(&[1, 63, 17], 1.0);
    let wm = r.tensor(&[17, 257], 1.0);
    let bias = r.tensor(&[257], 1.0);
    let ai = net.add_input("a", a.info().clone()).unwrap();
    let wi = net.add_constant("w", wm.clone()).unwrap();
    let bi = net.add_constant("bias", bias.clone()).unwrap();
    let mm = net.add_layer("mm", Op::MatMul, &[ai, wi]).unwrap()[0];
    let ad = net
        .add_layer("add", Op::Binary(BinaryOp::Add), &[mm, bi])
        .unwrap()[0];
    let gelu = Op::Unary(UnaryOp::Gelu {
        tanh_approximation: false,
    });
    let y = net.add_layer("gelu", gelu.clone(), &[ad]).unwrap()[0];
    net.mark_output(y).unwrap();
    let layers: Vec<_> = (0..net.layers().len())
        .map(backplane_core::LayerId)
        .collect();
    let views = CpuAccBackend::new().optimize_subgraph(&SubgraphView::new(&net, layers));
    let rep = &views.substitutions[0].replacement[0];
    assert_eq!(rep.name, "mm+add+gelu");
    let ValueRef::NewConstant(bias_const) = &rep.inputs[2] else {
        panic!("bias")
    };
    let desc = LayerDesc {
        name: rep.name.clone(),
        op: rep.op.clone(),
        inputs: vec![
            a.info().clone(),
            wm.info().clone(),
            bias_const.info().clone(),
        ],
        outputs: vec![net.tensor(y).info.clone()],
        constants: vec![None, Some(Arc::new(wm.clone())), Some(bias_const.clone())],
    };
    let got = run_desc(&desc, &[&a, &wm, bias_const], 1);
    let t = reference(&Op::MatMul, &[&a, &wm]).remove(0);
    let t = reference(&Op::Binary(BinaryOp::Add), &[&t, &bias]).remove(0);
    let want = reference(&gelu, &[&t]).remove(0);
    close("matmul+add+gelu", &got[0], &want, 1e-4, 1e-4);
}

/// The exporters' GELU subgraph after MatMul+Add is folded into the fused layer.
#[test]
fn erf_gelu_subgraph_is_fused_into_the_matmul() {
    let mut r = Rng(9);
    let mut net = Network::new();
    let a = r.tensor(&[7, 17], 1.0);
    let ai = net.add_input("a", a.info().clone()).unwrap();
    let wi = net.add_constant("w", r.tensor(&[17, 63], 1.0)).unwrap();
    let bi = net.add_constant("b", r.tensor(&[63], 1.0)).unwrap();
    let k =
        |net: &mut Network, name: &str, v: f32| net.add_constant(name, Tensor::scalar(v)).unwrap();
    let (sqrt2, one, half) = (
        k(&mut net, "sqrt2", std::f32::consts::SQRT_2),
        k(&mut net, "one", 1.0),
        k(&mut net, "half", 0.5),
    );
    let mm = net.add_layer("mm", Op::MatMul, &[ai, wi]).unwrap()[0];
    let h = net
        .add_layer("bias", Op::Binary(BinaryOp::Add), &[mm, bi])
        .unwrap()[0];
    let d = net
        .add_layer("div", Op::Binary(BinaryOp::Div), &[h, sqrt2])
        .unwrap()[0];
    let e = net.add_layer("erf", Op::Unary(UnaryOp::Erf), &[d]).unwrap()[0];
    let p = net
        .add_layer("plus1", Op::Binary(BinaryOp::Add), &[e, one])
        .unwrap()[0];
    let m = net
        .add_layer("half", Op::Binary(BinaryOp::Mul), &[h, half])
        .unwrap()[0];
    let y = net
        .add_layer("gelu", Op::Binary(BinaryOp::Mul), &[m, p])
        .unwrap()[0];
    net.mark_output(y).unwrap();
    let layers: Vec<_> = (0..net.layers().len())
        .map(backplane_core::LayerId)
        .collect();
    let views = CpuAccBackend::new().optimize_subgraph(&SubgraphView::new(&net, layers));
    assert_eq!(views.substitutions.len(), 1);
    let s = &views.substitutions[0];
    assert_eq!(s.replaced.len(), 7);
    assert_eq!(s.replacement[0].name, "mm+bias+div+erf+plus1+half+gelu");
    let Op::Custom(c) = &s.replacement[0].op else {
        panic!("custom op expected")
    };
    let Ok(Fused::MatMul { act, .. }) = Fused::decode(c) else {
        panic!("a fused MatMul expected")
    };
    assert_eq!(
        act,
        Activation::Gelu {
            tanh_approximation: false
        }
    );
    assert!(views.untouched.is_empty());
}

/// Random BatchNormalization parameters for `c` channels: scale, bias, mean and a positive
/// variance.
fn batch_norm_params(r: &mut Rng, c: usize) -> Vec<Tensor> {
    (0..4)
        .map(|i| {
            let v: Vec<f32> = r.tensor(&[c], 1.0).as_slice::<f32>().unwrap().to_vec();
            let v = if i == 3 {
                v.iter().map(|v| v.abs() + 0.5).collect()
            } else {
                v
            };
            Tensor::from_vec(vec![c], v).unwrap()
        })
        .collect()
}

/// Run the only replacement layer of the only substitution CpuAcc makes in `net` (all of it),
/// as the runtime would: `feeds` give the network inputs, constants come from the network
/// or the substitution. Returns the replacement's name and output.
fn run_fused(
    net: &Network,
    feeds: &[(backplane_core::TensorId, &Tensor)],
    threads: usize,
) -> (String, Tensor) {
    let layers: Vec<_> = (0..net.layers().len())
        .map(backplane_core::LayerId)
        .collect();
    let views = CpuAccBackend::new().optimize_subgraph(&SubgraphView::new(net, layers));
    assert_eq!(views.substitutions.len(), 1, "one substitution");
    let rep = &views.substitutions[0].replacement[0];
    let mut inputs: Vec<Tensor> = Vec::new();
    let mut constants = Vec::new();
    for v in &rep.inputs {
        match v {
            ValueRef::Existing(t) => match feeds.iter().find(|(id, _)| id == t) {
                Some((_, x)) => {
                    inputs.push((*x).clone());
                    constants.push(None);
                }
                None => {
                    let k = net.tensor(*t).constant().unwrap().clone();
                    inputs.push((*k).clone());
                    constants.push(Some(k));
                }
            },
            ValueRef::NewConstant(k) => {
                inputs.push((**k).clone());
                constants.push(Some(k.clone()));
            }
            ValueRef::Produced { .. } => panic!("single-layer replacement"),
        }
    }
    let out = rep.outputs[0].unwrap();
    let desc = LayerDesc {
        name: rep.name.clone(),
        op: rep.op.clone(),
        inputs: inputs.iter().map(|t| t.info().clone()).collect(),
        outputs: vec![net.tensor(out).info.clone()],
        constants,
    };
    let refs: Vec<&Tensor> = inputs.iter().collect();
    (rep.name.clone(), run_desc(&desc, &refs, threads).remove(0))
}

/// A residual block's `Conv [→ BatchNormalization] → Add(shortcut) → Relu` becomes one
/// FusedConv whose output matches CpuRef running the chain, on every convolution path
/// (im2col, 1×1, Winograd-sized, depthwise), with the shortcut on either side of the Add,
/// with and without a bias, on 1 and 2 threads.
#[test]
fn residual_blocks_fuse_into_the_convolution() {
    let mut r = Rng(21);
    // (channels, size, kernel, group, bias, batch norm, shortcut first)
    for (c, hw, k, group, with_bias, with_bn, shortcut_first) in [
        (7, 17, 3, 1, true, true, false),
        (5, 9, 1, 1, false, false, true),
        (128, 16, 3, 1, false, true, false),
        (16, 13, 3, 16, true, false, true),
        // Three channels: the direct path, with the residual added after it.
        (3, 11, 3, 1, true, true, false),
    ] {
        let mut net = Network::new();
        let x = r.tensor(&[1, c, hw, hw], 1.0);
        let w = r.tensor(&[c, c / group, k, k], 0.3);
        let b = r.tensor(&[c], 0.5);
        let bn = batch_norm_params(&mut r, c);
        let xi = net.add_input("x", x.info().clone()).unwrap();
        let wi = net.add_constant("w", w.clone()).unwrap();
        let p = k / 2;
        let conv = conv_op(
            &[k, k],
            &[1, 1],
            &[1, 1],
            &[p, p, p, p],
            group,
            AutoPad::NotSet,
        );
        let conv_in = if with_bias {
            vec![xi, wi, net.add_constant("b", b.clone()).unwrap()]
        } else {
            vec![xi, wi]
        };
        let mut t = net.add_layer("conv", conv.clone(), &conv_in).unwrap()[0];
        let bn_op = Op::BatchNormalization { epsilon: 1e-5 };
        if with_bn {
            let ps: Vec<_> = bn
                .iter()
                .enumerate()
                .map(|(i, p)| net.add_constant(&format!("bn{i}"), p.clone()).unwrap())
                .collect();
            t = net
                .add_layer("bn", bn_op.clone(), &[t, ps[0], ps[1], ps[2], ps[3]])
                .unwrap()[0];
        }
        let add_in = if shortcut_first { [xi, t] } else { [t, xi] };
        let s = net
            .add_layer("add", Op::Binary(BinaryOp::Add), &add_in)
            .unwrap()[0];
        let y = net
            .add_layer("relu", Op::Unary(UnaryOp::Relu), &[s])
            .unwrap()[0];
        net.mark_output(y).unwrap();

        let mut want = if with_bias {
            reference(&conv, &[&x, &w, &b]).remove(0)
        } else {
            reference(&conv, &[&x, &w]).remove(0)
        };
        if with_bn {
            want = reference(&bn_op, &[&want, &bn[0], &bn[1], &bn[2], &bn[3]]).remove(0);
        }
        let sum_in = if shortcut_first {
            [&x, &want]
        } else {
            [&want, &x]
        };
        let want = reference(&Op::Binary(BinaryOp::Add), &sum_in).remove(0);
        let want = reference(&Op::Unary(UnaryOp::Relu), &[&want]).remove(0);
        for threads in [1, 2] {
            let (name, got) = run_fused(&net, &[(xi, &x)], threads);
            let expect_name = if with_bn {
                "conv+bn+add+relu"
            } else {
                "conv+add+relu"
            };
            assert_eq!(name, expect_name);
            let atol = 1e-4 * ((c / group * k * k) as f64).sqrt();
            close(
                &format!("residual c{c} {hw}x{hw} k{k} g{group} threads {threads}"),
                &got,
                &want,
                1e-4,
                atol,
            );
        }
    }
}

/// A depthwise convolution followed by Relu, Clip (Relu6) or LeakyRelu becomes one FusedConv
/// whose output matches CpuRef running the pair, on planes wide enough for the in-place rows
/// path (activation applied in its kernel) and narrow ones, stride 1 and 2, with and without
/// a bias, on 1 and 2 threads.
#[test]
fn depthwise_with_activation_fuses() {
    let mut r = Rng(23);
    // The activations applied in the kernel's registers, and (MobileNetV3's, YOLOv4's)
    // ones applied after it.
    let acts = [
        Op::Unary(UnaryOp::Relu),
        Op::Unary(UnaryOp::Clip { min: 0.0, max: 6.0 }),
        Op::Unary(UnaryOp::LeakyRelu { alpha: 0.2 }),
        Op::Math(MathOp::HardSwish),
        Op::Math(MathOp::HardSigmoid {
            alpha: 0.2,
            beta: 0.5,
        }),
        Op::Math(MathOp::Mish),
    ];
    for (i, (c, hw, s)) in [
        (16, 29, 1),
        (16, 29, 2),
        (5, 31, 2),
        (17, 9, 1),
        (3, 64, 1),
        (40, 14, 1),
    ]
    .into_iter()
    .enumerate()
    {
        let act = acts[i % acts.len()].clone();
        let with_bias = i % 2 == 0;
        let mut net = Network::new();
        let x = r.tensor(&[1, c, hw, hw], 4.0);
        let w = r.tensor(&[c, 1, 3, 3], 1.0);
        let b = r.tensor(&[c], 1.0);
        let xi = net.add_input("x", x.info().clone()).unwrap();
        let wi = net.add_constant("w", w.clone()).unwrap();
        let conv = conv_op(&[3, 3], &[s, s], &[1, 1], &[1, 1, 1, 1], c, AutoPad::NotSet);
        let conv_in = if with_bias {
            vec![xi, wi, net.add_constant("b", b.clone()).unwrap()]
        } else {
            vec![xi, wi]
        };
        let t = net.add_layer("conv", conv.clone(), &conv_in).unwrap()[0];
        let y = net.add_layer("act", act.clone(), &[t]).unwrap()[0];
        net.mark_output(y).unwrap();
        let want = if with_bias {
            reference(&conv, &[&x, &w, &b]).remove(0)
        } else {
            reference(&conv, &[&x, &w]).remove(0)
        };
        let want = reference(&act, &[&want]).remove(0);
        for threads in [1, 2] {
            let (name, got) = run_fused(&net, &[(xi, &x)], threads);
            assert_eq!(name, "conv+act");
            close(
                &format!("depthwise c{c} {hw}x{hw} s{s} {act:?} threads {threads}"),
                &got,
                &want,
                1e-4,
                1e-4,
            );
        }
    }
}

/// A BatchNormalization followed by an activation (Relu, Clip, LeakyRelu, the SiLU subgraph),
/// not after a convolution, becomes one FusedBatchNorm equal to CpuRef running the pair, on
/// planes of 1, 49 (DenseNet's 7×7) and 17·13 values, constant and run-time parameters, 1
/// and 2 threads. Without an activation it is left alone.
#[test]
fn batch_norm_with_activation_fuses() {
    let mut r = Rng(45);
    let acts: [(&str, Vec<Op>); 4] = [
        ("relu", vec![Op::Unary(UnaryOp::Relu)]),
        (
            "clip",
            vec![Op::Unary(UnaryOp::Clip { min: 0.0, max: 6.0 })],
        ),
        ("leaky", vec![Op::Unary(UnaryOp::LeakyRelu { alpha: 0.1 })]),
        ("silu", vec![]),
    ];
    for dims in [[2, 5, 1, 1], [1, 64, 7, 7], [1, 3, 17, 13]] {
        let c = dims[1];
        let x = r.tensor(&dims, 2.0);
        let params = batch_norm_params(&mut r, c);
        for (what, act_ops) in &acts {
            for constant in [true, false] {
                let mut net = Network::new();
                let xi = net.add_input("x", x.info().clone()).unwrap();
                let ps: Vec<_> = params
                    .iter()
                    .enumerate()
                    .map(|(i, p)| {
                        if constant {
                            net.add_constant(&format!("p{i}"), p.clone()).unwrap()
                        } else {
                            net.add_input(&format!("p{i}"), p.info().clone()).unwrap()
                        }
                    })
                    .collect();
                let bn_op = Op::BatchNormalization { epsilon: 1e-5 };
                let t = net
                    .add_layer("bn", bn_op.clone(), &[xi, ps[0], ps[1], ps[2], ps[3]])
                    .unwrap()[0];
                let normed = reference(
                    &bn_op,
                    &[&x, &params[0], &params[1], &params[2], &params[3]],
                )
                .remove(0);
                let (y, want) = if act_ops.is_empty() {
                    // SiLU as exporters write it: Mul(t, Sigmoid(t)).
                    let s = net
                        .add_layer("sigmoid", Op::Unary(UnaryOp::Sigmoid), &[t])
                        .unwrap()[0];
                    let y = net
                        .add_layer("mul", Op::Binary(BinaryOp::Mul), &[t, s])
                        .unwrap()[0];
                    let sig = reference(&Op::Unary(UnaryOp::Sigmoid), &[&normed]).remove(0);
                    let want = reference(&Op::Binary(BinaryOp::Mul), &[&normed, &sig]).remove(0);
                    (y, want)
                } else {
                    let y = net.add_layer(what, act_ops[0].clone(), &[t]).unwrap()[0];
                    (y, reference(&act_ops[0], &[&normed]).remove(0))
                };
                net.mark_output(y).unwrap();
                let mut feeds = vec![(xi, &x)];
                if !constant {
                    feeds.extend(ps.iter().copied().zip(params.iter()));
                }
                for threads in [1, 2] {
                    let (name, got) = run_fused(&net, &feeds, threads);
                    assert!(name.starts_with("bn+"), "{name}");
                    close(
                        &format!("bn+{what} {dims:?} constant {constant} threads {threads}"),
                        &got,
                        &want,
                        1e-5,
                        1e-5,
                    );
                }
            }
        }
    }
    // Alone, a BatchNormalization is not a fused layer.
    let mut net = Network::new();
    let x = r.tensor(&[1, 4, 3, 3], 1.0);
    let xi = net.add_input("x", x.info().clone()).unwrap();
    let ps: Vec<_> = (0..4)
        .map(|i| {
            let v = if i == 3 {
                vec![1.0f32; 4]
            } else {
                vec![0.5f32; 4]
            };
            net.add_constant(&format!("p{i}"), Tensor::from_vec(vec![4], v).unwrap())
                .unwrap()
        })
        .collect();
    let y = net
        .add_layer(
            "bn",
            Op::BatchNormalization { epsilon: 1e-5 },
            &[xi, ps[0], ps[1], ps[2], ps[3]],
        )
        .unwrap()[0];
    net.mark_output(y).unwrap();
    let layers = vec![backplane_core::LayerId(0)];
    let views = CpuAccBackend::new().optimize_subgraph(&SubgraphView::new(&net, layers));
    assert!(views.substitutions.is_empty());
}
