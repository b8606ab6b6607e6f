//! Reading and writing the attribute form of the ops of `pooling`, `training` and `ml`
//! (see `attributes.rs` for the scheme): a typed reader with errors naming the op and
//! attribute, and the conversions those ops share.

use super::{
    AttrValue, AutoPad, MaxPoolIndicesDesc, MaxUnpoolDesc, OptimizerDesc, TfIdfDesc,
    TreeEnsembleDesc,
};
use crate::{CoreError, Op, Result};

/// Reads typed attributes of one op.
pub(crate) struct Reader<'a> {
    /// The op type, for messages.
    pub op_type: &'a str,
    /// The attributes.
    pub attrs: &'a [(String, AttrValue)],
}

impl Reader<'_> {
    fn get(&self, name: &str) -> Result<&AttrValue> {
        self.attrs
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v)
            .ok_or_else(|| self.err(format!("attribute '{name}' is missing")))
    }

    /// An error naming the op.
    pub(crate) fn err(&self, message: String) -> CoreError {
        CoreError::op("attributes", format!("{}: {message}", self.op_type))
    }

    /// An invalid-value error.
    pub(crate) fn bad(&self, name: &str, value: impl std::fmt::Display) -> CoreError {
        self.err(format!("attribute '{name}' has an invalid value '{value}'"))
    }

    fn wrong(&self, name: &str, kind: &str) -> CoreError {
        self.err(format!("attribute '{name}' must be {kind}"))
    }

    /// An integer.
    pub(crate) fn int(&self, name: &str) -> Result<i64> {
        match self.get(name)? {
            AttrValue::Int(v) => Ok(*v),
            _ => Err(self.wrong(name, "an integer")),
        }
    }

    /// 0 or 1.
    pub(crate) fn flag(&self, name: &str) -> Result<bool> {
        match self.int(name)? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(self.bad(name, v)),
        }
    }

    /// A float.
    pub(crate) fn float(&self, name: &str) -> Result<f32> {
        match self.get(name)? {
            AttrValue::Float(v) => Ok(*v),
            _ => Err(self.wrong(name, "a float")),
        }
    }

    /// A string.
    pub(crate) fn string(&self, name: &str) -> Result<&str> {
        match self.get(name)? {
            AttrValue::String(v) => Ok(v),
            _ => Err(self.wrong(name, "a string")),
        }
    }

    /// A list of integers.
    pub(crate) fn ints(&self, name: &str) -> Result<Vec<i64>> {
        match self.get(name)? {
            AttrValue::Ints(v) => Ok(v.clone()),
            _ => Err(self.wrong(name, "a list of integers")),
        }
    }

    /// A list of non-negative integers.
    pub(crate) fn usizes(&self, name: &str) -> Result<Vec<usize>> {
        self.ints(name)?
            .into_iter()
            .map(|v| usize::try_from(v).map_err(|_| self.bad(name, v)))
            .collect()
    }

    /// A list of floats.
    pub(crate) fn floats(&self, name: &str) -> Result<Vec<f32>> {
        match self.get(name)? {
            AttrValue::Floats(v) => Ok(v.clone()),
            _ => Err(self.wrong(name, "a list of floats")),
        }
    }

    /// A list of f64 values stored as their bit patterns (see [`doubles`]).
    pub(crate) fn doubles(&self, name: &str) -> Result<Vec<f64>> {
        Ok(self
            .ints(name)?
            .into_iter()
            .map(|b| f64::from_bits(b as u64))
            .collect())
    }
}

/// A list of f64 values as an integer list of their bit patterns (the attribute form has no
/// list of doubles).
pub(crate) fn doubles(v: &[f64]) -> AttrValue {
    AttrValue::Ints(v.iter().map(|x| x.to_bits() as i64).collect())
}

/// A list of sizes as integers.
pub(crate) fn usizes(v: &[usize]) -> AttrValue {
    AttrValue::Ints(v.iter().map(|&x| x as i64).collect())
}

/// The ONNX name of an `auto_pad` value.
pub(crate) fn auto_pad_name(a: AutoPad) -> &'static str {
    match a {
        AutoPad::NotSet => "NOTSET",
        AutoPad::SameUpper => "SAME_UPPER",
        AutoPad::SameLower => "SAME_LOWER",
        AutoPad::Valid => "VALID",
    }
}

/// The `auto_pad` value of an ONNX name.
pub(crate) fn auto_pad_from_name(r: &Reader<'_>, name: &str) -> Result<AutoPad> {
    Ok(match name {
        "NOTSET" => AutoPad::NotSet,
        "SAME_UPPER" => AutoPad::SameUpper,
        "SAME_LOWER" => AutoPad::SameLower,
        "VALID" => AutoPad::Valid,
        other => return Err(r.bad("auto_pad", other)),
    })
}

/// The attribute form of the ops of `pooling`, `training` and `ml`; `None` for other ops.
pub(crate) fn to_attributes(op: &Op) -> Option<(String, Vec<(String, AttrValue)>)> {
    Some(match op {
        // Not "MaxPool": that type name is the plain pooling's.
        Op::MaxPoolWithIndices(d) => ("MaxPoolWithIndices".into(), d.to_attrs()),
        Op::MaxUnpool(d) => ("MaxUnpool".into(), d.to_attrs()),
        Op::Optimizer(d) => (d.kind.name().into(), d.to_attrs()),
        Op::TfIdfVectorizer(d) => ("TfIdfVectorizer".into(), d.to_attrs()),
        Op::TreeEnsemble(d) => ("TreeEnsemble".into(), d.to_attrs()),
        _ => return None,
    })
}

/// The inverse of [`to_attributes`]; `None` for op types it does not know.
pub(crate) fn from_attributes(op_type: &str, attrs: &[(String, AttrValue)]) -> Result<Option<Op>> {
    let r = Reader { op_type, attrs };
    Ok(Some(match op_type {
        "MaxPoolWithIndices" => Op::MaxPoolWithIndices(MaxPoolIndicesDesc::from_attrs(&r)?),
        "MaxUnpool" => Op::MaxUnpool(MaxUnpoolDesc::from_attrs(&r)?),
        "Adagrad" | "Adam" | "Momentum" => Op::Optimizer(OptimizerDesc::from_attrs(&r)?),
        "TfIdfVectorizer" => Op::TfIdfVectorizer(TfIdfDesc::from_attrs(&r)?),
        "TreeEnsemble" => Op::TreeEnsemble(TreeEnsembleDesc::from_attrs(&r)?),
        _ => return Ok(None),
    }))
}

/// One example of each op [`to_attributes`] handles (for the round-trip test).
#[cfg(test)]
pub(crate) fn examples() -> Vec<Op> {
    use super::{
        OptimizerKind, PoolDesc, PoolKind, TfIdfMode, TreeAggregate, TreeBranch, TreeLeaf,
        TreeNode, TreeNodeMode, TreePostTransform, Window,
    };
    vec![
        Op::MaxPoolWithIndices(MaxPoolIndicesDesc {
            pool: PoolDesc {
                kind: PoolKind::Max,
                window: Window {
                    kernel: vec![2, 3],
                    strides: vec![1, 2],
                    dilations: vec![1, 1],
                    pads: vec![0, 1, 0, 1],
                    auto_pad: AutoPad::SameUpper,
                },
                ceil_mode: true,
                count_include_pad: false,
            },
            column_major: true,
        }),
        Op::MaxUnpool(MaxUnpoolDesc {
            unpooled: vec![1, 2, 4, 4],
            output: vec![1, 2, 5, 5],
        }),
        Op::Optimizer(OptimizerDesc {
            kind: OptimizerKind::Adagrad {
                decay_factor: 0.1,
                epsilon: 1e-6,
                norm_coefficient: 0.001,
            },
            tensors: 1,
        }),
        Op::Optimizer(OptimizerDesc {
            kind: OptimizerKind::Adam {
                alpha: 0.9,
                beta: 0.999,
                epsilon: 1e-7,
                norm_coefficient: 0.0,
                norm_coefficient_post: 0.01,
            },
            tensors: 2,
        }),
        Op::Optimizer(OptimizerDesc {
            kind: OptimizerKind::Momentum {
                alpha: 0.95,
                beta: 0.1,
                norm_coefficient: 0.0,
                nesterov: true,
            },
            tensors: 3,
        }),
        Op::TfIdfVectorizer(TfIdfDesc {
            mode: TfIdfMode::TfIdf,
            min_gram_length: 1,
            max_gram_length: 2,
            max_skip_count: 3,
            pool: vec![1, 2, 1, 2],
            ngram_counts: vec![0, 2],
            ngram_indexes: vec![0, 1, 2],
            weights: vec![0.5, 1.0, 2.0],
        }),
        Op::TreeEnsemble(TreeEnsembleDesc {
            nodes: vec![
                TreeNode {
                    feature: 1,
                    mode: TreeNodeMode::Gt,
                    split: 0.25,
                    members: vec![],
                    if_true: TreeBranch::Node(1),
                    if_false: TreeBranch::Leaf(0),
                    missing_tracks_true: true,
                },
                TreeNode {
                    feature: 0,
                    mode: TreeNodeMode::Member,
                    split: 0.0,
                    members: vec![1.0, 4.5],
                    if_true: TreeBranch::Leaf(1),
                    if_false: TreeBranch::Leaf(0),
                    missing_tracks_true: false,
                },
            ],
            leaves: vec![
                TreeLeaf {
                    target: 0,
                    weight: -2.5,
                },
                TreeLeaf {
                    target: 1,
                    weight: 0.125,
                },
            ],
            roots: vec![0],
            targets: 2,
            aggregate: TreeAggregate::Max,
            post_transform: TreePostTransform::SoftmaxZero,
        }),
    ]
}
