//! Data layouts: a backend whose tensor-handle factory stores 4-D tensors channels-last
//! beside one that stores them row-major. The optimizer inserts exactly one Permute at each
//! border, none where the bytes agree ([1, C, 1, 1] constants), and adjacent inverse
//! permutes cancel; results match the row-major backend alone.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use backplane_backend_api::*;
use backplane_core::ops::{BinaryOp, UnaryOp};
use backplane_core::{DataType, Network, Op, Tensor, TensorInfo, TensorView, TensorViewMut};
use backplane_runtime::strategy::EdgeStrategy;
use backplane_runtime::{BackendRegistry, OptimizerOptions, Runtime, RuntimeOptions};
use common::{Log, Mock};
use std::sync::Arc;

fn id(s: &str) -> BackendId {
    BackendId::new(s).unwrap()
}

fn channels_last() -> FactoryId {
    FactoryId::new("Test/Nhwc/ChannelsLast").unwrap()
}

struct ClFactory;

impl TensorHandleFactory for ClFactory {
    fn id(&self) -> FactoryId {
        channels_last()
    }
    fn properties(&self) -> FactoryProperties {
        FactoryProperties {
            mappable: true,
            // It is host memory: host tensors can be handed over where the bytes agree.
            import_sources: MemorySources::HOST,
            layout: DataLayout::ChannelsLast,
            ..FactoryProperties::default()
        }
    }
    fn create_tensor_handle(&self, info: &TensorInfo) -> Result<Box<dyn TensorHandle>> {
        // Host memory that the backend fills in NHWC order.
        Ok(Box::new(OwnedHostHandle(Tensor::zeros(info.clone())?)))
    }
}

/// Runs Relu and a per-channel scale (Mul by a [1, C, 1, 1] tensor), on NHWC bytes (the
/// scale reads channel `i % C`, only right if the bytes really are channels-last) or, as
/// "Nchw", on row-major bytes in host memory (channel `i / (H * W) % C`).
#[derive(Clone)]
struct Layouts {
    channels_last: bool,
}

struct NhwcSupport;

impl LayerSupport for NhwcSupport {
    fn is_layer_supported(&self, layer: &LayerDesc) -> Support {
        let rank4 = layer.inputs[0].shape.rank() == 4 && layer.inputs[0].dtype == DataType::F32;
        match &layer.op {
            Op::Unary(UnaryOp::Relu) if rank4 => Support::Supported,
            Op::Binary(BinaryOp::Mul) if rank4 => {
                let s = layer.inputs[1].shape.dims();
                let c = layer.inputs[0].shape.dims()[1];
                if s == [1, c, 1, 1] {
                    Support::Supported
                } else {
                    Support::no("only per-channel scales")
                }
            }
            _ => Support::no("Nhwc runs Relu and per-channel Mul"),
        }
    }
}

struct ChannelScale {
    channels_last: bool,
}

impl Workload for ChannelScale {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        let d = inputs[0].dims();
        let plane = d[2] * d[3];
        let x = inputs[0].as_slice::<f32>()?;
        let s = inputs[1].as_slice::<f32>()?;
        let y = outputs[0].as_mut_slice::<f32>()?;
        for (i, (o, v)) in y.iter_mut().zip(x).enumerate() {
            let c = if self.channels_last {
                i % s.len()
            } else {
                i / plane % s.len()
            };
            *o = v * s[c];
        }
        Ok(())
    }
}

struct Relu;

impl Workload for Relu {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        let x = inputs[0].as_slice::<f32>()?;
        for (o, v) in outputs[0].as_mut_slice::<f32>()?.iter_mut().zip(x) {
            *o = v.max(0.0);
        }
        Ok(())
    }
}

struct LayoutWorkloads {
    channels_last: bool,
}

impl WorkloadFactory for LayoutWorkloads {
    fn create_workload(&self, layer: &LayerDesc) -> Result<Box<dyn Workload>> {
        Ok(match layer.op {
            Op::Binary(BinaryOp::Mul) => Box::new(ChannelScale {
                channels_last: self.channels_last,
            }),
            _ => Box::new(Relu),
        })
    }
}

impl Backend for Layouts {
    fn id(&self) -> BackendId {
        id(if self.channels_last { "Nhwc" } else { "Nchw" })
    }
    fn layer_support(&self) -> Arc<dyn LayerSupport> {
        Arc::new(NhwcSupport)
    }
    fn create_workload_factory(
        &self,
        _mm: Option<Arc<dyn MemoryManager>>,
    ) -> Result<Box<dyn WorkloadFactory>> {
        Ok(Box::new(LayoutWorkloads {
            channels_last: self.channels_last,
        }))
    }
    fn register_tensor_handle_factories(&self, registry: &mut TensorHandleFactoryRegistry) {
        if self.channels_last {
            registry.register_factory(Arc::new(ClFactory));
        }
    }
    fn handle_factory_preferences(&self) -> Vec<FactoryId> {
        if self.channels_last {
            vec![channels_last()]
        } else {
            vec![FactoryId::host()]
        }
    }
}

fn runtime() -> Runtime {
    let log = Log::default();
    let mut reg = BackendRegistry::new();
    reg.register(
        id("Host"),
        Mock::new("Host", &["Mul", "Relu"], &log).factory(),
    )
    .unwrap();
    for channels_last in [true, false] {
        let b = Layouts { channels_last };
        reg.register(
            b.id(),
            Arc::new(move || Box::new(b.clone()) as Box<dyn Backend>),
        )
        .unwrap();
    }
    Runtime::new(reg, RuntimeOptions::default()).unwrap()
}

fn info(dims: &[usize]) -> TensorInfo {
    TensorInfo::new(DataType::F32, dims.to_vec())
}

/// x [1, 3, 2, 2] -> relu1 -> mul1 (* s1) -> mul2 (* s2) -> relu2 -> y, plus `extra`
/// layers spliced in after mul2.
fn network(
    extra: impl FnOnce(&mut Network, backplane_core::TensorId) -> backplane_core::TensorId,
) -> Network {
    let mut n = Network::new();
    let x = n.add_input("x", info(&[1, 3, 2, 2])).unwrap();
    let s1 = n
        .add_constant(
            "s1",
            Tensor::from_vec(vec![1, 3, 1, 1], vec![1.0f32, 2.0, 3.0]).unwrap(),
        )
        .unwrap();
    let s2 = n
        .add_constant(
            "s2",
            Tensor::from_vec(vec![1, 3, 1, 1], vec![-1.0f32, 0.5, 10.0]).unwrap(),
        )
        .unwrap();
    let r = n
        .add_layer("relu1", Op::Unary(UnaryOp::Relu), &[x])
        .unwrap()[0];
    let m = n
        .add_layer("mul1", Op::Binary(BinaryOp::Mul), &[r, s1])
        .unwrap()[0];
    let m = n
        .add_layer("mul2", Op::Binary(BinaryOp::Mul), &[m, s2])
        .unwrap()[0];
    let m = extra(&mut n, m);
    let y = n
        .add_layer_named("relu2", Op::Unary(UnaryOp::Relu), &[m], &["y".into()])
        .unwrap()[0];
    n.mark_output(y).unwrap();
    n
}

fn input() -> Tensor {
    let v: Vec<f32> = (0..12).map(|i| i as f32 - 3.0).collect();
    Tensor::from_vec(vec![1, 3, 2, 2], v).unwrap()
}

/// Row-major reference: relu(relu(x) * s1 * s2) per channel.
fn expected() -> Vec<f32> {
    // s1 * s2 per channel.
    let s = [-1.0f32, 2.0 * 0.5, 3.0 * 10.0];
    input()
        .as_slice::<f32>()
        .unwrap()
        .iter()
        .enumerate()
        .map(|(i, v)| (v.max(0.0) * s[i / 4]).max(0.0))
        .collect()
}

fn run(
    rt: &Runtime,
    net: &Network,
    backends: &[&str],
) -> (backplane_runtime::OptimizedNetwork, Vec<f32>) {
    let opt = rt
        .optimize(
            net,
            &OptimizerOptions::new(backends.iter().map(|b| id(b)).collect()),
        )
        .unwrap();
    let nid = rt.load_network(opt.clone()).unwrap();
    let x = input();
    let out = rt.execute(nid, &[("x", &x)]).unwrap();
    (opt, out[0].1.as_slice::<f32>().unwrap().to_vec())
}

fn permutes(opt: &backplane_runtime::OptimizedNetwork) -> Vec<String> {
    opt.network()
        .layers()
        .iter()
        .filter(|l| matches!(l.op, Op::Permute { .. }))
        .map(|l| l.name.clone())
        .collect()
}

#[test]
fn one_permute_at_each_border_and_results_match() {
    let rt = runtime();
    let net = network(|_, t| t);
    let (host_only, want) = run(&rt, &net, &["Nchw"]);
    assert!(permutes(&host_only).is_empty());
    assert_eq!(want, expected());

    let (opt, got) = run(&rt, &net, &["Nhwc", "Host"]);
    assert_eq!(got, want, "channels-last run must match the row-major one");
    let assignment: Vec<(&str, &str)> = opt
        .network()
        .layers()
        .iter()
        .zip(opt.assignment())
        .map(|(l, b)| (l.name.as_str(), b.as_str()))
        .collect();
    // Everything runs on Nhwc: the input enters once, the output leaves once.
    assert_eq!(
        permutes(&opt),
        vec![
            "permute:x->Test/Nhwc/ChannelsLast",
            "permute:y->Backplane/Host/Cpu"
        ],
        "{assignment:?}"
    );
    let report = opt.tensor_strategy();
    assert_eq!(report.permutes, 2);
    assert_eq!(report.copies, 0);
    // The [1, C, 1, 1] scales are the same bytes in both layouts: imported, not permuted.
    assert_eq!(report.imports, 2);
    let permuted: Vec<&str> = report
        .edges
        .iter()
        .filter(|e| e.strategy == EdgeStrategy::Permute)
        .map(|e| e.tensor.as_str())
        .collect();
    assert_eq!(permuted, vec!["x", "y"]);
}

#[test]
fn borders_inside_the_network_each_get_one_permute() {
    let rt = runtime();
    // Relu layers pinned to Host: x -> relu1 (Host) -> mul1, mul2 (Nhwc) -> relu2 (Host).
    let net = network(|_, t| t);
    let mut options = OptimizerOptions::new(vec![id("Nhwc"), id("Host")]);
    options.layer_backends = vec![("Relu".into(), id("Host"))];
    let opt = rt.optimize(&net, &options).unwrap();
    let nid = rt.load_network(opt.clone()).unwrap();
    let x = input();
    let out = rt.execute(nid, &[("x", &x)]).unwrap();
    assert_eq!(out[0].1.as_slice::<f32>().unwrap(), expected().as_slice());
    assert_eq!(
        permutes(&opt),
        vec![
            "permute:relu1:0->Test/Nhwc/ChannelsLast",
            "permute:mul2:0->Backplane/Host/Cpu"
        ]
    );
}

#[test]
fn adjacent_inverse_permutes_cancel() {
    let rt = runtime();
    let std = vec![0, 1, 2, 3];
    let cl = vec![0, 2, 3, 1];
    let net = network(|n, t| {
        let a = n
            .add_layer(
                "to_cl",
                Op::Permute {
                    from: std.clone(),
                    to: cl.clone(),
                },
                &[t],
            )
            .unwrap()[0];
        n.add_layer(
            "back",
            Op::Permute {
                from: cl.clone(),
                to: std.clone(),
            },
            &[a],
        )
        .unwrap()[0]
    });
    let (opt, got) = run(&rt, &net, &["Nchw"]);
    assert_eq!(opt.report().permutes_cancelled, 1);
    assert!(permutes(&opt).is_empty(), "{:?}", permutes(&opt));
    assert_eq!(got, expected());
    // A lone permute changes the bytes, not the values' meaning: it stays and runs.
    let net = network(|n, t| {
        n.add_layer(
            "to_cl",
            Op::Permute {
                from: std.clone(),
                to: cl.clone(),
            },
            &[t],
        )
        .unwrap()[0]
    });
    let opt = rt
        .optimize(&net, &OptimizerOptions::new(vec![id("Nchw")]))
        .unwrap();
    assert_eq!(opt.report().permutes_cancelled, 0);
    assert_eq!(permutes(&opt), vec!["to_cl"]);
}
