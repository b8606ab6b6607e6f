//! Einsum: the equation is parsed into a plan (a label per input axis, the output labels and
//! each label's size) that shape inference and kernels share.

use crate::{CoreError, DataType, Result, TensorInfo};

const OP: &str = "Einsum";

/// Labels `a-z` and `A-Z` get ids 0..52; the axes an ellipsis stands for get ids from 52 on,
/// aligned to the right across inputs (numpy broadcasting).
const ELLIPSIS_BASE: usize = 52;

/// An Einsum equation resolved for concrete input shapes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EinsumPlan {
    /// The label id of every axis of every input.
    pub inputs: Vec<Vec<usize>>,
    /// The label ids of the output axes.
    pub output: Vec<usize>,
    /// The size of each label id (indexable by id; unused ids are 0).
    pub sizes: Vec<usize>,
}

fn letter_id(c: char) -> Option<usize> {
    match c {
        'a'..='z' => Some(c as usize - 'a' as usize),
        'A'..='Z' => Some(26 + c as usize - 'A' as usize),
        _ => None,
    }
}

/// One side of an equation term: the letter ids before and after its ellipsis (if any).
#[derive(Debug)]
struct Term {
    before: Vec<usize>,
    after: Vec<usize>,
    ellipsis: bool,
}

fn parse_term(s: &str) -> Result<Term> {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    let (head, tail, ellipsis) = match s.split_once("...") {
        Some((h, t)) => (h.to_string(), t.to_string(), true),
        None => (s.clone(), String::new(), false),
    };
    let ids = |part: &str| -> Result<Vec<usize>> {
        part.chars()
            .map(|c| {
                letter_id(c).ok_or_else(|| {
                    CoreError::op(OP, format!("invalid character '{c}' in term '{s}'"))
                })
            })
            .collect()
    };
    Ok(Term {
        before: ids(&head)?,
        after: ids(&tail)?,
        ellipsis,
    })
}

/// Einsum (ONNX Einsum): a sum of products over the labels of an equation such as
/// `"bij,bjk->bik"`; without `->` the output holds the labels used once, alphabetically.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EinsumDesc {
    /// The equation.
    pub equation: String,
}

impl EinsumDesc {
    /// Resolve the equation for inputs of the given shapes.
    pub fn plan(&self, shapes: &[&[usize]]) -> Result<EinsumPlan> {
        let (lhs, rhs) = match self.equation.split_once("->") {
            Some((l, r)) => (l, Some(r)),
            None => (self.equation.as_str(), None),
        };
        let terms = lhs.split(',').map(parse_term).collect::<Result<Vec<_>>>()?;
        if terms.len() != shapes.len() {
            return Err(CoreError::op(
                OP,
                format!(
                    "the equation '{}' has {} inputs, the node {}",
                    self.equation,
                    terms.len(),
                    shapes.len()
                ),
            ));
        }
        // How many axes each ellipsis covers, and the widest.
        let mut ell_ranks = Vec::with_capacity(terms.len());
        for (t, dims) in terms.iter().zip(shapes) {
            let named = t.before.len() + t.after.len();
            let ok = if t.ellipsis {
                dims.len() >= named
            } else {
                dims.len() == named
            };
            if !ok {
                return Err(CoreError::op(
                    OP,
                    format!("an input of rank {} does not fit its term", dims.len()),
                ));
            }
            ell_ranks.push(dims.len() - named);
        }
        let widest = ell_ranks.iter().copied().max().unwrap_or(0);
        let mut sizes = vec![0usize; ELLIPSIS_BASE + widest];
        let mut inputs = Vec::with_capacity(terms.len());
        for ((t, dims), &e) in terms.iter().zip(shapes).zip(&ell_ranks) {
            let labels: Vec<usize> = t
                .before
                .iter()
                .copied()
                .chain((0..e).map(|j| ELLIPSIS_BASE + widest - e + j))
                .chain(t.after.iter().copied())
                .collect();
            for (&l, &d) in labels.iter().zip(dims.iter()) {
                let s = &mut sizes[l];
                if *s == 0 || *s == d {
                    *s = d;
                } else if l >= ELLIPSIS_BASE && (*s == 1 || d == 1) {
                    // Broadcast ellipsis axes.
                    *s = (*s).max(d);
                } else {
                    return Err(CoreError::op(
                        OP,
                        format!("label sizes disagree ({} and {d})", *s),
                    ));
                }
            }
            inputs.push(labels);
        }
        let ellipsis_ids: Vec<usize> = (ELLIPSIS_BASE..ELLIPSIS_BASE + widest).collect();
        let output = match rhs {
            Some(r) => {
                let t = parse_term(r)?;
                let out: Vec<usize> = t
                    .before
                    .iter()
                    .copied()
                    .chain(if t.ellipsis {
                        ellipsis_ids.clone()
                    } else {
                        Vec::new()
                    })
                    .chain(t.after.iter().copied())
                    .collect();
                for &l in &out {
                    if l < ELLIPSIS_BASE && sizes[l] == 0 {
                        return Err(CoreError::op(
                            OP,
                            "an output label does not appear in the inputs",
                        ));
                    }
                }
                let mut seen = out.clone();
                seen.sort_unstable();
                seen.dedup();
                if seen.len() != out.len() {
                    return Err(CoreError::op(OP, "an output label repeats"));
                }
                out
            }
            None => {
                let mut counts = [0usize; ELLIPSIS_BASE];
                for labels in &inputs {
                    for &l in labels.iter().filter(|&&l| l < ELLIPSIS_BASE) {
                        counts[l] += 1;
                    }
                }
                // In character order, as numpy: 'A'..'Z' before 'a'..'z'.
                let mut once: Vec<usize> = (0..ELLIPSIS_BASE).filter(|&l| counts[l] == 1).collect();
                once.sort_by_key(|&l| if l < 26 { l + 26 } else { l - 26 });
                ellipsis_ids.into_iter().chain(once).collect()
            }
        };
        Ok(EinsumPlan {
            inputs,
            output,
            sizes,
        })
    }

    pub(crate) fn infer(&self, inputs: &[&TensorInfo]) -> Result<Vec<TensorInfo>> {
        let dtype = inputs[0].dtype;
        if inputs.iter().any(|i| i.dtype != dtype) {
            return Err(CoreError::op(OP, "all inputs must have one type"));
        }
        if dtype == DataType::Bool {
            return Err(CoreError::op(OP, "bool inputs are not numbers"));
        }
        let shapes: Vec<&[usize]> = inputs.iter().map(|i| i.shape.dims()).collect();
        let plan = self.plan(&shapes)?;
        let dims: Vec<usize> = plan.output.iter().map(|&l| plan.sizes[l]).collect();
        Ok(vec![TensorInfo::new(dtype, dims)])
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn out(eq: &str, shapes: &[&[usize]]) -> Result<Vec<usize>> {
        let p = EinsumDesc {
            equation: eq.into(),
        }
        .plan(shapes)?;
        Ok(p.output.iter().map(|&l| p.sizes[l]).collect())
    }

    #[test]
    fn shapes_of_common_equations() {
        assert_eq!(out("ij,jk->ik", &[&[2, 3], &[3, 4]]).unwrap(), [2, 4]);
        assert_eq!(
            out("bij, bjk -> bik", &[&[5, 2, 3], &[5, 3, 4]]).unwrap(),
            [5, 2, 4]
        );
        assert_eq!(out("i,i", &[&[3], &[3]]).unwrap(), Vec::<usize>::new());
        assert_eq!(out("ij->i", &[&[3, 4]]).unwrap(), [3]);
        assert_eq!(out("ji", &[&[3, 4]]).unwrap(), [4, 3]);
        assert_eq!(out("...ii ->...i", &[&[3, 5, 5]]).unwrap(), [3, 5]);
        assert_eq!(
            out("...ij,...jk", &[&[2, 1, 2, 3], &[4, 3, 5]]).unwrap(),
            [2, 4, 2, 5]
        );
        assert!(out("ij,jk->ik", &[&[2, 3], &[4, 4]]).is_err());
        assert!(out("ij->ik", &[&[2, 3]]).is_err());
        assert!(out("ij", &[&[2, 3, 4]]).is_err());
        assert!(out("i$", &[&[2, 3]]).is_err());
    }
}
