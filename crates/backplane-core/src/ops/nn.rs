//! Neural-network operators: convolution, pooling, matrix products, normalization.

use super::spatial::{Geometry, Window};
use crate::shape::{broadcast_shapes, normalize_axis};
use crate::{CoreError, DataType, Result, TensorInfo};

/// Convolution (ONNX Conv). Inputs: X [N, C, spatial...], W [M, C/group, kernel...], optional B `[M]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct ConvDesc {
    /// Window (kernel extents must equal W's spatial dims).
    pub window: Window,
    /// Number of groups; C and M must both be divisible by it.
    pub group: usize,
}

/// Transposed convolution (ONNX ConvTranspose). Inputs: X [N, C, ...], W [C, M/group, k...], B?
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct ConvTransposeDesc {
    /// Window (its pads are the pads removed from the full output).
    pub window: Window,
    /// Number of groups.
    pub group: usize,
    /// Extra size added to one side of each output spatial axis.
    pub output_padding: Vec<usize>,
    /// Explicit output spatial shape; overrides the pads when set.
    pub output_shape: Vec<usize>,
}

/// Max or average.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PoolKind {
    /// Maximum of the window.
    Max,
    /// Mean of the window.
    Average,
}

/// MaxPool / AveragePool.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PoolDesc {
    /// Max or average.
    pub kind: PoolKind,
    /// The window.
    pub window: Window,
    /// Round output sizes up.
    pub ceil_mode: bool,
    /// Average pooling divides by the full window including padding.
    pub count_include_pad: bool,
}

/// Gemm: Y = alpha * op(A) * op(B) + beta * C.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GemmDesc {
    /// Scale of the product.
    pub alpha: f32,
    /// Scale of C.
    pub beta: f32,
    /// Transpose A first.
    pub trans_a: bool,
    /// Transpose B first.
    pub trans_b: bool,
}

impl Default for GemmDesc {
    fn default() -> Self {
        GemmDesc {
            alpha: 1.0,
            beta: 1.0,
            trans_a: false,
            trans_b: false,
        }
    }
}

fn need_float(op: &'static str, info: &TensorInfo) -> Result<()> {
    if info.dtype.is_float() {
        Ok(())
    } else {
        Err(CoreError::op(
            op,
            format!("expects a float input, got {}", info.dtype),
        ))
    }
}

fn rank_at_least(op: &'static str, info: &TensorInfo, r: usize) -> Result<()> {
    if info.shape.rank() >= r {
        Ok(())
    } else {
        Err(CoreError::op(
            op,
            format!("expects rank >= {r}, got shape {}", info.shape),
        ))
    }
}

impl ConvDesc {
    /// Resolve the geometry for a concrete input shape.
    pub fn geometry(&self, x: &[usize]) -> Result<Geometry> {
        self.window.geometry(&x[2..], false)
    }

    pub(crate) fn infer(&self, inputs: &[&TensorInfo]) -> Result<Vec<TensorInfo>> {
        let (x, w) = (inputs[0], inputs[1]);
        need_float("Conv", x)?;
        rank_at_least("Conv", x, 3)?;
        let (xd, wd) = (x.shape.dims(), w.shape.dims());
        if wd.len() != xd.len() {
            return Err(CoreError::op(
                "Conv",
                format!(
                    "weight shape {} does not match input rank {}",
                    w.shape,
                    xd.len()
                ),
            ));
        }
        if self.window.kernel != wd[2..] {
            return Err(CoreError::op(
                "Conv",
                format!(
                    "kernel_shape {:?} differs from weight shape {}",
                    self.window.kernel, w.shape
                ),
            ));
        }
        let g = self.group.max(1);
        if xd[1] % g != 0 || wd[0] % g != 0 || wd[1] * g != xd[1] {
            return Err(CoreError::op(
                "Conv",
                format!(
                    "input channels {} and weight shape {} do not fit group {g}",
                    xd[1], w.shape
                ),
            ));
        }
        if let Some(b) = inputs.get(2) {
            if b.shape.dims() != [wd[0]] {
                return Err(CoreError::op(
                    "Conv",
                    format!("bias shape {} is not [{}]", b.shape, wd[0]),
                ));
            }
        }
        let geo = self.geometry(xd)?;
        let mut out = vec![xd[0], wd[0]];
        out.extend(geo.output);
        Ok(vec![TensorInfo::new(x.dtype, out)])
    }
}

impl ConvTransposeDesc {
    /// Output spatial sizes and the (begin, end) pads for a concrete input. The pads are the
    /// amounts removed from the full output; they are negative when `output_shape` asks for
    /// more than the full output, which then extends it with zeros (before the bias is added)
    /// on that side (ONNX splits a negative total padding with floor division, as a positive
    /// one).
    pub fn geometry(&self, x: &[usize]) -> Result<(Vec<usize>, Vec<i64>, Vec<i64>)> {
        let spatial = &x[2..];
        let n = spatial.len();
        let w = &self.window;
        if w.kernel.len() != n {
            return Err(CoreError::op(
                "ConvTranspose",
                "kernel rank does not match input",
            ));
        }
        for (what, v, len) in [
            ("strides", &w.strides, n),
            ("dilations", &w.dilations, n),
            ("pads", &w.pads, 2 * n),
            ("output_padding", &self.output_padding, n),
            ("output_shape", &self.output_shape, n),
        ] {
            if !v.is_empty() && v.len() != len {
                return Err(CoreError::op(
                    "ConvTranspose",
                    format!("{what} has {} values, expected {len}", v.len()),
                ));
            }
        }
        if w.strides.contains(&0) || w.dilations.contains(&0) {
            return Err(CoreError::op(
                "ConvTranspose",
                "strides and dilations must be positive",
            ));
        }
        let get = |v: &[usize], i: usize, d: usize| if v.is_empty() { d } else { v[i] };
        let mut out = vec![0; n];
        let mut pb = vec![0; n];
        let mut pe = vec![0; n];
        for i in 0..n {
            let s = get(&w.strides, i, 1);
            let d = get(&w.dilations, i, 1);
            let op = get(&self.output_padding, i, 0);
            let full =
                s * (spatial[i].saturating_sub(1)) + op + (w.kernel[i].saturating_sub(1)) * d + 1;
            if !self.output_shape.is_empty()
                || matches!(
                    w.auto_pad,
                    super::AutoPad::SameUpper | super::AutoPad::SameLower
                )
            {
                let target = if self.output_shape.is_empty() {
                    spatial[i] * s
                } else {
                    self.output_shape[i]
                };
                let as_i64 = |v: usize| {
                    i64::try_from(v).map_err(|_| CoreError::op("ConvTranspose", "size overflow"))
                };
                let total = as_i64(full)? - as_i64(target)?;
                let half = total.div_euclid(2);
                let (b, e) = if w.auto_pad == super::AutoPad::SameUpper {
                    (half, total - half)
                } else {
                    (total - half, half)
                };
                out[i] = target;
                pb[i] = b;
                pe[i] = e;
            } else {
                let (b, e) = if w.pads.is_empty() || w.auto_pad == super::AutoPad::Valid {
                    (0, 0)
                } else {
                    (w.pads[i], w.pads[n + i])
                };
                out[i] = full.checked_sub(b + e).ok_or_else(|| {
                    CoreError::op("ConvTranspose", "pads are larger than the output")
                })?;
                pb[i] = i64::try_from(b)
                    .map_err(|_| CoreError::op("ConvTranspose", "pads overflow"))?;
                pe[i] = i64::try_from(e)
                    .map_err(|_| CoreError::op("ConvTranspose", "pads overflow"))?;
            }
        }
        Ok((out, pb, pe))
    }

    pub(crate) fn infer(&self, inputs: &[&TensorInfo]) -> Result<Vec<TensorInfo>> {
        let (x, w) = (inputs[0], inputs[1]);
        need_float("ConvTranspose", x)?;
        rank_at_least("ConvTranspose", x, 3)?;
        let (xd, wd) = (x.shape.dims(), w.shape.dims());
        let g = self.group.max(1);
        if wd.len() != xd.len() || wd[0] != xd[1] || xd[1] % g != 0 {
            return Err(CoreError::op(
                "ConvTranspose",
                format!(
                    "weight shape {} does not fit input {} with group {g}",
                    w.shape, x.shape
                ),
            ));
        }
        if self.window.kernel != wd[2..] {
            return Err(CoreError::op(
                "ConvTranspose",
                format!(
                    "kernel_shape {:?} differs from weight shape {}",
                    self.window.kernel, w.shape
                ),
            ));
        }
        if let Some(b) = inputs.get(2) {
            if b.shape.dims() != [wd[1] * g] {
                return Err(CoreError::op(
                    "ConvTranspose",
                    format!("bias shape {} is not [{}]", b.shape, wd[1] * g),
                ));
            }
        }
        let (spatial, _, _) = self.geometry(xd)?;
        let mut out = vec![xd[0], wd[1] * g];
        out.extend(spatial);
        Ok(vec![TensorInfo::new(x.dtype, out)])
    }
}

impl PoolDesc {
    /// Resolve the geometry for a concrete input shape.
    pub fn geometry(&self, x: &[usize]) -> Result<Geometry> {
        self.window.geometry(&x[2..], self.ceil_mode)
    }

    pub(crate) fn infer(&self, inputs: &[&TensorInfo]) -> Result<Vec<TensorInfo>> {
        let x = inputs[0];
        rank_at_least("Pool", x, 3)?;
        let geo = self.geometry(x.shape.dims())?;
        let mut out = x.shape.dims()[..2].to_vec();
        out.extend(geo.output);
        Ok(vec![TensorInfo::new(x.dtype, out)])
    }
}

pub(crate) fn infer_global_pool(inputs: &[&TensorInfo]) -> Result<Vec<TensorInfo>> {
    let x = inputs[0];
    rank_at_least("GlobalPool", x, 3)?;
    let d = x.shape.dims();
    let mut out = d[..2].to_vec();
    out.extend(std::iter::repeat_n(1, d.len() - 2));
    Ok(vec![TensorInfo::new(x.dtype, out)])
}

/// Output shape of numpy matmul for inputs `a` and `b`.
pub fn matmul_shape(a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    if a.is_empty() || b.is_empty() {
        return Err(CoreError::op("MatMul", "inputs must have rank >= 1"));
    }
    let a2: Vec<usize> = if a.len() == 1 {
        vec![1, a[0]]
    } else {
        a.to_vec()
    };
    let b2: Vec<usize> = if b.len() == 1 {
        vec![b[0], 1]
    } else {
        b.to_vec()
    };
    let (m, k) = (a2[a2.len() - 2], a2[a2.len() - 1]);
    let (k2, n) = (b2[b2.len() - 2], b2[b2.len() - 1]);
    if k != k2 {
        return Err(CoreError::op(
            "MatMul",
            format!("inner dimensions differ: {a:?} x {b:?}"),
        ));
    }
    let batch = broadcast_shapes(&a2[..a2.len() - 2], &b2[..b2.len() - 2])
        .map_err(|e| CoreError::op("MatMul", e.to_string()))?;
    let mut out = batch;
    if a.len() > 1 {
        out.push(m);
    }
    if b.len() > 1 {
        out.push(n);
    }
    Ok(out)
}

pub(crate) fn infer_matmul(inputs: &[&TensorInfo]) -> Result<Vec<TensorInfo>> {
    let (a, b) = (inputs[0], inputs[1]);
    if a.dtype != b.dtype {
        return Err(CoreError::op(
            "MatMul",
            format!("input types differ: {} and {}", a.dtype, b.dtype),
        ));
    }
    let out = matmul_shape(a.shape.dims(), b.shape.dims())?;
    Ok(vec![TensorInfo::new(a.dtype, out)])
}

impl GemmDesc {
    pub(crate) fn infer(&self, inputs: &[&TensorInfo]) -> Result<Vec<TensorInfo>> {
        let (a, b) = (inputs[0], inputs[1]);
        let (ad, bd) = (a.shape.dims(), b.shape.dims());
        if ad.len() != 2 || bd.len() != 2 {
            return Err(CoreError::op(
                "Gemm",
                format!("A {} and B {} must be 2-D", a.shape, b.shape),
            ));
        }
        let (m, k) = if self.trans_a {
            (ad[1], ad[0])
        } else {
            (ad[0], ad[1])
        };
        let (k2, n) = if self.trans_b {
            (bd[1], bd[0])
        } else {
            (bd[0], bd[1])
        };
        if k != k2 {
            return Err(CoreError::op(
                "Gemm",
                format!("inner dimensions differ: {k} and {k2}"),
            ));
        }
        if let Some(c) = inputs.get(2) {
            let s = broadcast_shapes(c.shape.dims(), &[m, n])
                .map_err(|e| CoreError::op("Gemm", e.to_string()))?;
            if s != [m, n] {
                return Err(CoreError::op(
                    "Gemm",
                    format!("C {} does not broadcast to [{m}x{n}]", c.shape),
                ));
            }
        }
        Ok(vec![TensorInfo::new(a.dtype, vec![m, n])])
    }
}

pub(crate) fn infer_batch_norm(inputs: &[&TensorInfo]) -> Result<Vec<TensorInfo>> {
    let x = inputs[0];
    need_float("BatchNormalization", x)?;
    rank_at_least("BatchNormalization", x, 2)?;
    let c = x.shape.dims()[1];
    for (i, p) in inputs[1..].iter().enumerate() {
        if p.shape.dims() != [c] {
            return Err(CoreError::op(
                "BatchNormalization",
                format!("parameter {} has shape {}, expected [{c}]", i + 1, p.shape),
            ));
        }
    }
    Ok(vec![TensorInfo::new(x.dtype, x.shape.clone())])
}

pub(crate) fn infer_softmax(axis: i64, inputs: &[&TensorInfo]) -> Result<Vec<TensorInfo>> {
    let x = inputs[0];
    need_float("Softmax", x)?;
    normalize_axis(axis, x.shape.rank())?;
    Ok(vec![TensorInfo::new(x.dtype, x.shape.clone())])
}

pub(crate) fn infer_layer_norm(axis: i64, inputs: &[&TensorInfo]) -> Result<Vec<TensorInfo>> {
    let x = inputs[0];
    need_float("LayerNormalization", x)?;
    let a = normalize_axis(axis, x.shape.rank())?;
    let norm_shape = &x.shape.dims()[a..];
    for p in &inputs[1..] {
        broadcast_shapes(p.shape.dims(), norm_shape)
            .ok()
            .filter(|s| s == norm_shape)
            .ok_or_else(|| {
                CoreError::op(
                    "LayerNormalization",
                    format!(
                        "scale/bias shape {} does not broadcast to {norm_shape:?}",
                        p.shape
                    ),
                )
            })?;
    }
    Ok(vec![TensorInfo::new(x.dtype, x.shape.clone())])
}

/// Checks that a tensor is f32, for ops whose kernels are float-only.
pub fn require_dtype(op: &'static str, info: &TensorInfo, allowed: &[DataType]) -> Result<()> {
    if allowed.contains(&info.dtype) {
        Ok(())
    } else {
        Err(CoreError::op(
            op,
            format!("data type {} is not one of {allowed:?}", info.dtype),
        ))
    }
}
