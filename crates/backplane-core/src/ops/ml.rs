//! Operators of the traditional machine-learning domains (TfIdfVectorizer of the default
//! domain, TreeEnsemble of `ai.onnx.ml`).

use super::{flat, AttrValue};
use crate::{CoreError, DataType, Result, TensorInfo};

/// How TfIdfVectorizer turns n-gram counts into outputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TfIdfMode {
    /// The count.
    Tf,
    /// The weight where the count is positive, else 0.
    Idf,
    /// The weight times the count.
    TfIdf,
}

impl TfIdfMode {
    /// The ONNX attribute value.
    pub fn name(self) -> &'static str {
        match self {
            TfIdfMode::Tf => "TF",
            TfIdfMode::Idf => "IDF",
            TfIdfMode::TfIdf => "TFIDF",
        }
    }

    /// The mode of an ONNX attribute value.
    pub fn from_name(name: &str) -> Option<Self> {
        [TfIdfMode::Tf, TfIdfMode::Idf, TfIdfMode::TfIdf]
            .into_iter()
            .find(|m| m.name() == name)
    }
}

/// TfIdfVectorizer over integer tokens: X `[C]` or [N, C] (i32 or i64) → Y `[O]` or [N, O] (f32),
/// where O = max(ngram_indexes) + 1.
///
/// For every row, every n-gram of `min_gram_length..=max_gram_length` tokens whose items are
/// `s + 1` positions apart, for each skip `s` in `0..=max_skip_count` (1-grams counted once),
/// that appears in the pool adds one to its output slot.
#[derive(Debug, Clone, PartialEq)]
pub struct TfIdfDesc {
    /// Output weighting.
    pub mode: TfIdfMode,
    /// Shortest n-gram counted.
    pub min_gram_length: usize,
    /// Longest n-gram counted.
    pub max_gram_length: usize,
    /// Most items skipped between two consecutive items of an n-gram.
    pub max_skip_count: usize,
    /// The n-grams, shortest first: 1-grams from `ngram_counts[0]`, 2-grams from
    /// `ngram_counts[1]`, ...
    pub pool: Vec<i64>,
    /// Where the n-grams of each length start in `pool`.
    pub ngram_counts: Vec<usize>,
    /// The output slot of each n-gram of the pool, in pool order.
    pub ngram_indexes: Vec<usize>,
    /// The weight of each output slot (empty: all 1).
    pub weights: Vec<f32>,
}

impl TfIdfDesc {
    /// The number of output slots.
    pub fn output_size(&self) -> usize {
        self.ngram_indexes.iter().max().map_or(0, |m| m + 1)
    }

    /// The n-grams of the pool, in pool order (checked by `Self::validate`).
    pub fn ngrams(&self) -> Result<Vec<&[i64]>> {
        let err = |m: String| CoreError::op("TfIdfVectorizer", m);
        let mut out = Vec::new();
        for (i, &start) in self.ngram_counts.iter().enumerate() {
            let end = self
                .ngram_counts
                .get(i + 1)
                .copied()
                .unwrap_or(self.pool.len());
            if start > end || end > self.pool.len() {
                return Err(err(format!(
                    "ngram_counts {:?} do not fit a pool of {}",
                    self.ngram_counts,
                    self.pool.len()
                )));
            }
            let n = i + 1;
            let items = &self.pool[start..end];
            if !items.len().is_multiple_of(n) {
                return Err(err(format!(
                    "the {n}-grams take {} pool items, not a multiple of {n}",
                    items.len()
                )));
            }
            out.extend(items.chunks(n));
        }
        if out.len() != self.ngram_indexes.len() {
            return Err(err(format!(
                "the pool holds {} n-grams but ngram_indexes has {}",
                out.len(),
                self.ngram_indexes.len()
            )));
        }
        Ok(out)
    }

    pub(crate) fn infer(&self, inputs: &[&TensorInfo]) -> Result<Vec<TensorInfo>> {
        let err = |m: String| CoreError::op("TfIdfVectorizer", m);
        let [x] = inputs else {
            return Err(err(format!("takes 1 input, got {}", inputs.len())));
        };
        if !matches!(x.dtype, DataType::I32 | DataType::I64) {
            return Err(err(format!("X must be i32 or i64, got {}", x.dtype)));
        }
        if self.min_gram_length == 0 || self.min_gram_length > self.max_gram_length {
            return Err(err(format!(
                "gram lengths {}..={} are invalid",
                self.min_gram_length, self.max_gram_length
            )));
        }
        self.ngrams()?;
        let size = self.output_size();
        if !self.weights.is_empty() && self.weights.len() < size {
            return Err(err(format!(
                "{} weights for {size} outputs",
                self.weights.len()
            )));
        }
        let out = match x.shape.dims() {
            [_] => vec![size],
            [n, _] => vec![*n, size],
            _ => return Err(err(format!("X must have rank 1 or 2, got {}", x.shape))),
        };
        Ok(vec![TensorInfo::new(DataType::F32, out)])
    }

    /// The attribute form (ONNX names).
    pub(crate) fn to_attrs(&self) -> Vec<(String, AttrValue)> {
        vec![
            ("mode".into(), AttrValue::String(self.mode.name().into())),
            (
                "min_gram_length".into(),
                AttrValue::Int(self.min_gram_length as i64),
            ),
            (
                "max_gram_length".into(),
                AttrValue::Int(self.max_gram_length as i64),
            ),
            (
                "max_skip_count".into(),
                AttrValue::Int(self.max_skip_count as i64),
            ),
            ("pool_int64s".into(), AttrValue::Ints(self.pool.clone())),
            ("ngram_counts".into(), flat::usizes(&self.ngram_counts)),
            ("ngram_indexes".into(), flat::usizes(&self.ngram_indexes)),
            ("weights".into(), AttrValue::Floats(self.weights.clone())),
        ]
    }

    /// The inverse of [`Self::to_attrs`].
    pub(crate) fn from_attrs(r: &flat::Reader<'_>) -> Result<Self> {
        let size = |name: &str| {
            let v = r.int(name)?;
            usize::try_from(v).map_err(|_| r.bad(name, v))
        };
        let mode = r.string("mode")?;
        Ok(TfIdfDesc {
            mode: TfIdfMode::from_name(mode).ok_or_else(|| r.bad("mode", mode))?,
            min_gram_length: size("min_gram_length")?,
            max_gram_length: size("max_gram_length")?,
            max_skip_count: size("max_skip_count")?,
            pool: r.ints("pool_int64s")?,
            ngram_counts: r.usizes("ngram_counts")?,
            ngram_indexes: r.usizes("ngram_indexes")?,
            weights: r.floats("weights")?,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::Op;

    fn tfidf() -> TfIdfDesc {
        TfIdfDesc {
            mode: TfIdfMode::Tf,
            min_gram_length: 1,
            max_gram_length: 2,
            max_skip_count: 0,
            pool: vec![2, 3, 5, 4, 5, 6, 7, 8, 6, 7],
            ngram_counts: vec![0, 4],
            ngram_indexes: vec![0, 1, 2, 3, 4, 5, 6],
            weights: vec![],
        }
    }

    #[test]
    fn tfidf_shapes_and_pool() {
        let d = tfidf();
        assert_eq!(d.ngrams().unwrap().len(), 7);
        assert_eq!(d.ngrams().unwrap()[5], &[7, 8]);
        let op = Op::TfIdfVectorizer(d.clone());
        let x = TensorInfo::new(DataType::I32, vec![2, 6]);
        let out = op.infer(&[&x]).unwrap();
        assert_eq!(out[0].shape.dims(), &[2, 7]);
        assert_eq!(out[0].dtype, DataType::F32);
        let x1 = TensorInfo::new(DataType::I64, vec![12]);
        assert_eq!(op.infer(&[&x1]).unwrap()[0].shape.dims(), &[7]);
        // A float input, an odd bigram pool and too few indexes are errors.
        let xf = TensorInfo::new(DataType::F32, vec![12]);
        assert!(op.infer(&[&xf]).is_err());
        let mut odd = d.clone();
        odd.pool.pop();
        assert!(Op::TfIdfVectorizer(odd).infer(&[&x]).is_err());
        let mut short = d;
        short.ngram_indexes.pop();
        assert!(Op::TfIdfVectorizer(short).infer(&[&x]).is_err());
    }
}

/// The comparison of a TreeEnsemble interior node: the true branch is taken when
/// `x[feature] <op> split` holds (or x is in the node's set, for `Member`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TreeNodeMode {
    /// x <= split.
    Leq,
    /// x < split.
    Lt,
    /// x >= split.
    Gte,
    /// x > split.
    Gt,
    /// x == split.
    Eq,
    /// x != split.
    Neq,
    /// x is one of the node's members.
    Member,
}

const TREE_MODES: [TreeNodeMode; 7] = [
    TreeNodeMode::Leq,
    TreeNodeMode::Lt,
    TreeNodeMode::Gte,
    TreeNodeMode::Gt,
    TreeNodeMode::Eq,
    TreeNodeMode::Neq,
    TreeNodeMode::Member,
];

impl TreeNodeMode {
    /// The ONNX code (0 BRANCH_LEQ ... 6 BRANCH_MEMBER).
    pub fn code(self) -> i64 {
        TREE_MODES.iter().position(|&m| m == self).unwrap_or(0) as i64
    }

    /// The mode of an ONNX code.
    pub fn from_code(code: i64) -> Option<Self> {
        usize::try_from(code)
            .ok()
            .and_then(|c| TREE_MODES.get(c).copied())
    }
}

/// How TreeEnsemble combines the leaves reached for one target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TreeAggregate {
    /// Sum divided by the number of trees.
    Average,
    /// Sum.
    Sum,
    /// Minimum (the type's largest value when no leaf reaches the target).
    Min,
    /// Maximum (the type's lowest value when no leaf reaches the target).
    Max,
}

/// The transform TreeEnsemble applies to each row of scores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TreePostTransform {
    /// The scores as they are.
    None,
    /// Softmax over the targets.
    Softmax,
    /// 1 / (1 + e^-x) of each score.
    Logistic,
    /// Softmax over the targets where scores of exactly 0 stay 0.
    SoftmaxZero,
}

/// Where a branch of a TreeEnsemble node leads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TreeBranch {
    /// Another interior node (an index into the nodes).
    Node(usize),
    /// A leaf (an index into the leaves).
    Leaf(usize),
}

/// An interior node of a TreeEnsemble.
#[derive(Debug, Clone, PartialEq)]
pub struct TreeNode {
    /// The feature compared (a column of X).
    pub feature: usize,
    /// The comparison.
    pub mode: TreeNodeMode,
    /// The threshold (unused by `Member`).
    pub split: f64,
    /// The set of a `Member` node (empty otherwise).
    pub members: Vec<f64>,
    /// Where the true branch leads.
    pub if_true: TreeBranch,
    /// Where the false branch leads.
    pub if_false: TreeBranch,
    /// A NaN feature takes the true branch (otherwise the comparison decides).
    pub missing_tracks_true: bool,
}

/// A leaf of a TreeEnsemble.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TreeLeaf {
    /// The target it contributes to.
    pub target: usize,
    /// Its value.
    pub weight: f64,
}

/// TreeEnsemble (ai.onnx.ml opset 5): X [N, F] (f32, f64 or f16) → Y [N, targets], each
/// tree walked from its root to one leaf, leaves combined per target by `aggregate`, then
/// `post_transform`. The node and leaf references are checked by shape inference; a walk
/// that does not reach a leaf in as many steps as there are nodes (a cycle) is an error.
#[derive(Debug, Clone, PartialEq)]
pub struct TreeEnsembleDesc {
    /// The interior nodes of all trees.
    pub nodes: Vec<TreeNode>,
    /// The leaves of all trees.
    pub leaves: Vec<TreeLeaf>,
    /// The root node of each tree.
    pub roots: Vec<usize>,
    /// The number of targets (columns of Y).
    pub targets: usize,
    /// How leaves combine.
    pub aggregate: TreeAggregate,
    /// The transform of each output row.
    pub post_transform: TreePostTransform,
}

impl TreeEnsembleDesc {
    fn check_refs(&self, features: usize) -> Result<()> {
        let err = |m: String| CoreError::op("TreeEnsemble", m);
        if self.roots.is_empty() {
            return Err(err("no tree".into()));
        }
        for &r in &self.roots {
            if r >= self.nodes.len() {
                return Err(err(format!("tree root {r} is not a node")));
            }
        }
        for (i, n) in self.nodes.iter().enumerate() {
            if n.feature >= features {
                return Err(err(format!(
                    "node {i} reads feature {} of {features}",
                    n.feature
                )));
            }
            for b in [n.if_true, n.if_false] {
                let ok = match b {
                    TreeBranch::Node(j) => j < self.nodes.len(),
                    TreeBranch::Leaf(j) => j < self.leaves.len(),
                };
                if !ok {
                    return Err(err(format!("node {i} leads to a missing {b:?}")));
                }
            }
        }
        for (i, l) in self.leaves.iter().enumerate() {
            if l.target >= self.targets {
                return Err(err(format!(
                    "leaf {i} has target {} of {}",
                    l.target, self.targets
                )));
            }
        }
        Ok(())
    }

    pub(crate) fn infer(&self, inputs: &[&TensorInfo]) -> Result<Vec<TensorInfo>> {
        let err = |m: String| CoreError::op("TreeEnsemble", m);
        let [x] = inputs else {
            return Err(err(format!("takes 1 input, got {}", inputs.len())));
        };
        if !x.dtype.is_float() {
            return Err(err(format!("X must be a float tensor, got {}", x.dtype)));
        }
        let [n, f] = x.shape.dims() else {
            return Err(err(format!("X must have rank 2, got {}", x.shape)));
        };
        self.check_refs(*f)?;
        Ok(vec![TensorInfo::new(x.dtype, vec![*n, self.targets])])
    }

    /// The attribute form: ONNX's parallel lists (f64 values as bit patterns, sets delimited
    /// by NaN as in `membership_values`).
    pub(crate) fn to_attrs(&self) -> Vec<(String, AttrValue)> {
        let ints = |f: &dyn Fn(&TreeNode) -> i64| -> AttrValue {
            AttrValue::Ints(self.nodes.iter().map(f).collect())
        };
        let branch = |b: TreeBranch| match b {
            TreeBranch::Node(j) | TreeBranch::Leaf(j) => j as i64,
        };
        let is_leaf = |b: TreeBranch| i64::from(matches!(b, TreeBranch::Leaf(_)));
        let splits: Vec<f64> = self.nodes.iter().map(|n| n.split).collect();
        let mut members = Vec::new();
        for n in self.nodes.iter().filter(|n| n.mode == TreeNodeMode::Member) {
            members.extend(&n.members);
            members.push(f64::NAN);
        }
        let weights: Vec<f64> = self.leaves.iter().map(|l| l.weight).collect();
        let aggregate = match self.aggregate {
            TreeAggregate::Average => 0,
            TreeAggregate::Sum => 1,
            TreeAggregate::Min => 2,
            TreeAggregate::Max => 3,
        };
        let post = match self.post_transform {
            TreePostTransform::None => 0,
            TreePostTransform::Softmax => 1,
            TreePostTransform::Logistic => 2,
            TreePostTransform::SoftmaxZero => 3,
        };
        vec![
            ("nodes_featureids".into(), ints(&|n| n.feature as i64)),
            ("nodes_modes".into(), ints(&|n| n.mode.code())),
            ("nodes_splits".into(), flat::doubles(&splits)),
            ("nodes_truenodeids".into(), ints(&|n| branch(n.if_true))),
            ("nodes_trueleafs".into(), ints(&|n| is_leaf(n.if_true))),
            ("nodes_falsenodeids".into(), ints(&|n| branch(n.if_false))),
            ("nodes_falseleafs".into(), ints(&|n| is_leaf(n.if_false))),
            (
                "nodes_missing_value_tracks_true".into(),
                ints(&|n| i64::from(n.missing_tracks_true)),
            ),
            ("membership_values".into(), flat::doubles(&members)),
            (
                "leaf_targetids".into(),
                AttrValue::Ints(self.leaves.iter().map(|l| l.target as i64).collect()),
            ),
            ("leaf_weights".into(), flat::doubles(&weights)),
            (
                "tree_roots".into(),
                AttrValue::Ints(self.roots.iter().map(|&r| r as i64).collect()),
            ),
            ("n_targets".into(), AttrValue::Int(self.targets as i64)),
            ("aggregate_function".into(), AttrValue::Int(aggregate)),
            ("post_transform".into(), AttrValue::Int(post)),
        ]
    }

    /// The inverse of [`Self::to_attrs`].
    pub(crate) fn from_attrs(r: &flat::Reader<'_>) -> Result<Self> {
        let features = r.usizes("nodes_featureids")?;
        let modes = r.ints("nodes_modes")?;
        let splits = r.doubles("nodes_splits")?;
        let t_ids = r.usizes("nodes_truenodeids")?;
        let t_leaf = r.ints("nodes_trueleafs")?;
        let f_ids = r.usizes("nodes_falsenodeids")?;
        let f_leaf = r.ints("nodes_falseleafs")?;
        let missing = r.ints("nodes_missing_value_tracks_true")?;
        let n = features.len();
        if [modes.len(), splits.len(), t_ids.len(), t_leaf.len()]
            .into_iter()
            .chain([f_ids.len(), f_leaf.len(), missing.len()])
            .any(|len| len != n)
        {
            return Err(r.err("the nodes_* lists differ in length".into()));
        }
        let mut sets = r.doubles("membership_values")?.into_iter();
        let mut nodes = Vec::with_capacity(n);
        for i in 0..n {
            let mode =
                TreeNodeMode::from_code(modes[i]).ok_or_else(|| r.bad("nodes_modes", modes[i]))?;
            let members = if mode == TreeNodeMode::Member {
                sets.by_ref().take_while(|v| !v.is_nan()).collect()
            } else {
                Vec::new()
            };
            let branch = |leaf: i64, j: usize| {
                if leaf != 0 {
                    TreeBranch::Leaf(j)
                } else {
                    TreeBranch::Node(j)
                }
            };
            nodes.push(TreeNode {
                feature: features[i],
                mode,
                split: splits[i],
                members,
                if_true: branch(t_leaf[i], t_ids[i]),
                if_false: branch(f_leaf[i], f_ids[i]),
                missing_tracks_true: missing[i] != 0,
            });
        }
        let targets = r.usizes("leaf_targetids")?;
        let weights = r.doubles("leaf_weights")?;
        if targets.len() != weights.len() {
            return Err(r.err("the leaf_* lists differ in length".into()));
        }
        let n_targets = r.int("n_targets")?;
        Ok(TreeEnsembleDesc {
            nodes,
            leaves: targets
                .into_iter()
                .zip(weights)
                .map(|(target, weight)| TreeLeaf { target, weight })
                .collect(),
            roots: r.usizes("tree_roots")?,
            targets: usize::try_from(n_targets).map_err(|_| r.bad("n_targets", n_targets))?,
            aggregate: match r.int("aggregate_function")? {
                0 => TreeAggregate::Average,
                1 => TreeAggregate::Sum,
                2 => TreeAggregate::Min,
                3 => TreeAggregate::Max,
                other => return Err(r.bad("aggregate_function", other)),
            },
            post_transform: match r.int("post_transform")? {
                0 => TreePostTransform::None,
                1 => TreePostTransform::Softmax,
                2 => TreePostTransform::Logistic,
                3 => TreePostTransform::SoftmaxZero,
                other => return Err(r.bad("post_transform", other)),
            },
        })
    }
}

#[cfg(test)]
mod tree_tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::Op;

    /// One tree: x0 <= 1 → leaf 0 (target 0), else x1 in {2, 3} → leaf 1 (target 1), else
    /// leaf 2 (target 1).
    fn small_tree() -> TreeEnsembleDesc {
        TreeEnsembleDesc {
            nodes: vec![
                TreeNode {
                    feature: 0,
                    mode: TreeNodeMode::Leq,
                    split: 1.0,
                    members: vec![],
                    if_true: TreeBranch::Leaf(0),
                    if_false: TreeBranch::Node(1),
                    missing_tracks_true: false,
                },
                TreeNode {
                    feature: 1,
                    mode: TreeNodeMode::Member,
                    split: f64::NAN,
                    members: vec![2.0, 3.0],
                    if_true: TreeBranch::Leaf(1),
                    if_false: TreeBranch::Leaf(2),
                    missing_tracks_true: true,
                },
            ],
            leaves: vec![
                TreeLeaf {
                    target: 0,
                    weight: 1.5,
                },
                TreeLeaf {
                    target: 1,
                    weight: 2.0,
                },
                TreeLeaf {
                    target: 1,
                    weight: -1.0,
                },
            ],
            roots: vec![0],
            targets: 2,
            aggregate: TreeAggregate::Sum,
            post_transform: TreePostTransform::None,
        }
    }

    #[test]
    fn tree_ensemble_checks_references() {
        let x = TensorInfo::new(DataType::F64, vec![4, 2]);
        let out = Op::TreeEnsemble(small_tree()).infer(&[&x]).unwrap();
        assert_eq!(out[0].shape.dims(), &[4, 2]);
        assert_eq!(out[0].dtype, DataType::F64);
        // Too few features, a dangling leaf, a target out of range, an int input.
        let narrow = TensorInfo::new(DataType::F64, vec![4, 1]);
        assert!(Op::TreeEnsemble(small_tree()).infer(&[&narrow]).is_err());
        let mut d = small_tree();
        d.nodes[1].if_false = TreeBranch::Leaf(3);
        assert!(Op::TreeEnsemble(d).infer(&[&x]).is_err());
        let mut d = small_tree();
        d.leaves[2].target = 2;
        assert!(Op::TreeEnsemble(d).infer(&[&x]).is_err());
        let xi = TensorInfo::new(DataType::I64, vec![4, 2]);
        assert!(Op::TreeEnsemble(small_tree()).infer(&[&xi]).is_err());
    }

    #[test]
    fn tree_ensemble_round_trips_nan_splits() {
        let op = Op::TreeEnsemble(small_tree());
        let (t, a) = op.to_attributes();
        let back = Op::from_attributes(&t, &a).unwrap();
        // NaN != NaN: compare the attribute forms.
        assert_eq!(back.to_attributes(), (t, a));
    }
}
