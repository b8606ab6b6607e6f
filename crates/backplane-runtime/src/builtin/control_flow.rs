//! If, Loop and Scan: workloads that run nested networks the runtime has loaded.
//!
//! Each execution allocates the few tensors a body's values pass through (loop-carried
//! values, one slice per scan input and output) once, before the first iteration; the body
//! itself runs from its pooled working memory, so iterations allocate no tensor memory.

use backplane_backend_api::{BackendError, NestedNetwork, Result, Workload};
use backplane_core::ops::{LoopDesc, ScanDesc};
use backplane_core::{Network, Tensor, TensorInfo, TensorView, TensorViewMut};
use std::sync::Arc;

fn fail(message: String) -> BackendError {
    BackendError::Execution(message)
}

fn infos(ids: &[backplane_core::TensorId], net: &Network) -> Vec<TensorInfo> {
    ids.iter().map(|t| net.tensor(*t).info.clone()).collect()
}

fn zeros(infos: &[TensorInfo]) -> Result<Vec<Tensor>> {
    infos
        .iter()
        .map(|i| Tensor::zeros(i.clone()).map_err(|e| fail(e.to_string())))
        .collect()
}

/// The one value of a single-element input, as f64.
fn scalar(view: &TensorView<'_>, what: &str) -> Result<f64> {
    view.to_f64_vec()
        .first()
        .copied()
        .ok_or_else(|| fail(format!("the {what} is empty")))
}

/// Bytes of one element of `dtype`.
fn elem(info: &TensorInfo) -> usize {
    info.dtype.size()
}

/// The (outer count, axis length, inner bytes) of slicing `dims` along `axis`.
fn split_at_axis(dims: &[usize], axis: usize, esize: usize) -> (usize, usize, usize) {
    let outer = dims[..axis.min(dims.len())].iter().product();
    let n = dims.get(axis).copied().unwrap_or(1);
    let inner = dims
        .get(axis + 1..)
        .unwrap_or(&[])
        .iter()
        .product::<usize>()
        * esize;
    (outer, n, inner)
}

/// Copy slice `index` along `axis` of `src` (shaped `dims`) into `dst`.
fn read_slice(
    src: &[u8],
    dims: &[usize],
    esize: usize,
    axis: usize,
    index: usize,
    dst: &mut [u8],
) -> Result<()> {
    let (outer, n, inner) = split_at_axis(dims, axis, esize);
    for o in 0..outer {
        let from = (o * n + index) * inner;
        let part = src
            .get(from..from + inner)
            .ok_or_else(|| fail("a scan slice lies outside its input".into()))?;
        dst.get_mut(o * inner..(o + 1) * inner)
            .ok_or_else(|| fail("a scan slice does not fit its buffer".into()))?
            .copy_from_slice(part);
    }
    Ok(())
}

/// Copy `src` into slice `index` along `axis` of `dst` (shaped `dims`).
fn write_slice(
    dst: &mut [u8],
    dims: &[usize],
    esize: usize,
    axis: usize,
    index: usize,
    src: &[u8],
) -> Result<()> {
    let (outer, n, inner) = split_at_axis(dims, axis, esize);
    for o in 0..outer {
        let to = (o * n + index) * inner;
        let part = src
            .get(o * inner..(o + 1) * inner)
            .ok_or_else(|| fail("a scan output slice is shorter than expected".into()))?;
        dst.get_mut(to..to + inner)
            .ok_or_else(|| fail("a scan output slice lies outside its output".into()))?
            .copy_from_slice(part);
    }
    Ok(())
}

fn copy_into(dst: &mut [u8], src: &[u8]) -> Result<()> {
    if dst.len() != src.len() {
        return Err(fail(format!(
            "a value of {} bytes goes into {} bytes",
            src.len(),
            dst.len()
        )));
    }
    dst.copy_from_slice(src);
    Ok(())
}

/// Runs the branch the condition picks; inputs and outputs pass straight through.
pub(super) struct IfWorkload {
    pub then_branch: Arc<dyn NestedNetwork>,
    pub else_branch: Arc<dyn NestedNetwork>,
}

impl Workload for IfWorkload {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        let cond = inputs
            .first()
            .ok_or_else(|| fail("If needs its condition".into()))?;
        let branch = if scalar(cond, "condition")? != 0.0 {
            &self.then_branch
        } else {
            &self.else_branch
        };
        branch.execute(&inputs[1..], outputs)
    }
}

thread_local! {
    /// Iterations run so far by the outermost Loop or Scan executing on this thread, the
    /// Loops and Scans nested in its body (at any depth) included; `None` outside of one.
    static SPENT: std::cell::Cell<Option<u64>> = const { std::cell::Cell::new(None) };
}

/// The iteration budget of one outermost Loop or Scan: entering one where none runs starts
/// the count, nested ones add to it, and the outermost one's guard ends it when dropped (also
/// on error or panic). So nesting cannot multiply the limit.
struct IterationBudget {
    outermost: bool,
}

impl IterationBudget {
    fn enter() -> Self {
        let outermost = SPENT.with(|s| s.get().is_none());
        if outermost {
            SPENT.with(|s| s.set(Some(0)));
        }
        IterationBudget { outermost }
    }

    /// Count one iteration of `what`; fails once the total would pass `limit`.
    fn spend(&self, limit: u64, what: &str) -> Result<()> {
        let spent = SPENT.with(|s| s.get()).unwrap_or(0);
        if spent >= limit {
            return Err(fail(format!(
                "the {what} reached the iteration limit ({limit}), which counts the iterations \
                 of nested Loops and Scans too; raise it with \
                 RuntimeOptions::max_loop_iterations if the model needs more"
            )));
        }
        SPENT.with(|s| s.set(Some(spent + 1)));
        Ok(())
    }
}

impl Drop for IterationBudget {
    fn drop(&mut self) {
        if self.outermost {
            SPENT.with(|s| s.set(None));
        }
    }
}

/// Runs the body while the iteration count is below the trip count and the condition holds.
pub(super) struct LoopWorkload {
    pub desc: LoopDesc,
    pub body: Arc<dyn NestedNetwork>,
    pub max_iterations: u64,
    body_outputs: Vec<TensorInfo>,
}

impl LoopWorkload {
    pub(super) fn new(desc: LoopDesc, body: Arc<dyn NestedNetwork>, max_iterations: u64) -> Self {
        let body_outputs = infos(desc.body.outputs(), &desc.body);
        LoopWorkload {
            desc,
            body,
            max_iterations,
            body_outputs,
        }
    }
}

impl Workload for LoopWorkload {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        let n = self.desc.num_carried;
        if inputs.len() < 2 + n || outputs.len() + 1 != self.body_outputs.len() {
            return Err(fail("Loop got the wrong number of tensors".into()));
        }
        let trips = inputs[0]
            .as_slice::<i64>()
            .ok()
            .and_then(|v| v.first().copied())
            .ok_or_else(|| fail("the trip count must be one i64".into()))?;
        let mut cond = scalar(&inputs[1], "condition")? != 0.0;
        // Everything the iterations pass values through, allocated once.
        let mut iteration = Tensor::scalar(0i64);
        let running =
            Tensor::from_bools(Vec::<usize>::new(), &[true]).map_err(|e| fail(e.to_string()))?;
        let mut carried: Vec<Tensor> = inputs[2..2 + n]
            .iter()
            .map(|v| v.to_tensor().map_err(|e| fail(e.to_string())))
            .collect::<Result<_>>()?;
        let mut next = zeros(&self.body_outputs[1..1 + n])?;
        let mut cond_out = zeros(&self.body_outputs[..1])?;
        let mut slices = zeros(&self.body_outputs[1 + n..])?;
        let captured = &inputs[2 + n..];
        let budget = IterationBudget::enter();
        let mut i: i64 = 0;
        while i < trips && cond {
            budget.spend(self.max_iterations, "loop")?;
            copy_into(iteration.bytes_mut(), &i.to_ne_bytes())?;
            {
                let mut ins: Vec<TensorView<'_>> = Vec::with_capacity(inputs.len());
                ins.push(iteration.view());
                ins.push(running.view());
                ins.extend(carried.iter().map(Tensor::view));
                ins.extend_from_slice(captured);
                let mut outs: Vec<TensorViewMut<'_>> = Vec::with_capacity(self.body_outputs.len());
                outs.extend(cond_out.iter_mut().map(Tensor::view_mut));
                outs.extend(next.iter_mut().map(Tensor::view_mut));
                outs.extend(slices.iter_mut().map(Tensor::view_mut));
                self.body.execute(&ins, &mut outs)?;
            }
            cond = cond_out[0].bytes().first().is_some_and(|b| *b != 0);
            std::mem::swap(&mut carried, &mut next);
            let index = usize::try_from(i).unwrap_or(usize::MAX);
            for (j, s) in slices.iter().enumerate() {
                if index >= self.desc.scan_length {
                    return Err(fail(format!(
                        "the loop runs more than the {} iterations its scan outputs were planned \
                         for (their length is fixed at import from the trip count)",
                        self.desc.scan_length
                    )));
                }
                let len = s.bytes().len();
                let out = &mut outputs[n + j];
                out.data
                    .get_mut(index * len..(index + 1) * len)
                    .ok_or_else(|| fail("a scan output is too small".into()))?
                    .copy_from_slice(s.bytes());
            }
            i += 1;
        }
        if !slices.is_empty() && usize::try_from(i).ok() != Some(self.desc.scan_length) {
            return Err(fail(format!(
                "the loop ran {i} iterations but its scan outputs were planned for {} (their \
                 length is fixed at import from the trip count; a loop that ends early on its \
                 condition cannot have scan outputs here)",
                self.desc.scan_length
            )));
        }
        for (k, c) in carried.iter().enumerate() {
            copy_into(outputs[k].data, c.bytes())?;
        }
        Ok(())
    }
}

/// Runs the body once per slice of the scan inputs, carrying the state.
pub(super) struct ScanWorkload {
    pub desc: ScanDesc,
    pub body: Arc<dyn NestedNetwork>,
    /// Its steps count against the same budget as Loops' iterations.
    pub max_iterations: u64,
    body_inputs: Vec<TensorInfo>,
    body_outputs: Vec<TensorInfo>,
}

impl ScanWorkload {
    pub(super) fn new(desc: ScanDesc, body: Arc<dyn NestedNetwork>, max_iterations: u64) -> Self {
        let body_inputs = infos(desc.body.inputs(), &desc.body);
        let body_outputs = infos(desc.body.outputs(), &desc.body);
        ScanWorkload {
            desc,
            body,
            max_iterations,
            body_inputs,
            body_outputs,
        }
    }
}

/// Entry `b` of a batched tensor's leading axis (the whole tensor when not batched).
fn batch_entry(data: &[u8], batch: usize, b: usize) -> Result<&[u8]> {
    let chunk = data.len() / batch.max(1);
    data.get(b * chunk..(b + 1) * chunk)
        .ok_or_else(|| fail("a batch entry lies outside its tensor".into()))
}

fn batch_entry_mut(data: &mut [u8], batch: usize, b: usize) -> Result<&mut [u8]> {
    let chunk = data.len() / batch.max(1);
    data.get_mut(b * chunk..(b + 1) * chunk)
        .ok_or_else(|| fail("a batch entry lies outside its tensor".into()))
}

impl Workload for ScanWorkload {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        let d = &self.desc;
        let (ns, nsi) = (d.num_state, d.num_scan_inputs);
        let nso = self.body_outputs.len().saturating_sub(ns);
        if inputs.len() < ns + nsi || outputs.len() != ns + nso {
            return Err(fail("Scan got the wrong number of tensors".into()));
        }
        let infos: Vec<&TensorInfo> = inputs.iter().map(|v| v.info).collect();
        let len = d.sequence_length(&infos).map_err(|e| fail(e.to_string()))?;
        let lead = usize::from(d.batched);
        let batch = if d.batched {
            inputs[0].dims().first().copied().unwrap_or(1)
        } else {
            1
        };
        let mut state = zeros(&self.body_inputs[..ns])?;
        let mut next = zeros(&self.body_outputs[..ns])?;
        let mut xs = zeros(&self.body_inputs[ns..ns + nsi])?;
        let mut ys = zeros(&self.body_outputs[ns..])?;
        let captured = &inputs[ns + nsi..];
        let budget = IterationBudget::enter();
        for b in 0..batch {
            for (k, s) in state.iter_mut().enumerate() {
                copy_into(s.bytes_mut(), batch_entry(inputs[k].data, batch, b)?)?;
            }
            for t in 0..len {
                budget.spend(self.max_iterations, "scan")?;
                for (j, x) in xs.iter_mut().enumerate() {
                    let input = &inputs[ns + j];
                    let index = if d.input_reverse[j] { len - 1 - t } else { t };
                    read_slice(
                        batch_entry(input.data, batch, b)?,
                        &input.dims()[lead..],
                        elem(input.info),
                        d.input_axes[j],
                        index,
                        x.bytes_mut(),
                    )?;
                }
                {
                    let mut ins: Vec<TensorView<'_>> = Vec::with_capacity(inputs.len());
                    ins.extend(state.iter().map(Tensor::view));
                    ins.extend(xs.iter().map(Tensor::view));
                    ins.extend_from_slice(captured);
                    let mut outs: Vec<TensorViewMut<'_>> =
                        Vec::with_capacity(self.body_outputs.len());
                    outs.extend(next.iter_mut().map(Tensor::view_mut));
                    outs.extend(ys.iter_mut().map(Tensor::view_mut));
                    self.body.execute(&ins, &mut outs)?;
                }
                std::mem::swap(&mut state, &mut next);
                for (j, y) in ys.iter().enumerate() {
                    let out = &mut outputs[ns + j];
                    let dims = out.info.shape.dims()[lead..].to_vec();
                    let esize = elem(out.info);
                    let index = if d.output_reverse[j] { len - 1 - t } else { t };
                    write_slice(
                        batch_entry_mut(out.data, batch, b)?,
                        &dims,
                        esize,
                        d.output_axes[j],
                        index,
                        y.bytes(),
                    )?;
                }
            }
            for (k, s) in state.iter().enumerate() {
                copy_into(batch_entry_mut(outputs[k].data, batch, b)?, s.bytes())?;
            }
        }
        Ok(())
    }
}
