//! Subgraphs and substitutions across the ABI (`optimize_subgraph`): owned C structs built on
//! the sending side, checked reads on the receiving side.

use super::layer::{
    read_constant, read_layer_desc, read_tensor_info, OwnedLayerDesc, OwnedTensorInfo,
};
use super::{c_string, covers, slice, text};
use crate::abi;
use backplane_backend_api::{LayerDesc, ReplacementLayer, Substitution, ValueRef};
use backplane_core::{LayerId, Network, Tensor, TensorId, TensorInfo, TensorKind};
use std::collections::{HashMap, HashSet};
use std::ffi::CString;
use std::sync::Arc;

/// A C [`abi::Subgraph`] of some layers of a network, with everything it points into.
pub(crate) struct OwnedSubgraph {
    _names: Vec<CString>,
    _infos: Vec<OwnedTensorInfo>,
    _tensors: Vec<abi::SubgraphTensor>,
    _tensor_ptrs: Vec<*const abi::SubgraphTensor>,
    _descs: Vec<OwnedLayerDesc>,
    _ids: Vec<(Vec<u64>, Vec<u64>)>,
    _layers: Vec<abi::SubgraphLayer>,
    _layer_ptrs: Vec<*const abi::SubgraphLayer>,
    c: Box<abi::Subgraph>,
}

impl OwnedSubgraph {
    /// Describe `layers` (in topological order) of `network` in C.
    pub(crate) fn new(network: &Network, layers: &[LayerId]) -> Self {
        let inside: HashSet<LayerId> = layers.iter().copied().collect();
        let consumers = network.consumers();
        let mut order: Vec<TensorId> = Vec::new();
        let mut seen: HashSet<TensorId> = HashSet::new();
        for &l in layers {
            let layer = network.layer(l);
            for &t in layer.inputs.iter().chain(&layer.outputs) {
                if seen.insert(t) {
                    order.push(t);
                }
            }
        }
        let mut names = Vec::with_capacity(order.len());
        let mut infos = Vec::with_capacity(order.len());
        let mut tensors = Vec::with_capacity(order.len());
        for &t in &order {
            let e = network.tensor(t);
            let mut flags = 0;
            match &e.kind {
                TensorKind::Produced { layer, .. } if inside.contains(layer) => {
                    let outside = consumers
                        .get(t.0)
                        .is_some_and(|c| c.iter().any(|(l, _)| !inside.contains(l)));
                    if outside || network.outputs().contains(&t) {
                        flags |= abi::TENSOR_USED_OUTSIDE;
                    }
                }
                TensorKind::Constant(_) => flags |= abi::TENSOR_EXTERNAL | abi::TENSOR_CONSTANT,
                _ => flags |= abi::TENSOR_EXTERNAL,
            }
            let name = c_string(&e.name);
            let info = OwnedTensorInfo::new(&e.info);
            tensors.push(abi::SubgraphTensor {
                struct_size: abi::size_u32::<abi::SubgraphTensor>(),
                flags,
                id: t.0 as u64,
                name: name.as_ptr(),
                info: info.as_ptr(),
            });
            names.push(name);
            infos.push(info);
        }
        let tensor_ptrs: Vec<*const abi::SubgraphTensor> = tensors
            .iter()
            .map(|t| t as *const abi::SubgraphTensor)
            .collect();
        let mut descs = Vec::with_capacity(layers.len());
        let mut ids = Vec::with_capacity(layers.len());
        let mut c_layers = Vec::with_capacity(layers.len());
        for &l in layers {
            let layer = network.layer(l);
            let desc = OwnedLayerDesc::new(&LayerDesc::from_layer(network, layer));
            let ins: Vec<u64> = layer.inputs.iter().map(|t| t.0 as u64).collect();
            let outs: Vec<u64> = layer.outputs.iter().map(|t| t.0 as u64).collect();
            c_layers.push(abi::SubgraphLayer {
                struct_size: abi::size_u32::<abi::SubgraphLayer>(),
                reserved: 0,
                id: l.0 as u64,
                desc: desc.as_ptr(),
                inputs: ins.as_ptr(),
                outputs: outs.as_ptr(),
            });
            descs.push(desc);
            ids.push((ins, outs));
        }
        let layer_ptrs: Vec<*const abi::SubgraphLayer> = c_layers
            .iter()
            .map(|l| l as *const abi::SubgraphLayer)
            .collect();
        let c = Box::new(abi::Subgraph {
            struct_size: abi::size_u32::<abi::Subgraph>(),
            reserved: 0,
            layers: layer_ptrs.as_ptr(),
            num_layers: layer_ptrs.len(),
            tensors: tensor_ptrs.as_ptr(),
            num_tensors: tensor_ptrs.len(),
        });
        OwnedSubgraph {
            _names: names,
            _infos: infos,
            _tensors: tensors,
            _tensor_ptrs: tensor_ptrs,
            _descs: descs,
            _ids: ids,
            _layers: c_layers,
            _layer_ptrs: layer_ptrs,
            c,
        }
    }

    /// Pointer to the struct.
    pub(crate) fn as_ptr(&self) -> *const abi::Subgraph {
        &*self.c
    }
}

/// A subgraph the plugin received, rebuilt as a network of its own: external tensors are its
/// inputs and constants, tensors used outside are its outputs.
pub(crate) struct ReadSubgraph {
    /// The rebuilt network.
    pub(crate) network: Network,
    /// The host's id of each layer, by local layer index.
    pub(crate) layer_ids: Vec<u64>,
    /// The host's id of each tensor, by local tensor index.
    pub(crate) tensor_ids: Vec<u64>,
}

pub(super) fn id_usize(id: u64) -> Result<usize, String> {
    usize::try_from(id).map_err(|_| format!("id {id} is too large"))
}

/// Read a C subgraph and rebuild it as a network.
///
/// # Safety
/// `ptr` is null or points to a valid [`abi::Subgraph`] (valid arrays, layers and tensors).
pub(crate) unsafe fn read_subgraph(ptr: *const abi::Subgraph) -> Result<ReadSubgraph, String> {
    // SAFETY: null or valid per the caller.
    let c = unsafe { ptr.as_ref() }.ok_or("the subgraph is null")?;
    if !covers(c.struct_size, field_end!(abi::Subgraph, num_tensors)) {
        return Err(format!(
            "subgraph struct_size {} is too small",
            c.struct_size
        ));
    }
    // Tensors by host id: flags, name, description; and the ids in the host's order.
    let mut tensors: HashMap<u64, (u32, String, TensorInfo)> = HashMap::new();
    let mut order: Vec<u64> = Vec::new();
    // SAFETY: `num_tensors` entries per the caller.
    for &t in unsafe { slice(c.tensors, c.num_tensors) }? {
        // SAFETY: each entry is null or valid per the caller.
        let t = unsafe { t.as_ref() }.ok_or("a subgraph tensor is null")?;
        if !covers(t.struct_size, field_end!(abi::SubgraphTensor, info)) {
            return Err("a subgraph tensor's struct_size is too small".into());
        }
        // SAFETY: NUL-terminated per the caller.
        let name = unsafe { text(t.name, "tensor name") }?.to_string();
        // SAFETY: valid per the caller.
        let info = unsafe { read_tensor_info(t.info) }?;
        if tensors.insert(t.id, (t.flags, name, info)).is_none() {
            order.push(t.id);
        }
    }
    let mut network = Network::new();
    let mut local: HashMap<u64, TensorId> = HashMap::new();
    let mut tensor_ids: Vec<u64> = Vec::new();
    let mut layer_ids = Vec::new();
    fn record(ids: &mut Vec<u64>, local: TensorId, host: u64) {
        if ids.len() <= local.0 {
            ids.resize(local.0 + 1, abi::NEW_TENSOR);
        }
        ids[local.0] = host;
    }
    // SAFETY: `num_layers` entries per the caller.
    for &l in unsafe { slice(c.layers, c.num_layers) }? {
        // SAFETY: each entry is null or valid per the caller.
        let l = unsafe { l.as_ref() }.ok_or("a subgraph layer is null")?;
        if !covers(l.struct_size, field_end!(abi::SubgraphLayer, outputs)) {
            return Err("a subgraph layer's struct_size is too small".into());
        }
        // SAFETY: valid per the caller.
        let desc = unsafe { read_layer_desc(l.desc) }?;
        // SAFETY: one id per input slot per the caller.
        let in_ids = unsafe { slice(l.inputs, desc.inputs.len()) }?;
        // SAFETY: one id per output slot per the caller.
        let out_ids = unsafe { slice(l.outputs, desc.outputs.len()) }?;
        let mut inputs = Vec::with_capacity(in_ids.len());
        for (slot, &id) in in_ids.iter().enumerate() {
            if let Some(&t) = local.get(&id) {
                inputs.push(t);
                continue;
            }
            let (_, name, info) = tensors
                .get(&id)
                .ok_or_else(|| format!("layer '{}' reads unknown tensor {id}", desc.name))?;
            let t = match desc.constants.get(slot).cloned().flatten() {
                Some(value) => network.add_shared_constant(name, value),
                None => network.add_input(name, info.clone()),
            }
            .map_err(|e| e.to_string())?;
            record(&mut tensor_ids, t, id);
            local.insert(id, t);
            inputs.push(t);
        }
        let names: Vec<String> = out_ids
            .iter()
            .enumerate()
            .map(|(slot, id)| {
                tensors
                    .get(id)
                    .map_or_else(|| format!("{}:{slot}", desc.name), |t| t.1.clone())
            })
            .collect();
        let outs = network
            .add_layer_named(&desc.name, desc.op, &inputs, &names)
            .map_err(|e| e.to_string())?;
        for (&t, &id) in outs.iter().zip(out_ids) {
            record(&mut tensor_ids, t, id);
            local.insert(id, t);
        }
        layer_ids.push(l.id);
    }
    for id in &order {
        let used_outside = tensors
            .get(id)
            .is_some_and(|t| t.0 & abi::TENSOR_USED_OUTSIDE != 0);
        if used_outside {
            if let Some(&t) = local.get(id) {
                network.mark_output(t).map_err(|e| e.to_string())?;
            }
        }
    }
    tensor_ids.resize(network.tensors().len(), abi::NEW_TENSOR);
    Ok(ReadSubgraph {
        network,
        layer_ids,
        tensor_ids,
    })
}

/// A C [`abi::ValueRef`] with what it points into.
pub(super) struct OwnedValueRef {
    pub(super) _constant: Option<(Arc<Tensor>, OwnedTensorInfo, Box<abi::TensorView>)>,
    pub(super) c: Box<abi::ValueRef>,
}

/// A C [`abi::ReplacementLayer`] with what it points into.
pub(super) struct OwnedReplacementLayer {
    pub(super) _desc: OwnedLayerDesc,
    pub(super) _inputs: Vec<OwnedValueRef>,
    pub(super) _input_ptrs: Vec<*const abi::ValueRef>,
    pub(super) _outputs: Vec<u64>,
    pub(super) c: Box<abi::ReplacementLayer>,
}

/// A C [`abi::Substitution`] (plugin side), in the host's ids.
pub(crate) struct OwnedSubstitution {
    _replaced: Vec<u64>,
    _layers: Vec<OwnedReplacementLayer>,
    _layer_ptrs: Vec<*const abi::ReplacementLayer>,
    c: Box<abi::Substitution>,
}

impl OwnedSubstitution {
    /// Describe `sub` of the rebuilt subgraph `read` in the host's ids.
    pub(crate) fn new(read: &ReadSubgraph, sub: &Substitution) -> Result<Self, String> {
        let host_tensor = |t: TensorId| -> Result<u64, String> {
            read.tensor_ids
                .get(t.0)
                .copied()
                .filter(|&id| id != abi::NEW_TENSOR)
                .ok_or_else(|| format!("the substitution refers to unknown tensor #{}", t.0))
        };
        let replaced = sub
            .replaced
            .iter()
            .map(|l| {
                read.layer_ids
                    .get(l.0)
                    .copied()
                    .ok_or_else(|| format!("the substitution replaces unknown layer #{}", l.0))
            })
            .collect::<Result<Vec<u64>, String>>()?;
        let mut produced: Vec<Vec<TensorInfo>> = Vec::with_capacity(sub.replacement.len());
        let mut layers = Vec::with_capacity(sub.replacement.len());
        for r in &sub.replacement {
            let mut in_infos = Vec::with_capacity(r.inputs.len());
            let mut refs = Vec::with_capacity(r.inputs.len());
            for v in &r.inputs {
                let mut c = Box::new(abi::ValueRef {
                    struct_size: abi::size_u32::<abi::ValueRef>(),
                    kind: 0,
                    tensor: 0,
                    constant: std::ptr::null(),
                    layer: 0,
                    slot: 0,
                });
                let mut constant = None;
                match v {
                    ValueRef::Existing(t) => {
                        c.kind = abi::VALUE_EXISTING;
                        c.tensor = host_tensor(*t)?;
                        let e = read.network.tensors().get(t.0).ok_or_else(|| {
                            format!("the substitution refers to unknown tensor #{}", t.0)
                        })?;
                        in_infos.push(e.info.clone());
                    }
                    ValueRef::NewConstant(value) => {
                        c.kind = abi::VALUE_CONSTANT;
                        let info = OwnedTensorInfo::new(value.info());
                        let view = Box::new(abi::TensorView {
                            struct_size: abi::size_u32::<abi::TensorView>(),
                            reserved: 0,
                            info: info.as_ptr(),
                            // The host only reads it.
                            data: value.bytes().as_ptr() as *mut std::ffi::c_void,
                            num_bytes: value.bytes().len(),
                            handle: std::ptr::null_mut(),
                        });
                        c.constant = &*view;
                        in_infos.push(value.info().clone());
                        constant = Some((value.clone(), info, view));
                    }
                    ValueRef::Produced { layer, slot } => {
                        c.kind = abi::VALUE_PRODUCED;
                        c.layer = *layer as u64;
                        c.slot = *slot as u64;
                        let info = produced
                            .get(*layer)
                            .and_then(|o| o.get(*slot))
                            .ok_or_else(|| {
                                format!(
                                    "replacement layer '{}' reads output {slot} of layer {layer}, which does not come before it",
                                    r.name
                                )
                            })?;
                        in_infos.push(info.clone());
                    }
                }
                refs.push(OwnedValueRef {
                    _constant: constant,
                    c,
                });
            }
            let in_refs: Vec<&TensorInfo> = in_infos.iter().collect();
            let out_infos = r
                .op
                .infer(&in_refs)
                .map_err(|e| format!("replacement layer '{}' ({}): {e}", r.name, r.op.name()))?;
            if out_infos.len() != r.outputs.len() {
                return Err(format!(
                    "replacement layer '{}' has {} outputs but names {}",
                    r.name,
                    out_infos.len(),
                    r.outputs.len()
                ));
            }
            let outputs = r
                .outputs
                .iter()
                .map(|o| o.map_or(Ok(abi::NEW_TENSOR), host_tensor))
                .collect::<Result<Vec<u64>, String>>()?;
            let desc = OwnedLayerDesc::new(&LayerDesc {
                name: r.name.clone(),
                op: r.op.clone(),
                inputs: in_infos,
                outputs: out_infos.clone(),
                constants: vec![None; r.inputs.len()],
            });
            let input_ptrs: Vec<*const abi::ValueRef> =
                refs.iter().map(|v| &*v.c as *const abi::ValueRef).collect();
            let c = Box::new(abi::ReplacementLayer {
                struct_size: abi::size_u32::<abi::ReplacementLayer>(),
                reserved: 0,
                desc: desc.as_ptr(),
                inputs: input_ptrs.as_ptr(),
                num_inputs: input_ptrs.len(),
                outputs: outputs.as_ptr(),
            });
            produced.push(out_infos);
            layers.push(OwnedReplacementLayer {
                _desc: desc,
                _inputs: refs,
                _input_ptrs: input_ptrs,
                _outputs: outputs,
                c,
            });
        }
        let layer_ptrs: Vec<*const abi::ReplacementLayer> = layers
            .iter()
            .map(|l| &*l.c as *const abi::ReplacementLayer)
            .collect();
        let c = Box::new(abi::Substitution {
            struct_size: abi::size_u32::<abi::Substitution>(),
            reserved: 0,
            replaced: replaced.as_ptr(),
            num_replaced: replaced.len(),
            layers: layer_ptrs.as_ptr(),
            num_layers: layer_ptrs.len(),
        });
        Ok(OwnedSubstitution {
            _replaced: replaced,
            _layers: layers,
            _layer_ptrs: layer_ptrs,
            c,
        })
    }

    /// Pointer to the struct.
    pub(crate) fn as_ptr(&self) -> *const abi::Substitution {
        &*self.c
    }
}

/// Read a substitution the plugin reported (host side), checking every id: replaced layers
/// must be in `allowed`, existing tensors in `network`.
///
/// # Safety
/// `ptr` is null or points to a valid [`abi::Substitution`] for the call.
pub(crate) unsafe fn read_substitution(
    ptr: *const abi::Substitution,
    network: &Network,
    allowed: &HashSet<LayerId>,
) -> Result<Substitution, String> {
    // SAFETY: null or valid per the caller.
    let c = unsafe { ptr.as_ref() }.ok_or("the substitution is null")?;
    if !covers(c.struct_size, field_end!(abi::Substitution, num_layers)) {
        return Err(format!(
            "substitution struct_size {} is too small",
            c.struct_size
        ));
    }
    // SAFETY: `num_replaced` entries per the caller.
    let replaced = unsafe { slice(c.replaced, c.num_replaced) }?
        .iter()
        .map(|&id| {
            let l = LayerId(id_usize(id)?);
            if allowed.contains(&l) {
                Ok(l)
            } else {
                Err(format!(
                    "it replaces layer {id}, which is not in its subgraph"
                ))
            }
        })
        .collect::<Result<Vec<LayerId>, String>>()?;
    let tensor = |id: u64| -> Result<TensorId, String> {
        let t = id_usize(id)?;
        if t < network.tensors().len() {
            Ok(TensorId(t))
        } else {
            Err(format!("it refers to tensor {id}, which does not exist"))
        }
    };
    let mut replacement = Vec::new();
    // SAFETY: `num_layers` entries per the caller.
    for &r in unsafe { slice(c.layers, c.num_layers) }? {
        // SAFETY: null or valid per the caller.
        let r = unsafe { r.as_ref() }.ok_or("a replacement layer is null")?;
        if !covers(r.struct_size, field_end!(abi::ReplacementLayer, outputs)) {
            return Err("a replacement layer's struct_size is too small".into());
        }
        // SAFETY: valid per the caller.
        let desc = unsafe { read_layer_desc(r.desc) }?;
        let mut inputs = Vec::new();
        // SAFETY: `num_inputs` entries per the caller.
        for &v in unsafe { slice(r.inputs, r.num_inputs) }? {
            // SAFETY: null or valid per the caller.
            let v = unsafe { v.as_ref() }.ok_or("a value reference is null")?;
            if !covers(v.struct_size, field_end!(abi::ValueRef, slot)) {
                return Err("a value reference's struct_size is too small".into());
            }
            inputs.push(match v.kind {
                abi::VALUE_EXISTING => ValueRef::Existing(tensor(v.tensor)?),
                abi::VALUE_CONSTANT => {
                    // SAFETY: a valid view with host memory per the caller.
                    let value = unsafe { read_constant(v.constant) }?;
                    ValueRef::NewConstant(Arc::new(value))
                }
                abi::VALUE_PRODUCED => ValueRef::Produced {
                    layer: id_usize(v.layer)?,
                    slot: id_usize(v.slot)?,
                },
                other => return Err(format!("unknown value kind {other}")),
            });
        }
        // SAFETY: one entry per output per the caller.
        let outputs = unsafe { slice(r.outputs, desc.outputs.len()) }?
            .iter()
            .map(|&id| {
                if id == abi::NEW_TENSOR {
                    Ok(None)
                } else {
                    tensor(id).map(Some)
                }
            })
            .collect::<Result<Vec<_>, String>>()?;
        replacement.push(ReplacementLayer {
            name: desc.name,
            op: desc.op,
            inputs,
            outputs,
        });
    }
    Ok(Substitution {
        replaced,
        replacement,
    })
}
