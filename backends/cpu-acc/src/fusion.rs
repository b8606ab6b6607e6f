//! Subgraph optimization: fuse chains into CpuAcc custom layers.
//!
//! * `Conv [→ BatchNormalization] [→ activation]` → `FusedConv` (BatchNormalization folded
//!   into new constant weights and bias), or `Conv [→ BatchNormalization] → Add(residual)
//!   [→ activation]` → `FusedConv` with the residual as a fourth input (the shortcut of a
//!   residual block: the addition and the activation run as one pass over the output, with
//!   no intermediate tensor and no separate layers).
//! * `MatMul [→ Mul/Div(scalar)] [→ Add(constant row bias)] [→ activation]
//!   [→ Transpose [→ Reshape]]` → `FusedMatMul`, where the activation may also be the
//!   exporters' GELU subgraph `0.5·x·(1 + erf(x/√2))`. Each operand may come through
//!   `[Reshape →] Transpose…` layers, and the result may leave through a Transpose (keeping
//!   the last axis) and a Reshape: those are folded into strided reads and writes
//!   (`matmul::StridedView`), which is what the head split and merge of attention are.
//! * `Gemm → activation` → `FusedGemm`.
//! * `Add → LayerNormalization` (the residual connection before a transformer's norm) →
//!   `FusedAddLayerNorm`: each row is summed and normalized in one pass, the sum never
//!   stored.
//!
//! A chain only grows through a tensor that has exactly one consumer and is not a network
//! output, so no intermediate value anyone else needs disappears.

use crate::act::{Activation, FromOp};
use crate::matmul::{MatMulViews, StridedView};
use crate::ops::bn_affine;
use crate::CPU_ACC_ID;
use backplane_backend_api::{
    LayerDesc, OptimizationViews, ReplacementLayer, SubgraphView, Substitution, ValueRef,
};
use backplane_core::ops::{AttrValue, AutoPad, ConvDesc, CustomOp, GemmDesc, Window};
use backplane_core::{LayerId, Op, Tensor, TensorId, TensorInfo, TensorKind};
use std::collections::BTreeSet;
use std::sync::Arc;

/// Custom op: convolution with folded batch norm, bias and activation. Inputs X, W, B?, or
/// X, W, B, R with attribute `residual` = 1: `act(conv(X) + B + R)`. Attribute `layout`
/// (see [`ConvLayout`]): absent for NCHW tensors, `nhwc` or `nchw_to_nhwc` in a
/// channels-last region (`crate::layout`).
pub const FUSED_CONV: &str = "FusedConv";
/// Custom op: two channels-last `FusedConv`s, a pointwise and a depthwise one, the second
/// alone reading the first's output (a MobileNet block's expansion and its depthwise
/// convolution, or the depthwise convolution and its projection), run a band of rows at a
/// time so that the tensor between them never leaves the cache (see
/// `crate::conv::nhwc::NhwcPairWorkload`). Inputs X, W1, B1, W2, B2, and R when the second (only a
/// projection) has a residual; the first convolution's attributes as `FusedConv`'s, the
/// second's prefixed with `then_`, and `mid_dims`, the `[N, H, W, C]` dims of the tensor
/// between them. Formed by `crate::layout`.
pub const FUSED_CONV_PAIR: &str = "FusedConvPair";
/// Custom op: `act(alpha·A·B + bias)`. Inputs A, B, bias?; attributes `alpha` and, for
/// operands read or a result written through a `matmul::StridedView`, `a_dims`/`a_strides`,
/// `b_dims`/`b_strides`, `y_dims`/`y_strides`.
pub const FUSED_MATMUL: &str = "FusedMatMul";
/// Custom op: Gemm + activation. Inputs A, B, C?.
pub const FUSED_GEMM: &str = "FusedGemm";
/// Custom op: `LayerNormalization(A + B)`, A and B of one shape. Inputs A, B, scale, bias?;
/// attributes `axis` and `epsilon` (LayerNormalization's).
pub const FUSED_ADD_LAYER_NORM: &str = "FusedAddLayerNorm";

fn ints(v: &[usize]) -> AttrValue {
    AttrValue::Ints(v.iter().map(|&x| x as i64).collect())
}

fn act_attrs(act: Activation) -> Vec<(String, AttrValue)> {
    vec![
        ("activation".into(), AttrValue::String(act.name().into())),
        ("act_params".into(), AttrValue::Floats(act.params())),
    ]
}

fn attr<'a>(c: &'a CustomOp, name: &str) -> Option<&'a AttrValue> {
    c.attributes.iter().find(|(n, _)| n == name).map(|(_, v)| v)
}

fn get_ints(c: &CustomOp, name: &str) -> Result<Vec<usize>, String> {
    match attr(c, name) {
        Some(AttrValue::Ints(v)) => v
            .iter()
            .map(|&x| usize::try_from(x).map_err(|_| format!("{name}: negative value")))
            .collect(),
        _ => Err(format!("{} lacks attribute {name}", c.op_type)),
    }
}

fn get_int(c: &CustomOp, name: &str) -> Result<i64, String> {
    match attr(c, name) {
        Some(AttrValue::Int(v)) => Ok(*v),
        _ => Err(format!("{} lacks attribute {name}", c.op_type)),
    }
}

fn get_float(c: &CustomOp, name: &str) -> Result<f32, String> {
    match attr(c, name) {
        Some(AttrValue::Float(v)) => Ok(*v),
        _ => Err(format!("{} lacks attribute {name}", c.op_type)),
    }
}

/// The activation of a fused custom op.
pub fn decode_act(c: &CustomOp) -> Result<Activation, String> {
    let name = match attr(c, "activation") {
        Some(AttrValue::String(s)) => s.as_str(),
        _ => "none",
    };
    let params = match attr(c, "act_params") {
        Some(AttrValue::Floats(f)) => f.as_slice(),
        _ => &[],
    };
    Activation::from_name(name, params).ok_or_else(|| format!("unknown activation '{name}'"))
}

fn auto_pad_code(a: AutoPad) -> i64 {
    match a {
        AutoPad::NotSet => 0,
        AutoPad::SameUpper => 1,
        AutoPad::SameLower => 2,
        AutoPad::Valid => 3,
    }
}

/// The tensor layouts of a `FusedConv`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConvLayout {
    /// X and Y are `[N, C, H, W]`.
    Nchw,
    /// X and Y (and the residual) are `[N, H, W, C]` (see `crate::conv::nhwc`).
    Nhwc,
    /// X is `[N, C, H, W]`, Y is `[N, H, W, C]`: a channels-last region's first layer.
    NchwToNhwc,
}

impl ConvLayout {
    fn name(self) -> &'static str {
        match self {
            ConvLayout::Nchw => "nchw",
            ConvLayout::Nhwc => "nhwc",
            ConvLayout::NchwToNhwc => "nchw_to_nhwc",
        }
    }
}

/// The layouts of a `FusedConv`.
pub fn decode_layout(c: &CustomOp) -> Result<ConvLayout, String> {
    match attr(c, "layout") {
        None => Ok(ConvLayout::Nchw),
        Some(AttrValue::String(s)) => [ConvLayout::Nchw, ConvLayout::Nhwc, ConvLayout::NchwToNhwc]
            .into_iter()
            .find(|l| l.name() == s)
            .ok_or_else(|| format!("FusedConv: unknown layout '{s}'")),
        Some(_) => Err("FusedConv: layout is a string".into()),
    }
}

/// The same `FusedConv` with other layouts and output description `y`.
pub fn with_layout(c: &CustomOp, layout: ConvLayout, y: TensorInfo) -> Op {
    let mut attributes: Vec<(String, AttrValue)> = c
        .attributes
        .iter()
        .filter(|(n, _)| n != "layout")
        .cloned()
        .collect();
    if layout != ConvLayout::Nchw {
        attributes.push(("layout".into(), AttrValue::String(layout.name().into())));
    }
    Op::Custom(CustomOp {
        domain: c.domain.clone(),
        op_type: c.op_type.clone(),
        attributes,
        outputs: vec![y],
    })
}

/// The convolution of a `FusedConv`.
pub fn decode_conv(c: &CustomOp) -> Result<ConvDesc, String> {
    Ok(ConvDesc {
        window: Window {
            kernel: get_ints(c, "kernel_shape")?,
            strides: get_ints(c, "strides")?,
            dilations: get_ints(c, "dilations")?,
            pads: get_ints(c, "pads")?,
            auto_pad: match get_int(c, "auto_pad")? {
                1 => AutoPad::SameUpper,
                2 => AutoPad::SameLower,
                3 => AutoPad::Valid,
                _ => AutoPad::NotSet,
            },
        },
        group: usize::try_from(get_int(c, "group")?).map_err(|_| "negative group")?,
    })
}

/// The Gemm of a `FusedGemm`.
pub fn decode_gemm(c: &CustomOp) -> Result<GemmDesc, String> {
    Ok(GemmDesc {
        alpha: get_float(c, "alpha")?,
        beta: get_float(c, "beta")?,
        trans_a: get_int(c, "trans_a")? != 0,
        trans_b: get_int(c, "trans_b")? != 0,
    })
}

/// The views and scale of a `FusedMatMul`.
pub fn decode_matmul_views(c: &CustomOp) -> Result<MatMulViews, String> {
    let view = |name: &str| -> Result<Option<StridedView>, String> {
        let (dims, strides) = (format!("{name}_dims"), format!("{name}_strides"));
        if attr(c, &dims).is_none() && attr(c, &strides).is_none() {
            return Ok(None);
        }
        let v = StridedView {
            dims: get_ints(c, &dims)?,
            strides: get_ints(c, &strides)?,
        };
        if v.dims.len() != v.strides.len() {
            return Err(format!("{dims} and {strides} differ in length"));
        }
        Ok(Some(v))
    };
    Ok(MatMulViews {
        a: view("a")?,
        b: view("b")?,
        y: view("y")?,
        alpha: match attr(c, "alpha") {
            None => 1.0,
            Some(_) => get_float(c, "alpha")?,
        },
    })
}

fn matmul_view_attrs(v: &MatMulViews) -> Vec<(String, AttrValue)> {
    let mut out = Vec::new();
    if v.alpha != 1.0 {
        out.push(("alpha".into(), AttrValue::Float(v.alpha)));
    }
    for (name, view) in [("a", &v.a), ("b", &v.b), ("y", &v.y)] {
        if let Some(view) = view {
            out.push((format!("{name}_dims"), ints(&view.dims)));
            out.push((format!("{name}_strides"), ints(&view.strides)));
        }
    }
    out
}

/// The output description of a `FusedMatMul` with these inputs, checked against `output`.
fn check_fused_matmul(
    c: &CustomOp,
    inputs: &[&TensorInfo],
    output: &TensorInfo,
) -> Result<Vec<TensorInfo>, String> {
    let views = decode_matmul_views(c)?;
    let seen = |v: &Option<StridedView>, slot: usize| -> Result<TensorInfo, String> {
        let i = inputs.get(slot).ok_or("FusedMatMul takes A and B")?;
        match v {
            None => Ok((*i).clone()),
            Some(v) if v.extent() <= i.shape.elements() => {
                Ok(TensorInfo::new(i.dtype, v.dims.clone()))
            }
            Some(_) => Err("a FusedMatMul operand view reaches past its input".into()),
        }
    };
    let (a, b) = (seen(&views.a, 0)?, seen(&views.b, 1)?);
    if let Some(bias) = inputs.get(2) {
        let n = b.shape.dims().last().copied();
        if bias.shape.dims().len() != 1 || Some(bias.shape.dims()[0]) != n {
            return Err("FusedMatMul bias must be 1-D of N values".into());
        }
    }
    let product = Op::MatMul.infer(&[&a, &b]).map_err(|e| e.to_string())?;
    let Some(y) = &views.y else {
        return Ok(product);
    };
    let dims = product.first().map(|p| p.shape.dims()).unwrap_or_default();
    let unit_last = dims.last().is_none_or(|&n| n <= 1) || y.strides.last() == Some(&1);
    if y.dims != dims || !unit_last || !y.fills(output.shape.elements()) {
        return Err("the FusedMatMul result view does not fill its output".into());
    }
    Ok(vec![output.clone()])
}

/// The normalization of a `FusedAddLayerNorm`: `(axis, epsilon)`.
pub fn decode_layer_norm(c: &CustomOp) -> Result<(i64, f32), String> {
    Ok((get_int(c, "axis")?, get_float(c, "epsilon")?))
}

/// Prefix of the second convolution's attributes in a `FusedConvPair`.
const THEN: &str = "then_";

/// A `FusedConvPair` of two channels-last `FusedConv`s (their layouts dropped), the first's
/// output described by `mid`, the second's by `y`.
pub fn conv_pair(first: &CustomOp, second: &CustomOp, mid: &TensorInfo, y: TensorInfo) -> Op {
    let keep = |(n, _): &&(String, AttrValue)| n != "layout";
    let mut attributes: Vec<(String, AttrValue)> =
        first.attributes.iter().filter(keep).cloned().collect();
    attributes.extend(
        second
            .attributes
            .iter()
            .filter(keep)
            .map(|(n, v)| (format!("{THEN}{n}"), v.clone())),
    );
    attributes.push(("mid_dims".into(), ints(mid.shape.dims())));
    Op::Custom(CustomOp {
        domain: CPU_ACC_ID.into(),
        op_type: FUSED_CONV_PAIR.into(),
        attributes,
        outputs: vec![y],
    })
}

/// The two channels-last `FusedConv`s of a `FusedConvPair`, and the description of the
/// tensor between them.
pub fn split_pair(c: &CustomOp) -> Result<(CustomOp, CustomOp, TensorInfo), String> {
    let mid = TensorInfo::new(backplane_core::DataType::F32, get_ints(c, "mid_dims")?);
    let layout = ("layout".to_string(), AttrValue::String("nhwc".into()));
    let conv = |attributes: Vec<(String, AttrValue)>, outputs| CustomOp {
        domain: c.domain.clone(),
        op_type: FUSED_CONV.into(),
        attributes,
        outputs,
    };
    let first = c
        .attributes
        .iter()
        .filter(|(n, _)| !n.starts_with(THEN) && n != "mid_dims")
        .cloned()
        .chain(std::iter::once(layout.clone()))
        .collect();
    let second = c
        .attributes
        .iter()
        .filter_map(|(n, v)| Some((n.strip_prefix(THEN)?.to_string(), v.clone())))
        .chain(std::iter::once(layout))
        .collect();
    Ok((
        conv(first, vec![mid.clone()]),
        conv(second, c.outputs.clone()),
        mid,
    ))
}

/// Whether a `FusedConv` takes a residual (its fourth input).
pub fn has_residual(c: &CustomOp) -> bool {
    matches!(attr(c, "residual"), Some(AttrValue::Int(1)))
}

fn conv_op(desc: &ConvDesc, act: Activation, residual: bool, outputs: Vec<TensorInfo>) -> Op {
    let w = &desc.window;
    let mut attributes = vec![
        ("kernel_shape".into(), ints(&w.kernel)),
        ("strides".into(), ints(&w.strides)),
        ("dilations".into(), ints(&w.dilations)),
        ("pads".into(), ints(&w.pads)),
        ("auto_pad".into(), AttrValue::Int(auto_pad_code(w.auto_pad))),
        ("group".into(), AttrValue::Int(desc.group as i64)),
    ];
    attributes.extend(act_attrs(act));
    if residual {
        attributes.push(("residual".into(), AttrValue::Int(1)));
    }
    Op::Custom(CustomOp {
        domain: CPU_ACC_ID.into(),
        op_type: FUSED_CONV.into(),
        attributes,
        outputs,
    })
}

/// Whether CpuAcc runs this custom layer.
pub fn check_custom(c: &CustomOp, layer: &LayerDesc) -> Result<(), String> {
    if c.domain != CPU_ACC_ID {
        return Err(format!(
            "custom operator '{}' of domain '{}' is not CpuAcc's",
            c.op_type, c.domain
        ));
    }
    if layer.outputs.len() != 1 || c.outputs.len() != 1 {
        return Err(format!("{} has one output", c.op_type));
    }
    let refs: Vec<&TensorInfo> = layer.inputs.iter().collect();
    decode_act(c)?;
    let inferred = match c.op_type.as_str() {
        FUSED_CONV_PAIR => {
            let (first, second, mid) = split_pair(c)?;
            let (x, w1, b1, w2, b2, r) = match layer.inputs.as_slice() {
                [x, w1, b1, w2, b2] => (x, w1, b1, w2, b2, None),
                [x, w1, b1, w2, b2, r] => (x, w1, b1, w2, b2, Some(r)),
                _ => {
                    return Err(
                        "FusedConvPair takes X, W1, B1, W2, B2 and, with a residual, R".into(),
                    )
                }
            };
            if has_residual(&second) != r.is_some() {
                return Err(
                    "FusedConvPair takes R when its second convolution has a residual".into(),
                );
            }
            let part = |op: &CustomOp, inputs: Vec<TensorInfo>, y: &TensorInfo| {
                let desc = LayerDesc {
                    name: layer.name.clone(),
                    op: Op::Custom(op.clone()),
                    inputs,
                    outputs: vec![y.clone()],
                    constants: Vec::new(),
                };
                check_custom(op, &desc)
            };
            part(&first, vec![x.clone(), w1.clone(), b1.clone()], &mid)?;
            let second_inputs = [mid.clone(), w2.clone(), b2.clone()].into_iter();
            part(
                &second,
                second_inputs.chain(r.cloned()).collect(),
                &layer.outputs[0],
            )?;
            let (d1, d2) = (decode_conv(&first)?, decode_conv(&second)?);
            let order = crate::conv::nhwc::pair_order(&d1, &d2, &mid);
            let fits = match order {
                Some(crate::conv::nhwc::PairOrder::Expansion) => !has_residual(&second),
                Some(crate::conv::nhwc::PairOrder::Projection) => true,
                None => false,
            };
            if has_residual(&first) || !fits {
                return Err(
                    "FusedConvPair is a pointwise and a depthwise convolution, either \
                            on the other's output, only the projection with a residual"
                        .into(),
                );
            }
            return Ok(());
        }
        FUSED_CONV => {
            let desc = decode_conv(c)?;
            let dims = |s: usize| {
                refs.get(s)
                    .map(|i| i.shape.dims().to_vec())
                    .unwrap_or_default()
            };
            let layout = decode_layout(c)?;
            let x_nchw = match layout {
                ConvLayout::Nhwc => crate::conv::nhwc::to_nchw(&dims(0)),
                ConvLayout::Nchw | ConvLayout::NchwToNhwc => dims(0),
            };
            crate::conv::check(&desc, &x_nchw, &dims(1))?;
            if has_residual(c) {
                if refs.len() != 4 || refs[3].dtype != backplane_core::DataType::F32 {
                    return Err("FusedConv with a residual takes X, W, B and R".into());
                }
                if !refs[3].same_layout(&layer.outputs[0]) {
                    return Err("FusedConv residual must have the output's shape".into());
                }
            } else if refs.len() > 3 {
                return Err("FusedConv takes X, W and B".into());
            }
            if layout == ConvLayout::Nchw {
                Op::Conv(desc).infer(&refs[..refs.len().min(3)])
            } else {
                if x_nchw.len() != 4
                    || !crate::conv::nhwc::applies(
                        &desc,
                        x_nchw[1],
                        dims(1).first().copied().unwrap_or(0),
                    )
                {
                    return Err(
                        "FusedConv runs channels-last in 2-D, one group or depthwise".into(),
                    );
                }
                let x = TensorInfo::new(refs[0].dtype, x_nchw);
                let mut with_x = vec![&x];
                with_x.extend(&refs[1..refs.len().min(3)]);
                Op::Conv(desc).infer(&with_x).map(|mut o| {
                    for i in &mut o {
                        i.shape = crate::conv::nhwc::to_nhwc(i.shape.dims()).into();
                    }
                    o
                })
            }
        }
        FUSED_MATMUL => Ok(check_fused_matmul(c, &refs, &layer.outputs[0])?),
        FUSED_GEMM => Op::Gemm(decode_gemm(c)?).infer(&refs),
        FUSED_ADD_LAYER_NORM => {
            let (axis, epsilon) = decode_layer_norm(c)?;
            match refs.as_slice() {
                [a, b, params @ ..] if a.same_layout(b) && !params.is_empty() => {
                    let mut norm_in = vec![*a];
                    norm_in.extend(params);
                    // Only the normalized output (not the optional mean and deviation).
                    Op::LayerNormalization { axis, epsilon }
                        .infer(&norm_in)
                        .map(|mut o| {
                            o.truncate(1);
                            o
                        })
                }
                _ => return Err("FusedAddLayerNorm takes A, B of one shape, scale, bias?".into()),
            }
        }
        other => return Err(format!("CpuAcc has no custom operator '{other}'")),
    }
    .map_err(|e| e.to_string())?;
    if layer
        .inputs
        .iter()
        .any(|i| i.dtype != backplane_core::DataType::F32)
    {
        return Err(format!("{} runs on f32 only", c.op_type));
    }
    if inferred.len() != 1 || !inferred[0].same_layout(&layer.outputs[0]) {
        return Err(format!("{} output description differs", c.op_type));
    }
    Ok(())
}

/// An activation layer CpuAcc can fuse.
fn fusable_act(op: &Op) -> Option<Activation> {
    match op {
        Op::Unary(u) => Some(Activation::from_unary(*u)),
        Op::Math(m) => Activation::from_math(*m),
        _ => None,
    }
}

struct Graph<'a> {
    view: &'a SubgraphView<'a>,
    inside: BTreeSet<LayerId>,
    consumers: Vec<Vec<(LayerId, usize)>>,
    used: BTreeSet<LayerId>,
}

impl Graph<'_> {
    /// The only consumer of `t`, if it has one, is inside, unused, and `t` is not an output.
    fn sole_consumer(&self, t: TensorId) -> Option<LayerId> {
        let net = self.view.network();
        if net.outputs().contains(&t) {
            return None;
        }
        match self.consumers.get(t.0).map(Vec::as_slice) {
            Some([(l, _)]) if self.inside.contains(l) && !self.used.contains(l) => Some(*l),
            _ => None,
        }
    }

    fn constant(&self, t: TensorId) -> Option<&Arc<Tensor>> {
        self.view.network().tensor(t).constant()
    }

    fn supported(&self, id: LayerId) -> bool {
        crate::support::check(&self.view.layer_desc(id)).is_ok()
    }
}

/// Optimize a subgraph assigned to CpuAcc.
pub fn optimize(view: &SubgraphView<'_>) -> OptimizationViews {
    let net = view.network();
    let mut g = Graph {
        view,
        inside: view.layers().iter().copied().collect(),
        consumers: net.consumers(),
        used: BTreeSet::new(),
    };
    let mut subs = Vec::new();
    for &id in view.layers() {
        if g.used.contains(&id) || !g.supported(id) {
            continue;
        }
        let sub = match &net.layer(id).op {
            Op::Conv(desc) => fuse_conv(&g, id, desc),
            Op::MatMul => fuse_matmul(&g, id),
            Op::Gemm(desc) => fuse_gemm(&g, id, *desc),
            Op::Binary(backplane_core::ops::BinaryOp::Add) => fuse_add_layer_norm(&g, id),
            _ => None,
        };
        if let Some(s) = sub {
            g.used.extend(s.replaced.iter().copied());
            subs.push(s);
        }
    }
    // Regions may take in layers fusion left alone (a pooling after the last convolution).
    let subs = crate::layout::channels_last(view, subs);
    let used: BTreeSet<LayerId> = subs
        .iter()
        .flat_map(|s| s.replaced.iter().copied())
        .collect();
    let untouched: Vec<LayerId> = view
        .layers()
        .iter()
        .copied()
        .filter(|l| !used.contains(l))
        .collect();
    OptimizationViews {
        substitutions: subs,
        failed: Vec::new(),
        untouched: if untouched.is_empty() {
            Vec::new()
        } else {
            vec![untouched]
        },
    }
}

fn single_output(g: &Graph<'_>, id: LayerId) -> Option<TensorId> {
    match g.view.network().layer(id).outputs.as_slice() {
        [t] => Some(*t),
        _ => None,
    }
}

/// Follow an activation after `t`, if there is one.
fn follow_act(g: &Graph<'_>, t: TensorId) -> Option<(LayerId, Activation, TensorId)> {
    let next = g.sole_consumer(t)?;
    let act = fusable_act(&g.view.network().layer(next).op)?;
    if !g.supported(next) {
        return None;
    }
    Some((next, act, single_output(g, next)?))
}

/// Follow a residual addition after `t`: `Add(t, r)` or `Add(r, t)` with `r` of `t`'s type
/// and shape (no broadcasting). Returns the Add, `r` and the sum.
fn follow_residual(g: &Graph<'_>, t: TensorId) -> Option<(LayerId, TensorId, TensorId)> {
    let net = g.view.network();
    let next = g.sole_consumer(t)?;
    let layer = net.layer(next);
    if layer.op != Op::Binary(backplane_core::ops::BinaryOp::Add) || !g.supported(next) {
        return None;
    }
    let r = match layer.inputs.as_slice() {
        [a, r] if *a == t && *r != t => *r,
        [r, a] if *a == t && *r != t => *r,
        _ => return None,
    };
    let (ti, ri) = (&net.tensor(t).info, &net.tensor(r).info);
    if !ri.same_layout(ti) || ri.dtype != backplane_core::DataType::F32 {
        return None;
    }
    Some((next, r, single_output(g, next)?))
}

/// The scalar value of a constant tensor with one element.
fn scalar(g: &Graph<'_>, t: TensorId) -> Option<f32> {
    match g.constant(t)?.as_slice::<f32>().ok()? {
        [v] => Some(*v),
        _ => None,
    }
}

/// Layer `id` is `op(t, c)` or `op(c, t)` (for commutative `op`) with a scalar constant `c`.
fn binary_with_scalar(
    g: &Graph<'_>,
    id: LayerId,
    op: backplane_core::ops::BinaryOp,
    t: TensorId,
) -> Option<f32> {
    let layer = g.view.network().layer(id);
    if layer.op != Op::Binary(op) || !g.supported(id) {
        return None;
    }
    match layer.inputs.as_slice() {
        [a, c] if *a == t => scalar(g, *c),
        [c, a] if *a == t && op != backplane_core::ops::BinaryOp::Div => scalar(g, *c),
        _ => None,
    }
}

fn near(v: f32, want: f32) -> bool {
    (v - want).abs() <= 1e-6 * want.abs().max(1.0)
}

/// The exporters' GELU subgraph on `h`: `0.5·h·(1 + erf(h/√2))` in either multiplication
/// order. Returns its layers and output.
fn match_gelu(g: &Graph<'_>, h: TensorId) -> Option<(Vec<LayerId>, TensorId)> {
    use backplane_core::ops::BinaryOp::{Add, Div, Mul};
    let net = g.view.network();
    if net.outputs().contains(&h) {
        return None;
    }
    let users: Vec<LayerId> = g.consumers.get(h.0)?.iter().map(|(l, _)| *l).collect();
    if users.len() != 2
        || users
            .iter()
            .any(|l| !g.inside.contains(l) || g.used.contains(l))
    {
        return None;
    }
    let is_scale = |id: LayerId| {
        binary_with_scalar(g, id, Div, h).is_some_and(|v| near(v, std::f32::consts::SQRT_2))
            || binary_with_scalar(g, id, Mul, h)
                .is_some_and(|v| near(v, std::f32::consts::FRAC_1_SQRT_2))
    };
    let (scale, other) = if is_scale(users[0]) {
        (users[0], users[1])
    } else if is_scale(users[1]) {
        (users[1], users[0])
    } else {
        return None;
    };
    let erf = g.sole_consumer(single_output(g, scale)?)?;
    if net.layer(erf).op != Op::Unary(backplane_core::ops::UnaryOp::Erf) || !g.supported(erf) {
        return None;
    }
    let erf_out = single_output(g, erf)?;
    let plus = g.sole_consumer(erf_out)?;
    if !binary_with_scalar(g, plus, Add, erf_out).is_some_and(|v| near(v, 1.0)) {
        return None;
    }
    let plus_out = single_output(g, plus)?;
    let other_out = single_output(g, other)?;
    let is_mul_of = |id: LayerId, a: TensorId, b: TensorId| {
        let l = net.layer(id);
        l.op == Op::Binary(Mul)
            && g.supported(id)
            && (l.inputs.as_slice() == [a, b] || l.inputs.as_slice() == [b, a])
    };
    let last = if binary_with_scalar(g, other, Mul, h).is_some_and(|v| near(v, 0.5)) {
        // (0.5·h)·(1 + erf)
        let last = g.sole_consumer(other_out)?;
        (g.sole_consumer(plus_out) == Some(last) && is_mul_of(last, other_out, plus_out))
            .then_some(last)?
    } else if is_mul_of(other, h, plus_out) && g.sole_consumer(plus_out) == Some(other) {
        // (h·(1 + erf))·0.5
        let last = g.sole_consumer(other_out)?;
        binary_with_scalar(g, last, Mul, other_out)
            .is_some_and(|v| near(v, 0.5))
            .then_some(last)?
    } else {
        return None;
    };
    Some((vec![scale, erf, plus, other, last], single_output(g, last)?))
}

fn names(g: &Graph<'_>, ids: &[LayerId]) -> String {
    ids.iter()
        .map(|&l| g.view.network().layer(l).name.as_str())
        .collect::<Vec<_>>()
        .join("+")
}

fn fuse_conv(g: &Graph<'_>, id: LayerId, desc: &ConvDesc) -> Option<Substitution> {
    let net = g.view.network();
    let layer = net.layer(id);
    let mut out = single_output(g, id)?;
    let mut replaced = vec![id];
    let mut weights: Option<(Tensor, Tensor)> = None;
    // BatchNormalization with constant parameters, folded into the weights.
    if let Some(next) = g.sole_consumer(out) {
        let bn = net.layer(next);
        if let Op::BatchNormalization { epsilon } = bn.op {
            let params: Option<Vec<&Arc<Tensor>>> =
                bn.inputs[1..].iter().map(|&t| g.constant(t)).collect();
            let w = layer.inputs.get(1).and_then(|&t| g.constant(t));
            if let (Some(p), Some(w), true) = (params, w, g.supported(next)) {
                let b = layer.inputs.get(2).and_then(|&t| g.constant(t));
                if let Some(folded) = fold_bn(w, b.map(|a| &**a), &p, epsilon) {
                    weights = Some(folded);
                    replaced.push(next);
                    out = single_output(g, next)?;
                }
            }
        }
    }
    let mut act = Activation::None;
    let mut residual = None;
    if let Some((next, a, t)) = follow_act(g, out) {
        act = a;
        replaced.push(next);
        out = t;
    } else if let Some((add, r, t)) = follow_residual(g, out) {
        residual = Some(r);
        replaced.push(add);
        out = t;
        if let Some((next, a, t)) = follow_act(g, out) {
            act = a;
            replaced.push(next);
            out = t;
        }
    }
    if replaced.len() == 1 {
        return None;
    }
    let mut inputs = match weights {
        Some((w, b)) => vec![
            ValueRef::Existing(layer.inputs[0]),
            ValueRef::NewConstant(Arc::new(w)),
            ValueRef::NewConstant(Arc::new(b)),
        ],
        None => layer
            .inputs
            .iter()
            .map(|&t| ValueRef::Existing(t))
            .collect(),
    };
    if let Some(r) = residual {
        // The residual is input 3, so a convolution without a bias gets a zero one.
        if inputs.len() == 2 {
            let m = *net.tensor(layer.inputs[1]).info.shape.dims().first()?;
            let zeros = Tensor::from_vec(vec![m], vec![0f32; m]).ok()?;
            inputs.push(ValueRef::NewConstant(Arc::new(zeros)));
        }
        inputs.push(ValueRef::Existing(r));
    }
    let info = net.tensor(out).info.clone();
    Some(Substitution {
        replacement: vec![ReplacementLayer {
            name: names(g, &replaced),
            op: conv_op(desc, act, residual.is_some(), vec![info]),
            inputs,
            outputs: vec![Some(out)],
        }],
        replaced,
    })
}

/// Fold `y = bn(conv(x, w) + b)` into new weights and bias.
fn fold_bn(
    w: &Tensor,
    b: Option<&Tensor>,
    params: &[&Arc<Tensor>],
    eps: f32,
) -> Option<(Tensor, Tensor)> {
    let [scale, bias, mean, var] = params else {
        return None;
    };
    let (mul, add) = bn_affine(
        scale.as_slice().ok()?,
        bias.as_slice().ok()?,
        mean.as_slice().ok()?,
        var.as_slice().ok()?,
        eps,
    );
    let wv = w.as_slice::<f32>().ok()?;
    let m = *w.shape().dims().first()?;
    if mul.len() != m || m == 0 {
        return None;
    }
    let per = wv.len() / m;
    let new_w: Vec<f32> = wv
        .iter()
        .enumerate()
        .map(|(i, &v)| v * mul[i / per])
        .collect();
    let old_b: Vec<f32> = match b {
        Some(t) => t.as_slice::<f32>().ok()?.to_vec(),
        None => vec![0.0; m],
    };
    let new_b: Vec<f32> = (0..m).map(|i| old_b[i].mul_add(mul[i], add[i])).collect();
    Some((
        Tensor::from_vec(w.shape().clone(), new_w).ok()?,
        Tensor::from_vec(vec![m], new_b).ok()?,
    ))
}

/// A layer that keeps its input's bytes and changes only the dims.
fn is_reshape(op: &Op) -> bool {
    matches!(
        op,
        Op::Reshape { .. } | Op::Flatten { .. } | Op::Squeeze { .. } | Op::Unsqueeze { .. }
    )
}

/// The layer computing `t`, when `t` is used by `user` alone, is not a network output, and
/// the layer is inside, unused and supported.
fn sole_producer(g: &Graph<'_>, t: TensorId, user: LayerId) -> Option<LayerId> {
    let net = g.view.network();
    let TensorKind::Produced { layer, .. } = net.tensor(t).kind else {
        return None;
    };
    let only_user = matches!(g.consumers.get(t.0).map(Vec::as_slice), Some([(l, _)]) if *l == user);
    (only_user
        && !net.outputs().contains(&t)
        && g.inside.contains(&layer)
        && !g.used.contains(&layer)
        && g.supported(layer))
    .then_some(layer)
}

/// Operand `t` of MatMul `matmul` read through the `[Reshape →] Transpose…` chain that
/// computes it: the tensor to read instead, how, and the chain's layers. `None` when no
/// Transpose computes `t`.
fn fold_operand(
    g: &Graph<'_>,
    t: TensorId,
    matmul: LayerId,
) -> Option<(TensorId, StridedView, Vec<LayerId>)> {
    let net = g.view.network();
    let (mut cur, mut user) = (t, matmul);
    let (mut perms, mut layers) = (Vec::new(), Vec::new());
    while let Some(p) = sole_producer(g, cur, user) {
        let l = net.layer(p);
        match (&l.op, l.inputs.as_slice()) {
            (Op::Transpose { perm }, [x]) => {
                perms.push(perm.clone());
                layers.push(p);
                (cur, user) = (*x, p);
            }
            _ => break,
        }
    }
    if perms.is_empty() {
        return None;
    }
    // Strides over the bytes of the first Transpose's input, which a Reshape before it
    // shares with its own input.
    let mut view = StridedView::row_major(net.tensor(cur).info.shape.dims());
    if let Some(p) = sole_producer(g, cur, user) {
        let l = net.layer(p);
        if let (true, Some(&x)) = (is_reshape(&l.op), l.inputs.first()) {
            layers.push(p);
            cur = x;
        }
    }
    for perm in perms.iter().rev() {
        view = view.transposed(perm)?;
    }
    Some((cur, view, layers))
}

/// The result `t` of a MatMul written through the `Transpose [→ Reshape]` after it, when the
/// Transpose keeps the last axis last: the view of the final tensor the result is written
/// through, the layers, and the final tensor.
fn fold_result(g: &Graph<'_>, t: TensorId) -> Option<(StridedView, Vec<LayerId>, TensorId)> {
    let net = g.view.network();
    let next = g.sole_consumer(t)?;
    let Op::Transpose { perm } = &net.layer(next).op else {
        return None;
    };
    let dims = net.tensor(t).info.shape.dims();
    let r = dims.len();
    if !g.supported(next) || perm.len() != r || perm.last().copied() != r.checked_sub(1) {
        return None;
    }
    // Axis perm[j] of the result is axis j of the transposed tensor.
    let permuted = StridedView::row_major(
        &perm
            .iter()
            .map(|&p| dims.get(p).copied())
            .collect::<Option<Vec<_>>>()?,
    );
    let mut strides = vec![0; r];
    for (j, &p) in perm.iter().enumerate() {
        *strides.get_mut(p)? = permuted.strides[j];
    }
    let view = StridedView {
        dims: dims.to_vec(),
        strides,
    };
    let mut out = single_output(g, next)?;
    let mut layers = vec![next];
    if let Some(after) = g.sole_consumer(out) {
        if is_reshape(&net.layer(after).op) && g.supported(after) {
            layers.push(after);
            out = single_output(g, after)?;
        }
    }
    view.fills(net.tensor(out).info.shape.elements())
        .then_some((view, layers, out))
}

fn fuse_matmul(g: &Graph<'_>, id: LayerId) -> Option<Substitution> {
    use backplane_core::ops::BinaryOp::{Add, Div, Mul};
    let net = g.view.network();
    let layer = net.layer(id);
    let mut out = single_output(g, id)?;
    let out_info = net.tensor(out).info.clone();
    let n = *out_info.shape.dims().last()?;
    let (mut a, mut b) = (*layer.inputs.first()?, *layer.inputs.get(1)?);
    if net.tensor(b).info.shape.rank() < 2 || out_info.shape.rank() < 2 {
        return None;
    }
    let mut views = MatMulViews::default();
    // The operands' chains come first in the fused name, in network order.
    let mut replaced = Vec::new();
    if let Some((src, view, layers)) = fold_operand(g, a, id) {
        (a, views.a) = (src, Some(view));
        replaced.extend(layers.iter().rev());
    }
    if let Some((src, view, layers)) = fold_operand(g, b, id) {
        (b, views.b) = (src, Some(view));
        replaced.extend(layers.iter().rev());
    }
    replaced.push(id);
    // A scale straight after the product (attention's 1/√d).
    if let Some(next) = g.sole_consumer(out) {
        let scale = binary_with_scalar(g, next, Mul, out).or_else(|| {
            binary_with_scalar(g, next, Div, out)
                .filter(|&v| v != 0.0)
                .map(|v| 1.0 / v)
        });
        let next_out = single_output(g, next);
        if let (Some(s), Some(t)) = (scale, next_out) {
            if net.tensor(t).info.same_layout(&out_info) {
                views.alpha = s;
                replaced.push(next);
                out = t;
            }
        }
    }
    let mut bias: Option<Tensor> = None;
    if let Some(next) = g.sole_consumer(out) {
        let add = net.layer(next);
        if add.op == Op::Binary(Add) && g.supported(next) {
            let other = add.inputs.iter().copied().find(|&t| t != out);
            let c = other.and_then(|t| g.constant(t));
            let add_out = single_output(g, next)?;
            if let Some(c) = c {
                let cd = c.shape().dims();
                let row = cd.last() == Some(&n) && cd.iter().rev().skip(1).all(|&d| d == 1);
                if row && net.tensor(add_out).info.same_layout(&out_info) {
                    bias = Tensor::from_vec(vec![n], c.as_slice::<f32>().ok()?.to_vec()).ok();
                    replaced.push(next);
                    out = add_out;
                }
            }
        }
    }
    let mut act = Activation::None;
    if let Some((layers, t)) = match_gelu(g, out) {
        act = Activation::Gelu {
            tanh_approximation: false,
        };
        replaced.extend(layers);
        out = t;
    } else if let Some((next, a, t)) = follow_act(g, out) {
        act = a;
        replaced.push(next);
        out = t;
    }
    if let Some((view, layers, t)) = fold_result(g, out) {
        views.y = Some(view);
        replaced.extend(layers);
        out = t;
    }
    if replaced.len() == 1 {
        return None;
    }
    let mut inputs = vec![ValueRef::Existing(a), ValueRef::Existing(b)];
    if let Some(b) = bias {
        inputs.push(ValueRef::NewConstant(Arc::new(b)));
    }
    let mut attributes = act_attrs(act);
    attributes.extend(matmul_view_attrs(&views));
    Some(Substitution {
        replacement: vec![ReplacementLayer {
            name: names(g, &replaced),
            op: Op::Custom(CustomOp {
                domain: CPU_ACC_ID.into(),
                op_type: FUSED_MATMUL.into(),
                attributes,
                outputs: vec![net.tensor(out).info.clone()],
            }),
            inputs,
            outputs: vec![Some(out)],
        }],
        replaced,
    })
}

fn fuse_gemm(g: &Graph<'_>, id: LayerId, desc: GemmDesc) -> Option<Substitution> {
    let net = g.view.network();
    let layer = net.layer(id);
    let out = single_output(g, id)?;
    let (next, act, t) = follow_act(g, out)?;
    let mut attributes = vec![
        ("alpha".to_string(), AttrValue::Float(desc.alpha)),
        ("beta".to_string(), AttrValue::Float(desc.beta)),
        (
            "trans_a".to_string(),
            AttrValue::Int(i64::from(desc.trans_a)),
        ),
        (
            "trans_b".to_string(),
            AttrValue::Int(i64::from(desc.trans_b)),
        ),
    ];
    attributes.extend(act_attrs(act));
    let replaced = vec![id, next];
    Some(Substitution {
        replacement: vec![ReplacementLayer {
            name: names(g, &replaced),
            op: Op::Custom(CustomOp {
                domain: CPU_ACC_ID.into(),
                op_type: FUSED_GEMM.into(),
                attributes,
                outputs: vec![net.tensor(t).info.clone()],
            }),
            inputs: layer
                .inputs
                .iter()
                .map(|&x| ValueRef::Existing(x))
                .collect(),
            outputs: vec![Some(t)],
        }],
        replaced,
    })
}

/// `Add(a, b) → LayerNormalization` with `a` and `b` of one shape and the sum used by the
/// normalization alone.
fn fuse_add_layer_norm(g: &Graph<'_>, id: LayerId) -> Option<Substitution> {
    let net = g.view.network();
    let add = net.layer(id);
    let [a, b] = add.inputs.as_slice() else {
        return None;
    };
    let sum = single_output(g, id)?;
    let info = |t: TensorId| &net.tensor(t).info;
    if !info(*a).same_layout(info(*b)) || !info(*a).same_layout(info(sum)) {
        return None;
    }
    let norm = g.sole_consumer(sum)?;
    let layer = net.layer(norm);
    let Op::LayerNormalization { axis, epsilon } = layer.op else {
        return None;
    };
    let (out, params) = match (layer.outputs.as_slice(), layer.inputs.split_first()) {
        ([out], Some((&x, params))) if x == sum && !params.contains(&sum) => (*out, params),
        _ => return None,
    };
    if !g.supported(norm) {
        return None;
    }
    let mut inputs = vec![ValueRef::Existing(*a), ValueRef::Existing(*b)];
    inputs.extend(params.iter().map(|&t| ValueRef::Existing(t)));
    let replaced = vec![id, norm];
    Some(Substitution {
        replacement: vec![ReplacementLayer {
            name: names(g, &replaced),
            op: Op::Custom(CustomOp {
                domain: CPU_ACC_ID.into(),
                op_type: FUSED_ADD_LAYER_NORM.into(),
                attributes: vec![
                    ("axis".into(), AttrValue::Int(axis)),
                    ("epsilon".into(), AttrValue::Float(epsilon)),
                ],
                outputs: vec![info(out).clone()],
            }),
            inputs,
            outputs: vec![Some(out)],
        }],
        replaced,
    })
}
