//! Running a node's lowering: the steps an operator's translation returns (standard ops,
//! constants folded at import where every input is known, temporaries between steps) turned
//! into layers of the network or into known values.

use super::*;

impl Importer<'_> {
    /// The value behind a step input, with the name it goes by.
    pub(super) fn step_input(
        &mut self,
        node: &NodeProto,
        node_name: &str,
        temps: &[Option<String>],
        src: &Src,
    ) -> Result<String, TxError> {
        match src {
            Src::Input(i) => node
                .input
                .get(*i)
                .filter(|n| !n.is_empty())
                .cloned()
                .ok_or_else(|| {
                    TxError::Fatal(OnnxError::invalid(format!(
                        "node '{node_name}': required input #{i} is missing"
                    )))
                }),
            Src::Temp(k) => temps.get(*k).cloned().flatten().ok_or_else(|| {
                TxError::Fatal(OnnxError::invalid(format!(
                    "node '{node_name}': internal error: temporary #{k} read before written"
                )))
            }),
            Src::Const(t) => {
                let name = self.fresh_tensor_name(&format!("{node_name}/const"));
                self.values.insert(name.clone(), Value::Known(t.clone()));
                Ok(name)
            }
        }
    }

    /// Fold a step whose inputs are all constants, if possible.
    pub(super) fn try_fold(
        &self,
        node_name: &str,
        op: &Op,
        inputs: &[Arc<Tensor>],
    ) -> Result<Option<Vec<Tensor>>, OnnxError> {
        let infos: Vec<&TensorInfo> = inputs.iter().map(|t| t.info()).collect();
        let outs = op
            .infer(&infos)
            .map_err(|e| OnnxError::core(node_name, e))?;
        for (k, o) in outs.iter().enumerate() {
            let fits = check_size(
                &format!("{node_name}:{k}"),
                o.shape.dims(),
                o.dtype.size(),
                self.options.max_tensor_bytes,
            );
            if fits.is_err() {
                return Ok(None);
            }
        }
        if widens_large_8bit_constant(op, inputs) {
            return Ok(None);
        }
        // Ops that only relabel the shape fold without an evaluator.
        if matches!(
            op,
            Op::Identity
                | Op::Reshape { .. }
                | Op::Flatten { .. }
                | Op::Squeeze { .. }
                | Op::Unsqueeze { .. }
        ) {
            if let [input] = inputs {
                let info = outs.into_iter().next().ok_or_else(|| {
                    OnnxError::invalid(format!("node '{node_name}': no output inferred"))
                })?;
                let t = (**input)
                    .clone()
                    .reinterpret(info)
                    .map_err(|e| OnnxError::core(node_name, e))?;
                return Ok(Some(vec![t]));
            }
        }
        let Some(ev) = &self.options.evaluator else {
            return Ok(None);
        };
        let refs: Vec<&Tensor> = inputs.iter().map(|t| &**t).collect();
        let Ok(results) = ev.evaluate(op, &refs) else {
            // The evaluator does not handle it: keep the layer.
            return Ok(None);
        };
        if results.len() != outs.len()
            || results
                .iter()
                .zip(&outs)
                .any(|(r, o)| !r.info().same_layout(o))
        {
            return Err(OnnxError::Evaluator {
                node: node_name.to_string(),
                message: format!(
                    "{} gave [{}], shape inference says [{}]",
                    op.name(),
                    results
                        .iter()
                        .map(|r| r.info().to_string())
                        .collect::<Vec<_>>()
                        .join(", "),
                    outs.iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            });
        }
        Ok(Some(results))
    }

    pub(super) fn run_steps(
        &mut self,
        node: &NodeProto,
        node_name: &str,
        steps: Vec<Step>,
    ) -> Result<(), TxError> {
        // Check every value the steps read before adding anything.
        for step in &steps {
            for src in &step.inputs {
                if let Src::Input(i) = src {
                    let Some(name) = node.input.get(*i).filter(|n| !n.is_empty()) else {
                        continue;
                    };
                    match self.values.get(name) {
                        None => {
                            return Err(TxError::Fatal(OnnxError::invalid(format!(
                                "node '{node_name}': input '{name}' is not defined before the \
                                 node (nodes must be in topological order)"
                            ))))
                        }
                        Some(Value::Poisoned) => return Err(TxError::Skip),
                        Some(Value::Unsupported { reason, .. }) => {
                            return Err(TxError::Unsupported(format!(
                                "{reason}, which backplane does not support"
                            )))
                        }
                        Some(Value::Structured(st)) => return Err(not_a_tensor(name, st)),
                        Some(_) => {}
                    }
                }
            }
        }
        let num_temps = steps
            .iter()
            .flat_map(|s| s.outputs.iter())
            .filter_map(|d| match d {
                Dst::Temp(k) => Some(k + 1),
                Dst::Output(_) => None,
            })
            .max()
            .unwrap_or(0);
        let mut temps: Vec<Option<String>> = vec![None; num_temps];
        // A node computing from constants only folds whole; otherwise its dequantizations of
        // 8-bit constants (and every DequantizeLinear node's) stay layers.
        let keep_weights = node.op_type.as_deref() == Some("DequantizeLinear")
            || !node
                .input
                .iter()
                .all(|n| n.is_empty() || matches!(self.values.get(n), Some(Value::Known(_))));
        for step in steps {
            let mut names = Vec::with_capacity(step.inputs.len());
            for src in &step.inputs {
                names.push(self.step_input(node, node_name, &temps, src)?);
            }
            let base = match &step.suffix {
                Some(s) => format!("{node_name}/{s}"),
                None => node_name.to_string(),
            };
            // The value name each output gets.
            let mut out_names = Vec::with_capacity(step.outputs.len());
            for (slot, dst) in step.outputs.iter().enumerate() {
                let name = match dst {
                    Dst::Output(i) => node.output.get(*i).filter(|n| !n.is_empty()).cloned(),
                    Dst::Temp(_) => None,
                };
                let name = match name {
                    Some(n) => n,
                    None => self.fresh_tensor_name(&format!("{base}:{slot}")),
                };
                if let Dst::Temp(k) = dst {
                    if let Some(t) = temps.get_mut(*k) {
                        *t = Some(name.clone());
                    }
                }
                out_names.push(name);
            }
            let known: Option<Vec<Arc<Tensor>>> = names
                .iter()
                .map(|n| match self.values.get(n) {
                    Some(Value::Known(t)) => Some(t.clone()),
                    _ => None,
                })
                .collect();
            if let Some(known) = known.filter(|k| !(keep_weights && integer_weights(&step.op, k))) {
                if let Some(results) = self.try_fold(node_name, &step.op, &known)? {
                    for (name, t) in out_names.into_iter().zip(results) {
                        self.values.insert(name, Value::Known(Arc::new(t)));
                    }
                    continue;
                }
            }
            let mut ids = Vec::with_capacity(names.len());
            for n in &names {
                let id = match self.values.get(n) {
                    Some(Value::Runtime(id)) => *id,
                    Some(Value::Known(_)) => self.const_id(n, node_name)?,
                    _ => {
                        return Err(TxError::Fatal(OnnxError::invalid(format!(
                            "node '{node_name}': input '{n}' has no value"
                        ))))
                    }
                };
                ids.push(id);
            }
            let layer = self.fresh_layer_name(&base);
            let outs = self
                .net
                .add_layer_named(&layer, step.op, &ids, &out_names)
                .map_err(|e| OnnxError::core(node_name, e))?;
            for n in &out_names {
                self.tensor_names.insert(n.clone());
            }
            for (name, id) in out_names.into_iter().zip(outs) {
                self.values.insert(name, Value::Runtime(id));
            }
        }
        Ok(())
    }
}

/// A DequantizeLinear of constant 8-bit integers (quantized weights): it stays a layer
/// rather than becoming an f32 constant (unless its whole node folds), so that backends with
/// integer kernels (CpuAcc's QDQ fold) read the 8-bit weights through it; others compute it
/// like any layer.
fn integer_weights(op: &Op, inputs: &[Arc<Tensor>]) -> bool {
    matches!(op, Op::DequantizeLinear { .. })
        && inputs.first().is_some_and(|q| {
            matches!(
                q.dtype(),
                backplane_core::DataType::I8 | backplane_core::DataType::U8
            )
        })
}

/// Least size (bytes of the 8-bit input) of a constant whose widening to int32 is kept as a
/// layer rather than folded ([`widens_large_8bit_constant`]).
const WIDENED_WEIGHTS_BYTES: usize = 1 << 16;

/// Whether `op` casts a large 8-bit constant to a 32- or 64-bit integer: the weights of
/// MatMulInteger and ConvInteger as they are lowered. Such a cast stays a layer: folded, the
/// weights would be held four or eight times over from import on, where a backend that folds
/// the integer product (CpuAcc) reads the bytes themselves.
fn widens_large_8bit_constant(op: &Op, inputs: &[Arc<Tensor>]) -> bool {
    let wide = matches!(
        op,
        Op::Cast {
            to: backplane_core::DataType::I32 | backplane_core::DataType::I64,
            ..
        }
    );
    match inputs {
        [x] => {
            let i = x.info();
            wide && matches!(
                i.dtype,
                backplane_core::DataType::I8 | backplane_core::DataType::U8
            ) && i.shape.elements() >= WIDENED_WEIGHTS_BYTES
        }
        _ => false,
    }
}
