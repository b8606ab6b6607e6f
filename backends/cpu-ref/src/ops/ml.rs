//! Traditional machine-learning operators: TfIdfVectorizer, TreeEnsemble.

use super::cast::{read_scalars, write_scalars, Scalar};
use crate::Result;
use backplane_backend_api::BackendError;
use backplane_core::ops::{
    TfIdfDesc, TfIdfMode, TreeAggregate, TreeBranch, TreeEnsembleDesc, TreeNodeMode,
    TreePostTransform,
};
use backplane_core::{DataType, TensorView, TensorViewMut};
use std::collections::HashMap;

/// TfIdfVectorizer over i32/i64 tokens (see [`TfIdfDesc`]).
pub(crate) fn tfidf(desc: &TfIdfDesc, x: &TensorView<'_>, y: &mut TensorViewMut<'_>) -> Result<()> {
    let tokens: Vec<i64> = read_scalars(x)?.into_iter().map(Scalar::to_i64).collect();
    let mut slots: HashMap<&[i64], usize> = HashMap::new();
    for (gram, &slot) in desc.ngrams()?.into_iter().zip(&desc.ngram_indexes) {
        // The first occurrence of an n-gram listed twice decides its slot.
        slots.entry(gram).or_insert(slot);
    }
    let size = desc.output_size();
    let row_len = x.dims().last().copied().unwrap_or(0);
    let rows = if x.dims().len() == 2 { x.dims()[0] } else { 1 };
    let out = y.as_mut_slice::<f32>()?;
    let mut gram = Vec::with_capacity(desc.max_gram_length);
    for row in 0..rows {
        let items = &tokens[row * row_len..(row + 1) * row_len];
        let mut counts = vec![0u64; size];
        for n in desc.min_gram_length..=desc.max_gram_length {
            // 1-grams do not depend on the skip: count them once.
            let skips = if n == 1 { 0 } else { desc.max_skip_count };
            for skip in 0..=skips {
                let step = skip + 1;
                let span = (n - 1) * step;
                for start in 0..row_len.saturating_sub(span) {
                    gram.clear();
                    gram.extend((0..n).map(|j| items[start + j * step]));
                    if let Some(&slot) = slots.get(gram.as_slice()) {
                        counts[slot] += 1;
                    }
                }
            }
        }
        let dst = &mut out[row * size..(row + 1) * size];
        for (i, (slot, &count)) in dst.iter_mut().zip(&counts).enumerate() {
            let weight = desc.weights.get(i).copied().unwrap_or(1.0);
            *slot = match desc.mode {
                TfIdfMode::Tf => count as f32,
                TfIdfMode::Idf if count > 0 => weight,
                TfIdfMode::Idf => 0.0,
                TfIdfMode::TfIdf => weight * count as f32,
            };
        }
    }
    Ok(())
}

/// The leaf one tree leads `row` to, from node `root`.
fn walk(desc: &TreeEnsembleDesc, root: usize, row: &[f64]) -> Result<usize> {
    let mut at = root;
    // Shape inference checked every reference; a cycle is caught by counting steps.
    for _ in 0..=desc.nodes.len() {
        let node = desc.nodes.get(at).ok_or_else(|| {
            BackendError::Other(format!("TreeEnsemble: node {at} does not exist"))
        })?;
        let x = row.get(node.feature).copied().ok_or_else(|| {
            BackendError::Other(format!("TreeEnsemble: feature {} is missing", node.feature))
        })?;
        let s = node.split;
        let goes_true = (x.is_nan() && node.missing_tracks_true)
            || match node.mode {
                TreeNodeMode::Leq => x <= s,
                TreeNodeMode::Lt => x < s,
                TreeNodeMode::Gte => x >= s,
                TreeNodeMode::Gt => x > s,
                TreeNodeMode::Eq => x == s,
                TreeNodeMode::Neq => x != s,
                TreeNodeMode::Member => node.members.contains(&x),
            };
        match if goes_true {
            node.if_true
        } else {
            node.if_false
        } {
            TreeBranch::Leaf(leaf) => return Ok(leaf),
            TreeBranch::Node(next) => at = next,
        }
    }
    Err(BackendError::Other(format!(
        "TreeEnsemble: the tree rooted at node {root} has a cycle"
    )))
}

/// TreeEnsemble: X [N, F] → Y [N, targets] (see [`TreeEnsembleDesc`]); computed in f64.
pub(crate) fn tree_ensemble(
    desc: &TreeEnsembleDesc,
    x: &TensorView<'_>,
    y: &mut TensorViewMut<'_>,
) -> Result<()> {
    let xs: Vec<f64> = read_scalars(x)?.into_iter().map(Scalar::to_f64).collect();
    let features = x.dims().get(1).copied().unwrap_or(0);
    let targets = desc.targets;
    // The type's extremes start MIN and MAX aggregation (what a target no leaf reaches keeps).
    let (lowest, highest) = match x.info.dtype {
        DataType::F32 => (f64::from(f32::MIN), f64::from(f32::MAX)),
        DataType::F16 => (-65504.0, 65504.0),
        _ => (f64::MIN, f64::MAX),
    };
    let start = match desc.aggregate {
        TreeAggregate::Average | TreeAggregate::Sum => 0.0,
        TreeAggregate::Min => highest,
        TreeAggregate::Max => lowest,
    };
    let trees = desc.roots.len() as f64;
    let mut out = Vec::with_capacity(xs.len() / features.max(1) * targets);
    for row in xs.chunks(features.max(1)) {
        let mut scores = vec![start; targets];
        for &root in &desc.roots {
            let at = walk(desc, root, row)?;
            let leaf = desc.leaves.get(at).ok_or_else(|| {
                BackendError::Other(format!("TreeEnsemble: leaf {at} does not exist"))
            })?;
            let slot = scores.get_mut(leaf.target).ok_or_else(|| {
                BackendError::Other(format!("TreeEnsemble: target {} is missing", leaf.target))
            })?;
            *slot = match desc.aggregate {
                TreeAggregate::Sum => *slot + leaf.weight,
                TreeAggregate::Average => *slot + leaf.weight / trees,
                TreeAggregate::Min => slot.min(leaf.weight),
                TreeAggregate::Max => slot.max(leaf.weight),
            };
        }
        post_transform(desc.post_transform, &mut scores);
        out.extend(scores.into_iter().map(Scalar::Float));
    }
    write_scalars(y, &out)
}

/// Apply a TreeEnsemble post transform to one row of scores.
fn post_transform(t: TreePostTransform, scores: &mut [f64]) {
    match t {
        TreePostTransform::None => {}
        TreePostTransform::Logistic => {
            for s in scores.iter_mut() {
                *s = 1.0 / (1.0 + (-*s).exp());
            }
        }
        TreePostTransform::Softmax | TreePostTransform::SoftmaxZero => {
            let zero = t == TreePostTransform::SoftmaxZero;
            let keep = |s: f64| !(zero && s == 0.0);
            let max = scores
                .iter()
                .copied()
                .filter(|&s| keep(s))
                .fold(f64::NEG_INFINITY, f64::max);
            let mut sum = 0.0;
            for s in scores.iter_mut() {
                if keep(*s) {
                    *s = (*s - max).exp();
                    sum += *s;
                }
            }
            for s in scores.iter_mut() {
                if keep(*s) && sum > 0.0 {
                    *s /= sum;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use crate::evaluate;
    use crate::test_util::{assert_close, eval_f32, f32s};
    use backplane_core::ops::{
        TfIdfDesc, TfIdfMode, TreeAggregate, TreeBranch, TreeEnsembleDesc, TreeLeaf, TreeNode,
        TreeNodeMode, TreePostTransform,
    };
    use backplane_core::{Op, Tensor};

    fn desc(mode: TfIdfMode, max_skip_count: usize) -> TfIdfDesc {
        // 1-grams 1 and 2 (slots 0, 1); 2-grams (1, 2) and (2, 1) (slots 2, 3).
        TfIdfDesc {
            mode,
            min_gram_length: 1,
            max_gram_length: 2,
            max_skip_count,
            pool: vec![1, 2, 1, 2, 2, 1],
            ngram_counts: vec![0, 2],
            ngram_indexes: vec![0, 1, 2, 3],
            weights: vec![],
        }
    }

    #[test]
    fn counts_unigrams_and_skipped_bigrams() {
        let x = Tensor::from_vec(vec![5], vec![1i64, 2, 3, 1, 2]).unwrap();
        // Contiguous: 1 ×2, 2 ×2, (1,2) ×2, (2,1) ×0.
        let y = eval_f32(&Op::TfIdfVectorizer(desc(TfIdfMode::Tf, 0)), &[&x]);
        assert_eq!(y, vec![2.0, 2.0, 2.0, 0.0]);
        // Skip 1 adds pairs two apart: (1,3) (2,1) (3,2): one more (2,1). Skip 2 adds (1,1)
        // (2,2): nothing. Unigrams are still counted once.
        let y = eval_f32(&Op::TfIdfVectorizer(desc(TfIdfMode::Tf, 2)), &[&x]);
        assert_eq!(y, vec![2.0, 2.0, 2.0, 1.0]);
    }

    #[test]
    fn weights_and_rows() {
        let x = Tensor::from_vec(vec![2, 3], vec![1i32, 2, 2, 7, 7, 1]).unwrap();
        let mut d = desc(TfIdfMode::TfIdf, 0);
        d.min_gram_length = 2;
        d.weights = vec![0.5, 0.5, 3.0, 4.0];
        // Row 0: (1,2) once, (2,2) not pooled; row 1: (7,1) not pooled.
        let y = eval_f32(&Op::TfIdfVectorizer(d.clone()), &[&x]);
        assert_eq!(y, vec![0.0, 0.0, 3.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
        d.mode = TfIdfMode::Idf;
        d.min_gram_length = 1;
        // Row 0: 1 once, 2 twice, (1,2) once → weights; row 1: 1 once.
        let y = eval_f32(&Op::TfIdfVectorizer(d), &[&x]);
        assert_eq!(y, vec![0.5, 0.5, 3.0, 0.0, 0.5, 0.0, 0.0, 0.0]);
    }

    fn tree() -> TreeEnsembleDesc {
        // Tree 0: x0 <= 1 → leaf 0 (target 0, 1.5), else x1 in {2, 3} (NaN goes true) → leaf
        // 1 (target 1, 2), else leaf 2 (target 1, -1). Tree 1: x0 != 5 → leaf 3 (target 0,
        // 10), else leaf 2.
        let node = |feature, mode, split, members: Vec<f64>, t, f, nan| TreeNode {
            feature,
            mode,
            split,
            members,
            if_true: t,
            if_false: f,
            missing_tracks_true: nan,
        };
        let leaf = |target, weight| TreeLeaf { target, weight };
        TreeEnsembleDesc {
            nodes: vec![
                node(
                    0,
                    TreeNodeMode::Leq,
                    1.0,
                    vec![],
                    TreeBranch::Leaf(0),
                    TreeBranch::Node(1),
                    false,
                ),
                node(
                    1,
                    TreeNodeMode::Member,
                    0.0,
                    vec![2.0, 3.0],
                    TreeBranch::Leaf(1),
                    TreeBranch::Leaf(2),
                    true,
                ),
                node(
                    0,
                    TreeNodeMode::Neq,
                    5.0,
                    vec![],
                    TreeBranch::Leaf(3),
                    TreeBranch::Leaf(2),
                    false,
                ),
            ],
            leaves: vec![leaf(0, 1.5), leaf(1, 2.0), leaf(1, -1.0), leaf(0, 10.0)],
            roots: vec![0, 2],
            targets: 2,
            aggregate: TreeAggregate::Sum,
            post_transform: TreePostTransform::None,
        }
    }

    #[test]
    fn tree_ensemble_sums_and_aggregates() {
        // Rows: (0, 9): leaf 0 + leaf 3 → [11.5, 0]; (2, 3): leaf 1 + leaf 3 → [10, 2];
        // (5, NaN): leaf 1 (NaN tracks true) + leaf 2 → [0, 1]; (5, 7): leaf 2 twice → [0, -2].
        let x = f32s(&[4, 2], &[0.0, 9.0, 2.0, 3.0, 5.0, f32::NAN, 5.0, 7.0]);
        let y = eval_f32(&Op::TreeEnsemble(tree()), &[&x]);
        assert_eq!(y, vec![11.5, 0.0, 10.0, 2.0, 0.0, 1.0, 0.0, -2.0]);
        let mut d = tree();
        d.aggregate = TreeAggregate::Average;
        let y = eval_f32(&Op::TreeEnsemble(d.clone()), &[&x]);
        assert_eq!(y, vec![5.75, 0.0, 5.0, 1.0, 0.0, 0.5, 0.0, -1.0]);
        // MAX: an unreached target keeps the lowest f32.
        d.aggregate = TreeAggregate::Max;
        let y = eval_f32(&Op::TreeEnsemble(d), &[&x]);
        assert_eq!(y[..4], [10.0, f32::MIN, 10.0, 2.0]);
    }

    #[test]
    fn tree_ensemble_post_transforms_and_cycles() {
        let x = f32s(&[1, 2], &[5.0, 7.0]);
        let mut d = tree();
        d.post_transform = TreePostTransform::Logistic;
        // Scores [0, -2] → [0.5, 1 / (1 + e^2)].
        let y = eval_f32(&Op::TreeEnsemble(d.clone()), &[&x]);
        assert_close(&y, &[0.5, 0.119_202_92], 1e-6);
        d.post_transform = TreePostTransform::SoftmaxZero;
        // The zero score stays 0; the other is alone in its softmax.
        let y = eval_f32(&Op::TreeEnsemble(d.clone()), &[&x]);
        assert_eq!(y, vec![0.0, 1.0]);
        // A node that leads back to itself is an error, not a hang.
        d.nodes[2].if_false = TreeBranch::Node(2);
        assert!(evaluate(&Op::TreeEnsemble(d), &[&x]).is_err());
    }
}
