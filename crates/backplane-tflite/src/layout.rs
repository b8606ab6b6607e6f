//! TFLite's channels-last tensors on the core's channels-first operators.
//!
//! TFLite stores images as NHWC; the core's Conv, Pool and Resize (ONNX's) read NCHW. Rather
//! than wrap every such layer in a pair of transposes, the importer keeps up to two forms of
//! each 4-D TFLite tensor: its own (NHWC, the model's layout) and a channels-first one. An
//! operator takes whichever form it works on, and a form is made (one Transpose, remembered)
//! only when an operator asks for one that does not exist yet. Layout-agnostic operators
//! (elementwise, quantize) keep their input's form and axis-taking ones (Concat, Mean, Pad,
//! Softmax) remap their axes, so a MobileNet-style body stays channels-first from its first
//! convolution to its pooled features, with transposes only where the model's tensors enter
//! and leave. CpuAcc then runs that body as it runs an ONNX one (its own channels-last
//! regions included); constants are permuted at import, never at run time.

use crate::error::{Result, TfliteError};
use backplane_core::ops::Evaluator;
use backplane_core::{Network, Op, Tensor, TensorId, TensorInfo};
use std::collections::HashMap;
use std::sync::Arc;

/// Most elements a layer computed at import may read or write (all inputs, the output): the
/// shape arithmetic of a model (SHAPE → STRIDED_SLICE → PACK → RESHAPE) is a few values.
const MAX_FOLDED_ELEMENTS: usize = 4096;

/// NHWC axis `a` of a 4-D tensor is NCHW axis `NHWC_TO_NCHW[a]`.
pub(crate) const NHWC_TO_NCHW: [usize; 4] = [0, 2, 3, 1];
/// The Transpose permutation that turns NHWC into NCHW.
pub(crate) const TO_NCHW: [usize; 4] = [0, 3, 1, 2];
/// The Transpose permutation that turns NCHW into NHWC.
pub(crate) const TO_NHWC: [usize; 4] = [0, 2, 3, 1];

/// The forms of one TFLite tensor in the network.
#[derive(Debug, Clone, Default)]
struct Forms {
    /// The tensor as TFLite lays it out.
    nhwc: Option<TensorId>,
    /// A 4-D tensor's channels-first form.
    nchw: Option<TensorId>,
    /// A tensor of TFLite shape `[N, C]` held only as the NCHW `[N, C, 1, 1]` tensor with its
    /// bytes (a MEAN over H and W computed keeping its axes, see `ops::arith::mean`): the
    /// `[N, C]` form is a Reshape of it, made when an operator asks for it.
    expanded: Option<(TensorId, Vec<usize>)>,
}

/// The network being built, with the forms of every TFLite tensor placed so far.
pub(crate) struct Graph {
    /// The network.
    pub net: Network,
    forms: HashMap<usize, Forms>,
    names: HashMap<usize, String>,
    counter: usize,
    /// Computes at import the small layers whose inputs are all constants (see [`Graph::layer`]).
    evaluator: Option<Arc<dyn Evaluator + Send + Sync>>,
}

impl Graph {
    pub fn new(evaluator: Option<Arc<dyn Evaluator + Send + Sync>>) -> Self {
        Graph {
            net: Network::new(),
            forms: HashMap::new(),
            names: HashMap::new(),
            counter: 0,
            evaluator,
        }
    }

    /// A fresh layer name derived from `base`.
    pub fn fresh(&mut self, base: &str) -> String {
        self.counter += 1;
        format!("{base}/{}", self.counter)
    }

    /// Record the TFLite name of tensor `t` (used for derived layer names).
    pub fn set_name(&mut self, t: usize, name: &str) {
        self.names.insert(t, name.to_string());
    }

    /// The TFLite name of tensor `t`.
    pub fn name(&self, t: usize) -> String {
        self.names
            .get(&t)
            .cloned()
            .unwrap_or_else(|| format!("tensor_{t}"))
    }

    /// Whether tensor `t` has been placed in any form.
    pub fn has(&self, t: usize) -> bool {
        self.forms.contains_key(&t)
    }

    /// Place `id` as tensor `t` in TFLite's layout.
    pub fn set_nhwc(&mut self, t: usize, id: TensorId) {
        self.forms.entry(t).or_default().nhwc = Some(id);
    }

    /// Place `id` as tensor `t`'s channels-first form.
    pub fn set_nchw(&mut self, t: usize, id: TensorId) {
        self.forms.entry(t).or_default().nchw = Some(id);
    }

    /// Place `id` in the given form.
    pub fn set(&mut self, t: usize, id: TensorId, nchw: bool) {
        if nchw {
            self.set_nchw(t, id)
        } else {
            self.set_nhwc(t, id)
        }
    }

    /// Place `id`, an NCHW `[N, C, 1, 1]` tensor, as tensor `t` of TFLite shape `shape`
    /// (`[N, C]`, the same bytes); `t`'s own form is made from it when asked for.
    pub fn set_expanded(&mut self, t: usize, id: TensorId, shape: Vec<usize>) {
        self.forms.entry(t).or_default().expanded = Some((id, shape));
    }

    /// The NCHW `[N, C, 1, 1]` tensor holding tensor `t`'s bytes, if `t` was placed so.
    pub fn expanded(&self, t: usize) -> Option<TensorId> {
        self.forms
            .get(&t)
            .and_then(|f| f.expanded.as_ref().map(|e| e.0))
    }

    /// Whether tensor `t` exists channels-first already.
    pub fn is_nchw(&self, t: usize) -> bool {
        self.forms.get(&t).is_some_and(|f| f.nchw.is_some())
    }

    fn forms(&self, t: usize) -> Result<Forms> {
        self.forms.get(&t).cloned().ok_or_else(|| {
            TfliteError::Invalid(format!("tensor #{t} is read before it is computed"))
        })
    }

    /// The description of a network tensor.
    pub fn info(&self, id: TensorId) -> &TensorInfo {
        &self.net.tensor(id).info
    }

    /// Tensor `t` in TFLite's layout (a Transpose back from channels-first when needed).
    pub fn nhwc(&mut self, t: usize) -> Result<TensorId> {
        let f = self.forms(t)?;
        if let Some(id) = f.nhwc {
            return Ok(id);
        }
        let id = match (f.nchw, f.expanded) {
            (Some(src), _) => {
                let name = format!("{}/to_nhwc", self.name(t));
                self.relayout(&name, src, &TO_NHWC)?
            }
            (None, Some((src, shape))) => {
                let name = format!("{}/squeezed", self.name(t));
                self.layer(&name, Op::Reshape { shape }, &[src])?
            }
            (None, None) => {
                return Err(TfliteError::Invalid(format!("tensor #{t} has no value")));
            }
        };
        self.set_nhwc(t, id);
        Ok(id)
    }

    /// The 4-D tensor `t` channels-first (a Transpose, or a permuted constant, when needed).
    pub fn nchw(&mut self, t: usize) -> Result<TensorId> {
        let f = self.forms(t)?;
        if let Some(id) = f.nchw {
            return Ok(id);
        }
        let src = self.nhwc(t)?;
        let name = format!("{}/to_nchw", self.name(t));
        let id = self.relayout(&name, src, &TO_NCHW)?;
        self.set_nchw(t, id);
        Ok(id)
    }

    /// Tensor `t` in the form it already has, channels-first preferred: (id, is_nchw).
    pub fn any(&mut self, t: usize) -> Result<(TensorId, bool)> {
        let f = self.forms(t)?;
        match (f.nchw, f.nhwc) {
            (Some(id), _) => Ok((id, true)),
            (None, Some(id)) => Ok((id, false)),
            (None, None) => Ok((self.nhwc(t)?, false)),
        }
    }

    /// Tensor `t` in the requested form.
    pub fn form(&mut self, t: usize, nchw: bool) -> Result<TensorId> {
        if nchw {
            self.nchw(t)
        } else {
            self.nhwc(t)
        }
    }

    /// `src` moved between NHWC and NCHW by `perm`: a Reshape when the permutation moves only
    /// axes of size 1 (`[N, 1, 1, C]` and `[N, C, 1, 1]` hold the same bytes, so nothing
    /// moves), a [`Graph::transpose`] otherwise.
    fn relayout(&mut self, name: &str, src: TensorId, perm: &[usize]) -> Result<TensorId> {
        let dims = self.info(src).shape.dims().to_vec();
        let out: Option<Vec<usize>> = perm.iter().map(|&p| dims.get(p).copied()).collect();
        // The input axes of the output's non-1 axes, in output order: in order, the bytes are.
        let moved: Vec<usize> = perm
            .iter()
            .copied()
            .filter(|&p| dims.get(p).is_some_and(|&d| d != 1))
            .collect();
        let keeps_order = moved.windows(2).all(|w| w[0] < w[1]);
        match out {
            Some(out) if keeps_order && self.net.tensor(src).constant().is_none() => {
                self.layer(name, Op::Reshape { shape: out }, &[src])
            }
            _ => self.transpose(name, src, perm),
        }
    }

    /// A Transpose of `src` by `perm`; a constant is permuted now instead.
    pub fn transpose(&mut self, name: &str, src: TensorId, perm: &[usize]) -> Result<TensorId> {
        if let Some(value) = self.net.tensor(src).constant().cloned() {
            let permuted = permute(&value, perm)?;
            return Ok(self.net.add_constant(name, permuted)?);
        }
        self.layer(
            name,
            Op::Transpose {
                perm: perm.to_vec(),
            },
            &[src],
        )
    }

    /// Add a one-output layer named `name`; with an evaluator, a small layer whose inputs are
    /// all constants is computed now and becomes a constant instead (so shape arithmetic does
    /// not run at every execution, and a Reshape reading its result gets a static target).
    pub fn layer(&mut self, name: &str, op: Op, inputs: &[TensorId]) -> Result<TensorId> {
        if let Some(value) = self.fold(&op, inputs) {
            let name = self.fresh(name);
            return Ok(self.net.add_constant(&name, value)?);
        }
        let outs = self.net.add_layer(name, op, inputs)?;
        outs.first()
            .copied()
            .ok_or_else(|| TfliteError::Invalid(format!("layer '{name}' has no output")))
    }

    /// The value of `op` on `inputs` when every input is a constant, the op is one of the
    /// shape-arithmetic kind and the inputs and the output hold at most
    /// [`MAX_FOLDED_ELEMENTS`] values; `None` (the layer is added) otherwise, or when the
    /// evaluator cannot compute it.
    fn fold(&self, op: &Op, inputs: &[TensorId]) -> Option<Tensor> {
        let evaluator = self.evaluator.as_ref()?;
        let shape_arithmetic = matches!(
            op,
            Op::Slice(_)
                | Op::Reshape { .. }
                | Op::Unsqueeze { .. }
                | Op::Squeeze { .. }
                | Op::Concat { .. }
                | Op::Gather { .. }
                | Op::Cast { .. }
                | Op::Binary(_)
        );
        if !shape_arithmetic || inputs.is_empty() {
            return None;
        }
        let values: Vec<&Tensor> = inputs
            .iter()
            .map(|&t| self.net.tensor(t).constant().map(|c| &**c))
            .collect::<Option<_>>()?;
        let infos: Vec<&TensorInfo> = values.iter().map(|v| v.info()).collect();
        let out = op.infer(&infos).ok()?;
        let elements = infos
            .iter()
            .copied()
            .chain(out.iter())
            .map(|i| i.shape.elements())
            .fold(0usize, usize::saturating_add);
        if out.len() != 1 || elements > MAX_FOLDED_ELEMENTS {
            return None;
        }
        let mut result = evaluator.evaluate(op, &values).ok()?;
        (result.len() == 1).then(|| result.remove(0))
    }

    /// Add a constant with a fresh name derived from `base`.
    pub fn constant(&mut self, base: &str, value: Tensor) -> Result<TensorId> {
        let name = self.fresh(base);
        Ok(self.net.add_constant(&name, value)?)
    }
}

/// The elements of `value` permuted as a Transpose by `perm` would (any element size).
pub(crate) fn permute(value: &Tensor, perm: &[usize]) -> Result<Tensor> {
    let dims = value.shape().dims().to_vec();
    if perm.len() != dims.len() {
        return Err(TfliteError::Invalid(format!(
            "permutation {perm:?} for a tensor of rank {}",
            dims.len()
        )));
    }
    let out_dims: Vec<usize> = perm
        .iter()
        .map(|&p| dims.get(p).copied())
        .collect::<Option<_>>()
        .ok_or_else(|| TfliteError::Invalid(format!("bad permutation {perm:?}")))?;
    let size = value.dtype().size();
    let rank = dims.len();
    let mut in_strides = vec![1usize; rank];
    for i in (0..rank.saturating_sub(1)).rev() {
        in_strides[i] = in_strides[i + 1] * dims[i + 1];
    }
    let n: usize = out_dims.iter().product();
    let src = value.bytes();
    let mut out = Vec::new();
    out.try_reserve_exact(n * size)
        .map_err(|_| TfliteError::Invalid(format!("cannot allocate {} bytes", n * size)))?;
    let mut idx = vec![0usize; rank];
    for _ in 0..n {
        let off: usize = (0..rank).map(|k| idx[k] * in_strides[perm[k]]).sum();
        out.extend_from_slice(&src[off * size..(off + 1) * size]);
        for k in (0..rank).rev() {
            idx[k] += 1;
            if idx[k] < out_dims[k] {
                break;
            }
            idx[k] = 0;
        }
    }
    let mut info = value.info().clone();
    info.shape = out_dims.into();
    Ok(Tensor::from_bytes(info, &out)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permute_moves_channels_first() {
        // [1, 2, 2, 3] NHWC with value = 100*h + 10*w + c.
        let mut v = Vec::new();
        for h in 0..2 {
            for w in 0..2 {
                for c in 0..3 {
                    v.push((100 * h + 10 * w + c) as f32);
                }
            }
        }
        let t = Tensor::from_vec(vec![1, 2, 2, 3], v).unwrap();
        let p = permute(&t, &TO_NCHW).unwrap();
        assert_eq!(p.shape().dims(), &[1, 3, 2, 2]);
        let got = p.as_slice::<f32>().unwrap();
        assert_eq!(&got[..4], &[0.0, 10.0, 100.0, 110.0]);
        assert_eq!(&got[4..8], &[1.0, 11.0, 101.0, 111.0]);
        let back = permute(&p, &TO_NHWC).unwrap();
        assert_eq!(back.bytes(), t.bytes());
    }
}
