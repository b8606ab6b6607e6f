//! Buffer checks shared by every workload: the runtime hands buffers that match the layer's
//! descriptions, and workloads verify it before indexing (a mismatch is an error, not a panic).

use backplane_backend_api::{BackendError, Result};
use backplane_core::{TensorInfo, TensorView, TensorViewMut};

/// The descriptions a workload was created for.
#[derive(Debug, Clone)]
pub struct Io {
    /// Layer name, for messages.
    pub layer: String,
    /// Inputs.
    pub inputs: Vec<TensorInfo>,
    /// Outputs.
    pub outputs: Vec<TensorInfo>,
}

impl Io {
    /// Check that the buffers match the descriptions, byte for byte.
    pub fn check(&self, inputs: &[TensorView<'_>], outputs: &[TensorViewMut<'_>]) -> Result<()> {
        self.check_copied(inputs, outputs, |_| false)
    }

    /// [`Io::check`] for a workload that copied some constant inputs when it was created
    /// (`copied(slot)`): the runtime may release those and pass them empty
    /// ([`backplane_backend_api::Workload::reads_constant_input`]), so an empty buffer passes
    /// there too.
    pub fn check_copied(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &[TensorViewMut<'_>],
        copied: impl Fn(usize) -> bool,
    ) -> Result<()> {
        if inputs.len() != self.inputs.len() || outputs.len() != self.outputs.len() {
            return Err(self.error(format!(
                "{} inputs and {} outputs given, expected {} and {}",
                inputs.len(),
                outputs.len(),
                self.inputs.len(),
                self.outputs.len()
            )));
        }
        let given = inputs
            .iter()
            .map(|v| (v.info, v.data.len()))
            .chain(outputs.iter().map(|v| (v.info, v.data.len())));
        let n_in = self.inputs.len();
        for (k, ((info, len), want)) in given
            .zip(self.inputs.iter().chain(&self.outputs))
            .enumerate()
        {
            if !info.same_layout(want) {
                return Err(self.error(format!("a buffer is {info}, expected {want}")));
            }
            let need = want.num_bytes()?;
            if len != need && !(len == 0 && k < n_in && copied(k)) {
                return Err(self.error(format!(
                    "a buffer for {want} holds {len} bytes, expected {need}"
                )));
            }
        }
        Ok(())
    }

    /// Input 3 has the output's type and shape, as a fused residual (`act(op(x) + r)`) must.
    pub fn check_residual(&self) -> Result<()> {
        match (self.inputs.get(3), self.outputs.first()) {
            (Some(r), Some(y)) if r.same_layout(y) => Ok(()),
            _ => Err(self.error("the residual must have the output's type and shape".into())),
        }
    }

    /// The first input's description (every workload has one), for planning at load.
    pub fn first_input(&self) -> Result<&TensorInfo> {
        self.inputs
            .first()
            .ok_or_else(|| BackendError::Other(format!("{}: no input", self.layer)))
    }

    /// The first input's dims, for planning at load.
    pub fn input_dims(&self) -> Result<Vec<usize>> {
        Ok(self.first_input()?.shape.dims().to_vec())
    }

    /// An execution error naming the layer.
    pub fn error(&self, message: String) -> BackendError {
        BackendError::Execution(format!("{}: {message}", self.layer))
    }
}

/// The f32 elements of an input.
pub fn f32s<'a>(v: &TensorView<'a>) -> Result<&'a [f32]> {
    Ok(v.as_slice::<f32>()?)
}

/// The f32 elements of an output.
pub fn f32s_mut<'a, 'b>(v: &'a mut TensorViewMut<'b>) -> Result<&'a mut [f32]> {
    Ok(v.as_mut_slice::<f32>()?)
}

/// Input `slot`.
pub fn input<'a, 'b>(inputs: &'a [TensorView<'b>], slot: usize) -> Result<&'a TensorView<'b>> {
    inputs
        .get(slot)
        .ok_or_else(|| BackendError::Execution(format!("input {slot} is missing")))
}

/// The first output.
pub fn output<'a, 'b>(outputs: &'a mut [TensorViewMut<'b>]) -> Result<&'a mut TensorViewMut<'b>> {
    outputs
        .first_mut()
        .ok_or_else(|| BackendError::Execution("the output buffer is missing".into()))
}
