//! Sweeps of whole network blocks, for backends that rewrite several layers together (CpuAcc
//! runs a MobileNet-style body as one channels-last region): an inverted-residual block with
//! squeeze-excite, as EfficientNet and MobileNetV3 have it. Expansion 1×1 + ReLU, depthwise
//! 3×3 or 5×5 (stride 1 or 2) + ReLU or HardSwish, global average pool, two 1×1 convolutions
//! (ReLU, then Sigmoid or HardSigmoid), the gate's `Mul` (either operand order), a projection
//! 1×1 with nothing after it, and the residual `Add` where the shapes allow. And DenseNet's
//! layer: BatchNormalization → ReLU → 1×1 convolution (CpuAcc folds the normalization into
//! the convolution's packing) → BatchNormalization → ReLU → 3×3 convolution, concatenated
//! to its input. Channel counts of 1 and primes, planes from 1×1 to 29×31. Each case runs
//! with the backend under test first (CpuRef behind it) against the same network on CpuRef
//! alone.

use crate::exec::{compare_outputs, run_network, Run};
use crate::generated::{run_families, Generated};
use crate::report::{Outcome, Report};
use crate::sweeps::Rng;
use backplane::core::ops::{AutoPad, BinaryOp, ConvDesc, MathOp, PoolKind, UnaryOp, Window};
use backplane::core::Op;
use backplane::core::TensorId;
use backplane::{BackendId, DataType, Network, Runtime, Tensor};

/// The suite's name in reports.
pub const SUITE: &str = "block sweeps";

/// A generated block: the network, its feeds and a line saying what it is.
pub struct BlockCase {
    /// The network.
    pub network: Network,
    /// Its input.
    pub feed: Vec<(String, Tensor)>,
    /// The shapes in a line.
    pub about: String,
    /// Tolerances against CpuRef.
    pub rtol: f64,
    /// Absolute tolerance.
    pub atol: f64,
}

/// Add a layer of one output to `net` and return that output.
fn layer(net: &mut Network, name: &str, op: Op, inputs: &[TensorId]) -> Result<TensorId, String> {
    net.add_layer(name, op, inputs)
        .map_err(|e| e.to_string())?
        .first()
        .copied()
        .ok_or_else(|| format!("{name}: no output"))
}

fn conv(k: usize, stride: usize, group: usize) -> Op {
    let p = k / 2;
    Op::Conv(ConvDesc {
        window: Window {
            kernel: vec![k, k],
            strides: vec![stride, stride],
            dilations: vec![1, 1],
            pads: vec![p, p, p, p],
            auto_pad: AutoPad::NotSet,
        },
        group,
    })
}

/// An inverted-residual block with squeeze-excite (see the module's documentation).
pub fn squeeze_excite_block(r: &mut Rng) -> Result<BlockCase, String> {
    let c = r.pick(&[1, 3, 16, 17]);
    let e = r.pick(&[2, 8, 24, 67]);
    let s = r.pick(&[1, 4, 5]);
    let o = r.pick(&[1, 7, 16, 17]);
    let (h, w) = (r.pick(&[1, 7, 14, 29]), r.pick(&[2, 7, 13, 31]));
    let k = r.pick(&[3, 3, 5]);
    let stride = r.pick(&[1, 1, 2]);
    let hard = r.below(2) == 0;
    let gate_first = r.below(2) == 0;
    let mut net = Network::new();
    let err = |e: backplane::core::CoreError| e.to_string();
    let x_value = r.tensor(DataType::F32, &[1, c, h, w], -1.0, 1.0)?;
    let x = net.add_input("x", x_value.info().clone()).map_err(err)?;
    let mut constant = |net: &mut Network, name: &str, dims: &[usize]| {
        let t = r.tensor(DataType::F32, dims, -0.5, 0.5)?;
        net.add_constant(name, t).map_err(err)
    };
    let w_expand = constant(&mut net, "w_expand", &[e, c, 1, 1])?;
    let b_expand = constant(&mut net, "b_expand", &[e])?;
    let w_dw = constant(&mut net, "w_dw", &[e, 1, k, k])?;
    let b_dw = constant(&mut net, "b_dw", &[e])?;
    let w_fc1 = constant(&mut net, "w_fc1", &[s, e, 1, 1])?;
    let b_fc1 = constant(&mut net, "b_fc1", &[s])?;
    let w_fc2 = constant(&mut net, "w_fc2", &[e, s, 1, 1])?;
    let b_fc2 = constant(&mut net, "b_fc2", &[e])?;
    let w_proj = constant(&mut net, "w_project", &[o, e, 1, 1])?;
    let b_proj = constant(&mut net, "b_project", &[o])?;
    let relu = Op::Unary(UnaryOp::Relu);
    let t = layer(&mut net, "expand", conv(1, 1, 1), &[x, w_expand, b_expand])?;
    let t = layer(&mut net, "expand_act", relu.clone(), &[t])?;
    let t = layer(&mut net, "dw", conv(k, stride, e), &[t, w_dw, b_dw])?;
    let dw_act = if hard {
        Op::Math(MathOp::HardSwish)
    } else {
        relu.clone()
    };
    let d = layer(&mut net, "dw_act", dw_act, &[t])?;
    let p = layer(&mut net, "pool", Op::GlobalPool(PoolKind::Average), &[d])?;
    let t = layer(&mut net, "fc1", conv(1, 1, 1), &[p, w_fc1, b_fc1])?;
    let t = layer(&mut net, "fc1_act", relu, &[t])?;
    let t = layer(&mut net, "fc2", conv(1, 1, 1), &[t, w_fc2, b_fc2])?;
    let gate_op = if hard {
        Op::Math(MathOp::HardSigmoid {
            alpha: 1.0 / 6.0,
            beta: 0.5,
        })
    } else {
        Op::Unary(UnaryOp::Sigmoid)
    };
    let g = layer(&mut net, "gate", gate_op, &[t])?;
    let mul_in = if gate_first { [g, d] } else { [d, g] };
    let m = layer(&mut net, "scale", Op::Binary(BinaryOp::Mul), &mul_in)?;
    let mut y = layer(&mut net, "project", conv(1, 1, 1), &[m, w_proj, b_proj])?;
    let residual = stride == 1 && o == c;
    if residual {
        y = layer(&mut net, "residual", Op::Binary(BinaryOp::Add), &[y, x])?;
    }
    net.mark_output(y).map_err(err)?;
    Ok(BlockCase {
        network: net,
        feed: vec![("x".into(), x_value)],
        about: format!(
            "{c}->{e}->{o} on {h}x{w}, depthwise {k}x{k}/{stride}, squeeze {s}, {}{}{}",
            if hard { "hard gate" } else { "sigmoid gate" },
            if gate_first { ", gate first" } else { "" },
            if residual { ", residual" } else { "" },
        ),
        rtol: 1e-4,
        atol: 1e-4 * (e.max(c) as f64).sqrt(),
    })
}

/// A DenseNet layer (see the module's documentation): normalization scales of both signs,
/// some zero.
pub fn dense_layer(r: &mut Rng) -> Result<BlockCase, String> {
    let c = r.pick(&[1, 3, 16, 17, 64, 67]);
    let m = r.pick(&[1, 7, 32, 33]);
    let g = r.pick(&[1, 8, 13]);
    let (h, w) = (r.pick(&[1, 7, 14, 29]), r.pick(&[1, 7, 13, 31]));
    let mut net = Network::new();
    let err = |e: backplane::core::CoreError| e.to_string();
    let x_value = r.tensor(DataType::F32, &[1, c, h, w], -2.0, 2.0)?;
    let x = net.add_input("x", x_value.info().clone()).map_err(err)?;
    let norm = |r: &mut Rng, net: &mut Network, name: &str, t: TensorId, ch: usize| {
        let mut scale = r.tensor(DataType::F32, &[ch], -1.5, 1.5)?.to_f64_vec();
        for v in scale.iter_mut().step_by(3) {
            *v = 0.0;
        }
        let scale: Vec<f32> = scale.iter().map(|&v| v as f32).collect();
        let params = [
            Tensor::from_vec(vec![ch], scale).map_err(err)?,
            r.tensor(DataType::F32, &[ch], -0.5, 0.5)?,
            r.tensor(DataType::F32, &[ch], -0.5, 0.5)?,
            r.tensor(DataType::F32, &[ch], 0.1, 1.0)?,
        ];
        let mut inputs = vec![t];
        for (i, p) in params.into_iter().enumerate() {
            inputs.push(net.add_constant(&format!("{name}_p{i}"), p).map_err(err)?);
        }
        let n = layer(net, name, Op::BatchNormalization { epsilon: 1e-5 }, &inputs)?;
        layer(net, &format!("{name}_relu"), Op::Unary(UnaryOp::Relu), &[n])
    };
    let t = norm(r, &mut net, "norm1", x, c)?;
    let w1 = r.tensor(DataType::F32, &[m, c, 1, 1], -0.5, 0.5)?;
    let w1 = net.add_constant("w1", w1).map_err(err)?;
    let t = layer(&mut net, "conv1", conv(1, 1, 1), &[t, w1])?;
    let t = norm(r, &mut net, "norm2", t, m)?;
    let w2 = r.tensor(DataType::F32, &[g, m, 3, 3], -0.5, 0.5)?;
    let w2 = net.add_constant("w2", w2).map_err(err)?;
    let t = layer(&mut net, "conv2", conv(3, 1, 1), &[t, w2])?;
    let y = layer(&mut net, "concat", Op::Concat { axis: 1 }, &[x, t])?;
    net.mark_output(y).map_err(err)?;
    Ok(BlockCase {
        network: net,
        feed: vec![("x".into(), x_value)],
        about: format!("dense layer {c}->{m}->{g} on {h}x{w}"),
        rtol: 1e-4,
        atol: 1e-4 * (c.max(9 * m) as f64).sqrt(),
    })
}

/// A family's generator.
pub type Generator = crate::generated::Generator<BlockCase>;

/// The families: name and generator.
pub const FAMILIES: &[(&str, Generator)] = &[
    ("SqueezeExciteBlock", squeeze_excite_block),
    ("DenseLayer", dense_layer),
];

fn outputs(
    runtime: &Runtime,
    case: &BlockCase,
    preference: &[BackendId],
) -> Result<Vec<(String, Tensor)>, Outcome> {
    match run_network(runtime, &case.network, preference, &case.feed) {
        Run::Refused(why) => Err(Outcome::Refused(why)),
        Run::Ran { outputs, .. } => outputs.map_err(|why| Outcome::Failed { why, worst: None }),
    }
}

/// One case with `backend` first (CpuRef behind it) against CpuRef alone.
pub fn run_case(runtime: &Runtime, backend: &BackendId, case: &BlockCase) -> Outcome {
    let cpu_ref = match BackendId::new("CpuRef") {
        Ok(id) => id,
        Err(e) => return Outcome::Skipped(e.to_string()),
    };
    let want = match outputs(runtime, case, std::slice::from_ref(&cpu_ref)) {
        Ok(w) => w,
        Err(Outcome::Failed { why, .. }) => return Outcome::Skipped(format!("CpuRef: {why}")),
        Err(other) => return other,
    };
    match outputs(runtime, case, &[backend.clone(), cpu_ref]) {
        Ok(got) => compare_outputs(&got, &want, case.rtol, case.atol),
        Err(o) => o,
    }
}

/// Run `cases` blocks of every family on `backend`, from `seed`, into `report`.
pub fn run(runtime: &Runtime, backend: &BackendId, seed: u64, cases: usize, report: &mut Report) {
    run_families(SUITE, FAMILIES, 3_000_017, seed, cases, report, |case| {
        run_case(runtime, backend, case)
    });
}

impl Generated for BlockCase {
    fn about(&self) -> &str {
        &self.about
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Generated blocks run on CpuRef, and on CpuAcc first they match it.
    #[test]
    fn generated_blocks_run_and_match_on_cpu_acc() {
        let runtime = backplane::RuntimeBuilder::new().build();
        assert!(runtime.is_ok());
        let Ok(runtime) = runtime else { return };
        let Ok(cpu_acc) = BackendId::new("CpuAcc") else {
            return;
        };
        for (family, generate) in FAMILIES {
            for seed in 0..24 {
                let case = generate(&mut Rng::new(seed));
                assert!(case.is_ok(), "{family} seed {seed}: {:?}", case.err());
                let Ok(case) = case else { continue };
                let outcome = run_case(&runtime, &cpu_acc, &case);
                assert!(
                    matches!(outcome, Outcome::Passed),
                    "{family} seed {seed} ({}): {outcome:?}",
                    case.about
                );
            }
        }
    }
}
