//! Small test backends: each supports a few f32 elementwise ops on same-shape inputs.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use backplane_backend_api::*;
use backplane_core::ops::{BinaryOp, CustomOp, UnaryOp};
use backplane_core::{Op, TensorView, TensorViewMut};
pub mod device;

use std::sync::{Arc, Mutex};

/// Shared event log for context notifications.
pub type Log = Arc<Mutex<Vec<String>>>;

/// What a mock backend does.
#[derive(Clone)]
pub struct Mock {
    pub id: &'static str,
    pub ops: Vec<&'static str>,
    pub log: Log,
    /// Fuse Add followed by Relu into a custom AddRelu layer.
    pub fuse_add_relu: bool,
    /// Reject layers of these op types in optimize_subgraph.
    pub fail_in_optimize: Vec<&'static str>,
    /// Workloads of this op type return an error / panic.
    pub error_on: Option<&'static str>,
    pub panic_on: Option<&'static str>,
    /// Log where each workload's inputs and output start, modulo 64 bytes.
    pub log_alignment: bool,
}

impl Mock {
    pub fn new(id: &'static str, ops: &[&'static str], log: &Log) -> Self {
        Mock {
            id,
            ops: ops.to_vec(),
            log: log.clone(),
            fuse_add_relu: false,
            fail_in_optimize: vec![],
            error_on: None,
            panic_on: None,
            log_alignment: false,
        }
    }

    pub fn factory(self) -> backplane_runtime::BackendFactory {
        Arc::new(move || Box::new(self.clone()) as Box<dyn Backend>)
    }
}

struct MockSupport(Mock);

impl LayerSupport for MockSupport {
    fn is_layer_supported(&self, layer: &LayerDesc) -> Support {
        if !self.0.ops.contains(&layer.op.name()) {
            return Support::no(format!(
                "{} does not implement {}",
                self.0.id,
                layer.op.name()
            ));
        }
        if layer
            .inputs
            .iter()
            .any(|i| i.dtype != backplane_core::DataType::F32)
        {
            return Support::no("only f32");
        }
        if layer
            .inputs
            .iter()
            .any(|i| i.shape != layer.outputs[0].shape)
        {
            return Support::no("no broadcasting");
        }
        Support::Supported
    }
}

struct MockFactory(Mock);

struct MockWorkload {
    op: Op,
    mock: Mock,
}

impl Workload for MockWorkload {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        let name = self.op.name();
        if self.mock.error_on == Some(name) {
            return Err(BackendError::Execution(format!(
                "{} refuses to run {name}",
                self.mock.id
            )));
        }
        if self.mock.panic_on == Some(name) {
            panic!("{} blew up on {name}", self.mock.id);
        }
        if self.mock.log_alignment {
            let at = |p: *const u8| p as usize % 64;
            let ins: Vec<usize> = inputs.iter().map(|v| at(v.data.as_ptr())).collect();
            let out = at(outputs[0].data.as_ptr());
            self.mock
                .log
                .lock()
                .unwrap()
                .push(format!("align {name}: inputs {ins:?} output {out}"));
        }
        let a = inputs[0].as_slice::<f32>()?;
        let b = inputs.get(1).map(|b| b.as_slice::<f32>()).transpose()?;
        let out = outputs[0].as_mut_slice::<f32>()?;
        for i in 0..out.len() {
            out[i] = match &self.op {
                Op::Binary(BinaryOp::Add) => a[i] + b.unwrap()[i],
                Op::Binary(BinaryOp::Mul) => a[i] * b.unwrap()[i],
                Op::Unary(UnaryOp::Relu) => a[i].max(0.0),
                Op::Custom(c) if c.op_type == "AddRelu" => (a[i] + b.unwrap()[i]).max(0.0),
                other => return Err(BackendError::Other(format!("unexpected {}", other.name()))),
            };
        }
        Ok(())
    }
}

impl WorkloadFactory for MockFactory {
    fn create_workload(&self, layer: &LayerDesc) -> Result<Box<dyn Workload>> {
        self.0
            .log
            .lock()
            .unwrap()
            .push(format!("{}: workload {}", self.0.id, layer.name));
        Ok(Box::new(MockWorkload {
            op: layer.op.clone(),
            mock: self.0.clone(),
        }))
    }
}

struct MockContext(Mock);

impl BackendContext for MockContext {
    fn before_load_network(&self, id: NetworkId) -> Result<()> {
        self.0
            .log
            .lock()
            .unwrap()
            .push(format!("{}: before load {id}", self.0.id));
        Ok(())
    }
    fn after_load_network(&self, id: NetworkId) -> Result<()> {
        self.0
            .log
            .lock()
            .unwrap()
            .push(format!("{}: after load {id}", self.0.id));
        Ok(())
    }
    fn before_unload_network(&self, id: NetworkId) -> Result<()> {
        self.0
            .log
            .lock()
            .unwrap()
            .push(format!("{}: before unload {id}", self.0.id));
        Ok(())
    }
    fn after_unload_network(&self, id: NetworkId) {
        self.0
            .log
            .lock()
            .unwrap()
            .push(format!("{}: after unload {id}", self.0.id));
    }
    fn after_execute_network(&self, id: NetworkId) -> Result<()> {
        self.0
            .log
            .lock()
            .unwrap()
            .push(format!("{}: after execute {id}", self.0.id));
        Ok(())
    }
}

struct MockMemory(Mock);

impl MemoryManager for MockMemory {
    fn acquire(&self) -> Result<()> {
        self.0
            .log
            .lock()
            .unwrap()
            .push(format!("{}: acquire", self.0.id));
        Ok(())
    }
    fn release(&self) {
        self.0
            .log
            .lock()
            .unwrap()
            .push(format!("{}: release", self.0.id));
    }
}

impl Backend for Mock {
    fn id(&self) -> BackendId {
        BackendId::new(self.id).unwrap()
    }
    fn layer_support(&self) -> Arc<dyn LayerSupport> {
        let mut m = self.clone();
        m.ops.push("AddRelu");
        Arc::new(MockSupport(m))
    }
    fn create_memory_manager(&self) -> Option<Arc<dyn MemoryManager>> {
        Some(Arc::new(MockMemory(self.clone())))
    }
    fn create_workload_factory(
        &self,
        _mm: Option<Arc<dyn MemoryManager>>,
    ) -> Result<Box<dyn WorkloadFactory>> {
        Ok(Box::new(MockFactory(self.clone())))
    }
    fn create_backend_context(
        &self,
        _o: &BackendOptions,
    ) -> Result<Option<Box<dyn BackendContext>>> {
        Ok(Some(Box::new(MockContext(self.clone()))))
    }
    fn optimize_subgraph(&self, subgraph: &SubgraphView<'_>) -> OptimizationViews {
        let net = subgraph.network();
        let mut views = OptimizationViews::default();
        let mut untouched = Vec::new();
        let mut used = std::collections::HashSet::new();
        let consumers = net.consumers();
        for &l in subgraph.layers() {
            if used.contains(&l) {
                continue;
            }
            let layer = net.layer(l);
            if self.fail_in_optimize.contains(&layer.op.name()) {
                views.failed.push(vec![l]);
                continue;
            }
            if self.fuse_add_relu && layer.op == Op::Binary(BinaryOp::Add) {
                let out = layer.outputs[0];
                let users = &consumers[out.0];
                if users.len() == 1 && !net.outputs().contains(&out) {
                    let (relu, _) = users[0];
                    if subgraph.layers().contains(&relu)
                        && net.layer(relu).op == Op::Unary(UnaryOp::Relu)
                    {
                        used.insert(relu);
                        let relu_out = net.layer(relu).outputs[0];
                        views.substitutions.push(Substitution {
                            replaced: vec![l, relu],
                            replacement: vec![ReplacementLayer {
                                name: format!("{}+{}", layer.name, net.layer(relu).name),
                                op: Op::Custom(CustomOp {
                                    domain: self.id.into(),
                                    op_type: "AddRelu".into(),
                                    attributes: vec![],
                                    outputs: vec![net.tensor(relu_out).info.clone()],
                                    payload: None,
                                }),
                                inputs: layer
                                    .inputs
                                    .iter()
                                    .map(|t| ValueRef::Existing(*t))
                                    .collect(),
                                outputs: vec![Some(relu_out)],
                            }],
                        });
                        continue;
                    }
                }
            }
            untouched.push(l);
        }
        if !untouched.is_empty() {
            views.untouched.push(untouched);
        }
        views
    }
}
