//! CpuRef's integer layers: the int8 convolution and the int8 fully connected layer that
//! [`crate::fold`] makes of `DequantizeLinear → Conv | Gemm | MatMul → (Relu | Clip) →
//! QuantizeLinear` chains with constant 8-bit weights. Each output is the exact integer sum
//! of `(x - x_zero) · (w - w_zero)` plus the int32 bias, requantized by
//! [`backplane_core::quant::requantize`] with the scale of
//! [`backplane_core::quant::requant_scale`]: LiteRT's (XNNPACK's) integer semantics, which
//! the f32 chain misses by a quantum where a sum lies next to a rounding boundary; or, when
//! the chain's QuantizeLinear asks for [`Requantization::FixedPoint`], by
//! [`backplane_core::quant::requantize_fixed_point`] (LiteRT's builtin kernels).
//!
//! Plain loops over plain indices: this is the oracle the fast integer kernels are checked
//! against.

use backplane_backend_api::BackendError;
use backplane_core::ops::{CustomOp, CustomPayload};
use backplane_core::quant::{
    fixed_point_multiplier, requant_scale, requantize, requantize_fixed_point, Requantization,
};
use backplane_core::{DataType, TensorInfo, TensorView};

/// The domain of CpuRef's own custom operators.
pub(crate) const DOMAIN: &str = crate::CPU_REF_ID;
/// The folded int8 convolution.
pub(crate) const QCONV: &str = "QLinearConv";
/// The folded int8 fully connected layer.
pub(crate) const QGEMM: &str = "QLinearGemm";

/// The quantization shared by both layers: input, weights (per tensor or per output
/// channel), output, and the output range (the type's, narrowed by a fused activation).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct QParams {
    /// Scale and zero point of x.
    pub x: (f32, i32),
    /// The weights' scales: one, or one per output channel.
    pub w_scales: Vec<f32>,
    /// The weights' zero points: one, or one per output channel.
    pub w_zeros: Vec<i32>,
    /// Scale and zero point of y.
    pub y: (f32, i32),
    /// The lowest and highest output integer.
    pub clamp: (i32, i32),
    /// How each sum becomes an output integer.
    pub requant: Requantization,
}

impl QParams {
    fn channel<T: Copy>(v: &[T], c: usize) -> T {
        if v.len() == 1 {
            v[0]
        } else {
            v[c]
        }
    }

    /// Output channel `c`'s sum requantized.
    fn output(&self, c: usize, sum: i64) -> i32 {
        let w_scale = Self::channel(&self.w_scales, c);
        let (lo, hi) = self.clamp;
        match self.requant {
            Requantization::F32 => {
                let scale = requant_scale(self.x.0, w_scale, self.y.0);
                requantize(sum, scale, self.y.1, lo, hi)
            }
            Requantization::FixedPoint => {
                let m = fixed_point_multiplier(self.x.0, w_scale, self.y.0);
                requantize_fixed_point(sum, m, self.y.1, lo, hi)
            }
        }
    }

    fn check(&self, channels: usize, y: DataType) -> std::result::Result<(), String> {
        let fits = |n: usize| n == 1 || n == channels;
        if !fits(self.w_scales.len()) || !fits(self.w_zeros.len()) {
            return Err(format!(
                "weights quantized over {} scales, not 1 or {channels}",
                self.w_scales.len()
            ));
        }
        let (lo, hi) = range(y).ok_or_else(|| format!("output type {y} is not 8-bit"))?;
        if self.clamp.0 < lo || self.clamp.1 > hi || self.clamp.0 > self.clamp.1 {
            return Err("output range outside the output type".to_string());
        }
        Ok(())
    }
}

/// The int8 convolution of 2-D images `[N, C, H, W]` by weights `[M, C/group, kh, kw]`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct QConvDesc {
    /// Kernel extent (rows, columns).
    pub kernel: [usize; 2],
    /// Strides.
    pub strides: [usize; 2],
    /// Dilations.
    pub dilations: [usize; 2],
    /// Padding before (top, left); padded inputs are x's zero point (a real zero).
    pub pads: [usize; 2],
    /// Groups.
    pub group: usize,
    /// The quantization.
    pub q: QParams,
}

/// The int8 product of rows of K values (x, any shape of `R·K` elements) by weights
/// `[N, K]` (`trans_b`) or `[K, N]`, written as `R·N` values in any shape.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct QGemmDesc {
    /// Weights stored `[N, K]`.
    pub trans_b: bool,
    /// The quantization.
    pub q: QParams,
}

/// The custom op of a folded layer of type `op_type`, carrying `desc`, writing `y`.
pub(crate) fn custom_op<T>(op_type: &str, desc: T, y: TensorInfo) -> CustomOp
where
    T: Clone + std::fmt::Debug + Send + Sync + 'static,
{
    CustomOp {
        domain: DOMAIN.to_string(),
        op_type: op_type.to_string(),
        attributes: Vec::new(),
        outputs: vec![y],
        payload: Some(CustomPayload::new(desc)),
    }
}

/// The lowest and highest value of an 8-bit type.
pub(crate) fn range(dt: DataType) -> Option<(i32, i32)> {
    match dt {
        DataType::I8 => Some((-128, 127)),
        DataType::U8 => Some((0, 255)),
        _ => None,
    }
}

/// Element `i` of an 8-bit view, as an integer (the view is read in place: no copy).
fn int_at(v: &TensorView<'_>, i: usize) -> i32 {
    match v.info.dtype {
        DataType::I8 => i32::from(v.data[i] as i8),
        _ => i32::from(v.data[i]),
    }
}

/// Element `i` of an int32 view.
fn int32_at(v: &TensorView<'_>, i: usize) -> i64 {
    let b = &v.data[4 * i..4 * i + 4];
    i64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// The byte of an 8-bit value (two's complement for i8).
fn byte(v: i32) -> u8 {
    v as u8
}

/// The kernel of CpuRef custom op `c` on whatever inputs it is given: `c` is one of
/// CpuRef's integer layers (or the reason it is not), and each run checks the inputs'
/// shapes against its description through [`kernel`].
pub(crate) fn deferred(c: &CustomOp) -> std::result::Result<super::plan::Kernel, String> {
    let known = super::qbuiltin::is_ours(c)
        || c.domain == DOMAIN
            && match c.op_type.as_str() {
                QCONV => c
                    .payload
                    .as_ref()
                    .and_then(|p| p.get::<QConvDesc>())
                    .is_some(),
                QGEMM => c
                    .payload
                    .as_ref()
                    .and_then(|p| p.get::<QGemmDesc>())
                    .is_some(),
                _ => false,
            };
    if !known {
        return Err(format!(
            "custom operator '{}' (domain '{}') is not implemented by CpuRef",
            c.op_type, c.domain
        ));
    }
    let c = c.clone();
    Ok(Box::new(move |inputs, outputs| {
        let infos: Vec<&TensorInfo> = inputs.iter().map(|v| v.info).collect();
        let k = kernel(&c, &infos).map_err(BackendError::Other)?;
        k(inputs, outputs)
    }))
}

/// The kernel of CpuRef custom op `c` with inputs `inputs` and output `y`, or why there is
/// none. Inputs: x (8-bit), w (8-bit constant), bias (int32, one per output channel).
pub(crate) fn kernel(
    c: &CustomOp,
    inputs: &[&TensorInfo],
) -> std::result::Result<super::plan::Kernel, String> {
    let not_ours = || {
        format!(
            "custom operator '{}' (domain '{}') is not implemented by CpuRef",
            c.op_type, c.domain
        )
    };
    if c.domain != DOMAIN {
        return Err(not_ours());
    }
    if super::qbuiltin::is_ours(c) {
        return super::qbuiltin::kernel(c, inputs);
    }
    let [x, w, b] = inputs else {
        return Err(format!("{} takes x, w and bias", c.op_type));
    };
    let y = c.outputs.first().ok_or("no output")?;
    let payload = c.payload.as_ref();
    match c.op_type.as_str() {
        QCONV => {
            let d = payload
                .and_then(|p| p.get::<QConvDesc>())
                .cloned()
                .ok_or("QLinearConv carries no CpuRef description")?;
            conv_kernel(d, x, w, b, y)
        }
        QGEMM => {
            let d = payload
                .and_then(|p| p.get::<QGemmDesc>())
                .cloned()
                .ok_or("QLinearGemm carries no CpuRef description")?;
            gemm_kernel(d, x, w, b, y)
        }
        _ => Err(not_ours()),
    }
}

fn conv_kernel(
    d: QConvDesc,
    x: &TensorInfo,
    w: &TensorInfo,
    b: &TensorInfo,
    y: &TensorInfo,
) -> std::result::Result<super::plan::Kernel, String> {
    let (&[n, c, h, wd], &[m, cg, kh, kw]) = (x.shape.dims(), w.shape.dims()) else {
        return Err("QLinearConv takes 4-D x and w".to_string());
    };
    let g = d.group;
    if g == 0 || cg * g != c || m % g != 0 || [kh, kw] != d.kernel || b.shape.dims() != [m] {
        return Err("QLinearConv: x, w, bias and groups do not agree".to_string());
    }
    if d.strides.contains(&0) || d.dilations.contains(&0) {
        return Err("QLinearConv: zero stride or dilation".to_string());
    }
    d.q.check(m, y.dtype)?;
    // The declared output is the Conv's own geometry; taps outside x are skipped (x's
    // zero point, a real zero, contributes nothing), so any extent indexes in bounds.
    let ydims = y.shape.dims();
    let (oh, ow) = match ydims {
        &[yn, ym, oh, ow] if yn == n && ym == m => (oh, ow),
        _ => {
            return Err(format!(
                "QLinearConv: output {} is not [{n}, {m}, _, _]",
                y.shape
            ))
        }
    };
    if kh == 0 || kw == 0 {
        return Err("QLinearConv: empty kernel".to_string());
    }
    Ok(Box::new(move |inputs, outputs| {
        let [xv, wv, bv] = inputs else {
            return Err(BackendError::Other("QLinearConv takes three inputs".into()));
        };
        let [yv] = outputs else {
            return Err(BackendError::Other("QLinearConv has one output".into()));
        };
        let mg = m / g;
        for img in 0..n {
            for oc in 0..m {
                let grp = oc / mg;
                let zw = QParams::channel(&d.q.w_zeros, oc);
                for oy in 0..oh {
                    for ox in 0..ow {
                        let mut sum = int32_at(bv, oc);
                        for ic in 0..cg {
                            let ch = grp * cg + ic;
                            for ky in 0..kh {
                                let iy = (oy * d.strides[0] + ky * d.dilations[0])
                                    .checked_sub(d.pads[0]);
                                let Some(iy) = iy.filter(|&v| v < h) else {
                                    continue;
                                };
                                for kx in 0..kw {
                                    let ix = (ox * d.strides[1] + kx * d.dilations[1])
                                        .checked_sub(d.pads[1]);
                                    let Some(ix) = ix.filter(|&v| v < wd) else {
                                        continue;
                                    };
                                    let xq =
                                        int_at(xv, ((img * c + ch) * h + iy) * wd + ix) - d.q.x.1;
                                    let wq = int_at(wv, ((oc * cg + ic) * kh + ky) * kw + kx) - zw;
                                    sum += i64::from(xq) * i64::from(wq);
                                }
                            }
                        }
                        yv.data[((img * m + oc) * oh + oy) * ow + ox] = byte(d.q.output(oc, sum));
                    }
                }
            }
        }
        Ok(())
    }))
}

fn gemm_kernel(
    d: QGemmDesc,
    x: &TensorInfo,
    w: &TensorInfo,
    b: &TensorInfo,
    y: &TensorInfo,
) -> std::result::Result<super::plan::Kernel, String> {
    let &[w0, w1] = w.shape.dims() else {
        return Err("QLinearGemm takes 2-D weights".to_string());
    };
    let (nn, k) = if d.trans_b { (w0, w1) } else { (w1, w0) };
    let count = |i: &TensorInfo| i.shape.num_elements().map_err(|e| e.to_string());
    let total = count(x)?;
    if k == 0 || total % k != 0 || count(b)? != nn {
        return Err(format!(
            "QLinearGemm: x {} is not rows of {k}, or bias {} is not {nn} values",
            x.shape, b.shape
        ));
    }
    let rows = total / k;
    if count(y)? != rows * nn {
        return Err(format!(
            "QLinearGemm: output {} is not {rows}×{nn}",
            y.shape
        ));
    }
    d.q.check(nn, y.dtype)?;
    Ok(Box::new(move |inputs, outputs| {
        let [xv, wv, bv] = inputs else {
            return Err(BackendError::Other("QLinearGemm takes three inputs".into()));
        };
        let [yv] = outputs else {
            return Err(BackendError::Other("QLinearGemm has one output".into()));
        };
        for r in 0..rows {
            for j in 0..nn {
                let zw = QParams::channel(&d.q.w_zeros, j);
                let mut sum = int32_at(bv, j);
                for i in 0..k {
                    let wq = int_at(wv, if d.trans_b { j * k + i } else { i * nn + j });
                    sum += i64::from(int_at(xv, r * k + i) - d.q.x.1) * i64::from(wq - zw);
                }
                yv.data[r * nn + j] = byte(d.q.output(j, sum));
            }
        }
        Ok(())
    }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]
    use super::*;
    use crate::support::check;
    use backplane_core::Op;

    fn gemm(w_scales: Vec<f32>, clamp: (i32, i32)) -> Op {
        let q = QParams {
            x: (0.1, 0),
            w_scales,
            w_zeros: vec![0],
            y: (0.5, 0),
            clamp,
            requant: Requantization::F32,
        };
        let y = TensorInfo::new(DataType::I8, vec![2, 3]);
        Op::Custom(custom_op(QGEMM, QGemmDesc { trans_b: true, q }, y))
    }

    /// The convolution layers `scripts/probe_tflite_q8_builtin.py` recorded from LiteRT's
    /// builtin kernels (mobilenet_v3_small's head): each exact sum requantized by the
    /// fixed-point rule equals LiteRT's output; the f32 rule and gemmlowp's reference
    /// multiply (rounding ties on negative values differently) each miss some.
    #[test]
    fn fixed_point_requantization_equals_litert_builtin_kernels() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../testdata/tflite/q8_rules/builtin_conv.json"
        );
        let text = std::fs::read_to_string(path).unwrap();
        let layers: serde_json::Value = serde_json::from_str(&text).unwrap();
        let f32s = |v: &serde_json::Value| -> Vec<f32> {
            let a = v.as_array().unwrap();
            a.iter().map(|e| e.as_f64().unwrap() as f32).collect()
        };
        let ints = |v: &serde_json::Value| -> Vec<i64> {
            let a = v.as_array().unwrap();
            a.iter().map(|e| e.as_i64().unwrap()).collect()
        };
        let (mut checked, mut f32_off, mut gemmlowp_off) = (0, 0, 0);
        for layer in layers.as_array().unwrap() {
            let y = f32s(&layer["y"]);
            let range = ints(&layer["range"]);
            let mut q = QParams {
                x: (layer["x_scale"].as_f64().unwrap() as f32, 0),
                w_scales: f32s(&layer["w_scales"]),
                w_zeros: vec![0],
                y: (y[0], y[1] as i32),
                clamp: (range[0] as i32, range[1] as i32),
                requant: Requantization::FixedPoint,
            };
            let channels = layer["channels"].as_u64().unwrap() as usize;
            let sums = ints(&layer["sums"]);
            let litert = ints(&layer["litert"]);
            assert_eq!(sums.len(), litert.len());
            let mut off = 0;
            for (i, (&sum, &want)) in sums.iter().zip(&litert).enumerate() {
                q.requant = Requantization::FixedPoint;
                assert_eq!(
                    i64::from(q.output(i % channels, sum)),
                    want,
                    "layer {} element {i}",
                    layer["layer"]
                );
                q.requant = Requantization::F32;
                off += usize::from(i64::from(q.output(i % channels, sum)) != want);
                let (sx, sw) = (q.x.0, QParams::channel(&q.w_scales, i % channels));
                let (m, shift) = fixed_point_multiplier(sx, sw, q.y.0);
                let g =
                    backplane_core::quant::multiply_by_quantized_multiplier(sum as i32, m, shift);
                let g = (i64::from(g) + i64::from(q.y.1)).clamp(range[0], range[1]);
                gemmlowp_off += usize::from(g != want);
                checked += 1;
            }
            f32_off += off;
        }
        assert!(checked > 10_000, "{checked} elements");
        assert!(
            f32_off > 0,
            "the recorded cases do not tell the rules apart"
        );
        assert!(
            gemmlowp_off > 0,
            "the cases do not tell the roundings apart"
        );
    }

    #[test]
    fn integer_layers_refuse_what_their_descriptions_do_not_fit() {
        let x = TensorInfo::new(DataType::I8, vec![2, 4]);
        let w = TensorInfo::new(DataType::I8, vec![3, 4]);
        let b = TensorInfo::new(DataType::I32, vec![3]);
        assert!(check(&gemm(vec![0.1], (-128, 127)), &[&x, &w, &b]).is_ok());
        // x is not rows of K = 4.
        let x5 = TensorInfo::new(DataType::I8, vec![2, 5]);
        let r = check(&gemm(vec![0.1], (-128, 127)), &[&x5, &w, &b])
            .err()
            .unwrap();
        assert!(r.contains("rows of 4"), "{r}");
        // Two scales for three channels; a range outside i8.
        assert!(check(&gemm(vec![0.1, 0.2], (-128, 127)), &[&x, &w, &b]).is_err());
        assert!(check(&gemm(vec![0.1], (-128, 200)), &[&x, &w, &b]).is_err());
        // f32 x, and a CpuRef custom op without its description.
        let xf = TensorInfo::new(DataType::F32, vec![2, 4]);
        assert!(check(&gemm(vec![0.1], (-128, 127)), &[&xf, &w, &b]).is_err());
        let bare = Op::Custom(CustomOp {
            domain: DOMAIN.to_string(),
            op_type: QCONV.to_string(),
            attributes: vec![],
            outputs: vec![TensorInfo::new(DataType::I8, vec![1])],
            payload: None,
        });
        let r = check(&bare, &[&x, &w, &b]).err().unwrap();
        assert!(r.contains("not implemented"), "{r}");
    }
}
