//! Operators of the `ai.onnx.ml` domain (Binarizer, ArrayFeatureExtractor, TreeEnsemble), and
//! TfIdfVectorizer of the default domain.

use super::{to_usize, Dst, Lowering, NodeCx, Src, Step, Tx, TxError};
use crate::tensor::Decoded;
use backplane_core::ops::{
    BinaryExtOp, TfIdfDesc, TfIdfMode, TreeAggregate, TreeBranch, TreeEnsembleDesc, TreeLeaf,
    TreeNode, TreeNodeMode, TreePostTransform,
};
use backplane_core::{DataType, Op, Tensor};
use std::sync::Arc;

/// Largest n-gram length, skip count or output slot accepted.
const MAX_NGRAM_PARAM: i64 = 1 << 24;

/// Translate a node of the `ai.onnx.ml` domain (its opset is the domain's).
pub(super) fn translate(cx: &NodeCx<'_>) -> Tx<Lowering> {
    match cx.op_type() {
        "Binarizer" => binarizer(cx),
        "ArrayFeatureExtractor" => array_feature_extractor(cx),
        "TreeEnsemble" => tree_ensemble(cx),
        other => Err(TxError::Unsupported(format!(
            "{other} of the ai.onnx.ml domain is not supported"
        ))),
    }
}

/// Binarizer: 1 where X > threshold, else 0, in X's type (f32, f64, i32, i64). Computed as
/// Cast to f64, Greater, Cast back.
fn binarizer(cx: &NodeCx<'_>) -> Tx<Lowering> {
    let x = cx.info(0)?;
    if !matches!(
        x.dtype,
        DataType::F32 | DataType::F64 | DataType::I32 | DataType::I64
    ) {
        return Err(TxError::Unsupported(format!(
            "Binarizer of {} is not supported",
            x.dtype
        )));
    }
    let threshold = f64::from(cx.attr(cx.attrs.float_or("threshold", 0.0))?);
    Ok(Lowering::Steps(vec![
        Step {
            op: Op::Cast {
                to: DataType::F64,
                saturate: true,
            },
            inputs: vec![Src::Input(0)],
            outputs: vec![Dst::Temp(0)],
            suffix: Some("widen".into()),
        },
        Step {
            op: Op::BinaryExt(BinaryExtOp::Greater),
            inputs: vec![
                Src::Temp(0),
                Src::Const(Arc::new(Tensor::scalar(threshold))),
            ],
            outputs: vec![Dst::Temp(1)],
            suffix: Some("above".into()),
        },
        Step {
            op: Op::Cast {
                to: x.dtype,
                saturate: true,
            },
            inputs: vec![Src::Temp(1)],
            outputs: vec![Dst::Output(0)],
            suffix: None,
        },
    ]))
}

/// ArrayFeatureExtractor: the entries of the last axis of X at the (flattened, i64) indices:
/// X [..., F] → [..., K]; a 1-D X gives [1, K] (as ONNX Runtime does). A Gather on the last
/// axis, so an index out of range is an error at execution.
fn array_feature_extractor(cx: &NodeCx<'_>) -> Tx<Lowering> {
    let x = cx.info(0)?;
    let idx = cx.info(1)?;
    if idx.dtype != DataType::I64 {
        return Err(cx.invalid(format!("Y must be an i64 tensor, got {}", idx.dtype)));
    }
    let rank = x.shape.rank();
    if rank == 0 {
        return Err(cx.invalid("X must have rank 1 or more"));
    }
    let k = idx.shape.elements();
    let mut out_shape = x.shape.dims()[..rank - 1].to_vec();
    if rank == 1 {
        out_shape.push(1);
    }
    out_shape.push(k);
    Ok(Lowering::Steps(vec![
        Step {
            op: Op::Reshape { shape: vec![k] },
            inputs: vec![Src::Input(1)],
            outputs: vec![Dst::Temp(0)],
            suffix: Some("indices".into()),
        },
        Step {
            op: Op::Gather {
                axis: rank as i64 - 1,
            },
            inputs: vec![Src::Input(0), Src::Temp(0)],
            outputs: vec![Dst::Temp(1)],
            suffix: Some("gather".into()),
        },
        Step {
            op: Op::Reshape { shape: out_shape },
            inputs: vec![Src::Temp(1)],
            outputs: vec![Dst::Output(0)],
            suffix: None,
        },
    ]))
}

/// TfIdfVectorizer (opset 9 on) over i32/i64 tokens; string pools are not supported.
pub(super) fn tfidf_vectorizer(cx: &NodeCx<'_>) -> Tx<Lowering> {
    cx.require_opset(9)?;
    let x = cx.info(0)?;
    if !matches!(x.dtype, DataType::I32 | DataType::I64) {
        return Err(TxError::Unsupported(format!(
            "TfIdfVectorizer of {} is not supported",
            x.dtype
        )));
    }
    if cx
        .attrs
        .get("pool_strings")
        .is_some_and(|a| !a.strings.is_empty())
    {
        return Err(TxError::Unsupported(
            "TfIdfVectorizer with pool_strings is not supported".into(),
        ));
    }
    let size = |name: &str| -> Tx<usize> {
        let v = cx
            .attr(cx.attrs.int(name))?
            .ok_or_else(|| cx.invalid(format!("the {name} attribute is required")))?;
        to_usize(cx, name, v, MAX_NGRAM_PARAM)
    };
    let sizes = |name: &str| -> Tx<Vec<usize>> {
        cx.attr(cx.attrs.ints(name))?
            .unwrap_or_default()
            .into_iter()
            .map(|v| to_usize(cx, name, v, MAX_NGRAM_PARAM))
            .collect()
    };
    let mode_name = cx
        .attr(cx.attrs.string("mode"))?
        .ok_or_else(|| cx.invalid("the mode attribute is required"))?;
    let desc = TfIdfDesc {
        mode: TfIdfMode::from_name(&mode_name)
            .ok_or_else(|| cx.invalid(format!("unknown mode '{mode_name}'")))?,
        min_gram_length: size("min_gram_length")?,
        max_gram_length: size("max_gram_length")?,
        max_skip_count: size("max_skip_count")?,
        pool: cx.attr(cx.attrs.ints("pool_int64s"))?.unwrap_or_default(),
        ngram_counts: sizes("ngram_counts")?,
        ngram_indexes: sizes("ngram_indexes")?,
        weights: cx.attr(cx.attrs.floats("weights"))?.unwrap_or_default(),
    };
    // Shape inference validates the pool against the counts and indexes; bound the rows.
    let rows = match x.shape.dims() {
        [n, _] => *n,
        _ => 1,
    };
    crate::tensor::check_size(
        cx.name,
        &[rows, desc.output_size()],
        4,
        cx.imp.max_tensor_bytes(),
    )?;
    Ok(Lowering::single(
        Op::TfIdfVectorizer(desc),
        vec![Src::Input(0)],
    ))
}

/// The values of a tensor attribute as f64 (`None` when absent).
fn tensor_attr(cx: &NodeCx<'_>, name: &str) -> Tx<Option<(DataType, Vec<f64>)>> {
    let Some(tp) = cx.attrs.get(name).and_then(|a| a.t.as_ref()) else {
        return Ok(None);
    };
    match cx.imp.decode_attr_tensor(tp, name)? {
        Decoded::Tensor(t) => Ok(Some((t.dtype(), t.to_f64_vec()))),
        Decoded::Unsupported { reason, .. } => Err(TxError::Unsupported(format!(
            "{name}: {reason}, which backplane does not support"
        ))),
    }
}

/// TreeEnsemble (ai.onnx.ml opset 5): the parallel `nodes_*` and `leaf_*` lists become one
/// node and leaf list; every reference is checked by shape inference.
fn tree_ensemble(cx: &NodeCx<'_>) -> Tx<Lowering> {
    cx.require_opset(5)?;
    let ints = |name: &str| -> Tx<Vec<i64>> {
        cx.attr(cx.attrs.ints(name))?
            .ok_or_else(|| cx.invalid(format!("the {name} attribute is required")))
    };
    let index = |name: &str, v: i64| to_usize(cx, name, v, i64::from(u32::MAX));
    let required = |name: &str| -> Tx<(DataType, Vec<f64>)> {
        tensor_attr(cx, name)?
            .ok_or_else(|| cx.invalid(format!("the {name} attribute is required")))
    };
    let x = cx.info(0)?;
    let (split_type, splits) = required("nodes_splits")?;
    if split_type != x.dtype {
        return Err(cx.invalid(format!("nodes_splits is {split_type} but X is {}", x.dtype)));
    }
    let (_, modes) = required("nodes_modes")?;
    let features = ints("nodes_featureids")?;
    let (t_ids, f_ids) = (ints("nodes_truenodeids")?, ints("nodes_falsenodeids")?);
    let (t_leaf, f_leaf) = (ints("nodes_trueleafs")?, ints("nodes_falseleafs")?);
    let n = splits.len();
    let missing = cx
        .attr(cx.attrs.ints("nodes_missing_value_tracks_true"))?
        .unwrap_or_else(|| vec![0; n]);
    if [modes.len(), features.len(), t_ids.len(), f_ids.len()]
        .into_iter()
        .chain([t_leaf.len(), f_leaf.len(), missing.len()])
        .any(|len| len != n)
    {
        return Err(cx.invalid("the nodes_* attributes differ in length"));
    }
    // The sets of the BRANCH_MEMBER nodes, in node order, each ended by a NaN.
    let members = tensor_attr(cx, "membership_values")?.map_or_else(Vec::new, |(_, v)| v);
    let mut sets = members.split(|v| v.is_nan());
    let mut nodes = Vec::with_capacity(n);
    for i in 0..n {
        let mode = TreeNodeMode::from_code(modes[i] as i64)
            .ok_or_else(|| cx.invalid(format!("unknown node mode {}", modes[i])))?;
        let members = if mode == TreeNodeMode::Member {
            sets.next()
                .ok_or_else(|| cx.invalid("membership_values has too few sets"))?
                .to_vec()
        } else {
            Vec::new()
        };
        let branch = |leaf: i64, id: i64, name: &str| -> Tx<TreeBranch> {
            let id = index(name, id)?;
            Ok(if leaf != 0 {
                TreeBranch::Leaf(id)
            } else {
                TreeBranch::Node(id)
            })
        };
        nodes.push(TreeNode {
            feature: index("nodes_featureids", features[i])?,
            mode,
            split: splits[i],
            members,
            if_true: branch(t_leaf[i], t_ids[i], "nodes_truenodeids")?,
            if_false: branch(f_leaf[i], f_ids[i], "nodes_falsenodeids")?,
            missing_tracks_true: missing[i] != 0,
        });
    }
    let targets = ints("leaf_targetids")?;
    let (_, weights) = required("leaf_weights")?;
    if targets.len() != weights.len() {
        return Err(cx.invalid("leaf_targetids and leaf_weights differ in length"));
    }
    let leaves = targets
        .iter()
        .zip(&weights)
        .map(|(&t, &weight)| {
            Ok(TreeLeaf {
                target: index("leaf_targetids", t)?,
                weight,
            })
        })
        .collect::<Tx<Vec<_>>>()?;
    let n_targets = match cx.attr(cx.attrs.int("n_targets"))? {
        Some(v) => index("n_targets", v)?,
        None => leaves.iter().map(|l| l.target + 1).max().unwrap_or(0),
    };
    let roots = ints("tree_roots")?
        .into_iter()
        .map(|r| index("tree_roots", r))
        .collect::<Tx<Vec<_>>>()?;
    let aggregate = match cx.attr(cx.attrs.int_or("aggregate_function", 1))? {
        0 => TreeAggregate::Average,
        1 => TreeAggregate::Sum,
        2 => TreeAggregate::Min,
        3 => TreeAggregate::Max,
        other => return Err(cx.invalid(format!("unknown aggregate_function {other}"))),
    };
    let post_transform = match cx.attr(cx.attrs.int_or("post_transform", 0))? {
        0 => TreePostTransform::None,
        1 => TreePostTransform::Softmax,
        2 => TreePostTransform::Logistic,
        3 => TreePostTransform::SoftmaxZero,
        4 => {
            return Err(TxError::Unsupported(
                "TreeEnsemble post_transform PROBIT is not supported".into(),
            ))
        }
        other => return Err(cx.invalid(format!("unknown post_transform {other}"))),
    };
    Ok(Lowering::single(
        Op::TreeEnsemble(TreeEnsembleDesc {
            nodes,
            leaves,
            roots,
            targets: n_targets,
            aggregate,
            post_transform,
        }),
        vec![Src::Input(0)],
    ))
}
