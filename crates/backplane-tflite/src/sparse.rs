//! Sparse constant tensors (TFLite's `SparsityParameters`, as the model optimization
//! toolkit writes pruned weights) made dense at read time, so the importer sees ordinary
//! constants.
//!
//! The stored values are visited in traversal order: the tensor's dimensions permuted by
//! `traversal_order`, then the inner block dimensions (`block_map` names the dimension each
//! block divides). A DENSE level visits `dense_size` positions; a SPARSE_CSR level visits
//! the positions its `array_indices` list in the segment of its parent position.

use crate::error::{Result, TfliteError};
use crate::fbs::Table;
use crate::schema::{dim_metadata as dm, sparsity};

/// The deepest traversal the importer accepts (rank 8 with a block on every dimension).
const MAX_LEVELS: usize = 16;

fn invalid(name: &str, what: impl std::fmt::Display) -> TfliteError {
    TfliteError::Invalid(format!("sparse tensor '{name}': {what}"))
}

/// One level of the traversal.
enum Level {
    Dense(usize),
    Csr {
        segments: Vec<usize>,
        indices: Vec<usize>,
    },
}

fn index_vector(t: &Table<'_>, type_slot: usize, slot: usize, name: &str) -> Result<Vec<usize>> {
    let Some(v) = t.table(slot)? else {
        return Err(invalid(name, "a sparse level without its index vectors"));
    };
    Ok(match t.u8(type_slot, 0)? {
        1 => v
            .i32s(0)?
            .into_iter()
            .map(|i| usize::try_from(i).map_err(|_| invalid(name, format!("index {i}"))))
            .collect::<Result<_>>()?,
        2 => v.u16s(0)?.into_iter().map(usize::from).collect(),
        3 => v
            .bytes(0)?
            .unwrap_or_default()
            .iter()
            .map(|&b| b as usize)
            .collect(),
        other => return Err(invalid(name, format!("index vector type {other}"))),
    })
}

/// The dense bytes of a sparse tensor of `shape` whose elements are `elem` bytes each, from
/// its stored (non-zero) values `data` and its sparsity parameters `sp`.
pub(crate) fn densify(
    sp: &Table<'_>,
    shape: &[usize],
    elem: usize,
    data: &[u8],
    name: &str,
) -> Result<Vec<u8>> {
    let rank = shape.len();
    let order: Vec<usize> = sp
        .i32s(sparsity::TRAVERSAL_ORDER)?
        .into_iter()
        .map(|i| usize::try_from(i).map_err(|_| invalid(name, format!("traversal order {i}"))))
        .collect::<Result<_>>()?;
    let block_map: Vec<usize> = sp
        .i32s(sparsity::BLOCK_MAP)?
        .into_iter()
        .map(|i| {
            usize::try_from(i)
                .ok()
                .filter(|&d| d < rank)
                .ok_or_else(|| invalid(name, format!("block map entry {i}")))
        })
        .collect::<Result<_>>()?;
    let metadata = sp.tables(sparsity::DIM_METADATA)?;
    let levels = order.len();
    let mut seen = vec![false; levels];
    for &o in &order {
        match seen.get_mut(o) {
            Some(s) if !*s => *s = true,
            _ => return Err(invalid(name, format!("traversal order {order:?}"))),
        }
    }
    if levels > MAX_LEVELS
        || levels < rank
        || block_map.len() != levels - rank
        || metadata.len() != levels
    {
        return Err(invalid(
            name,
            format!(
                "{levels} levels, {} block dimensions and {} level descriptions for rank {rank}",
                block_map.len(),
                metadata.len()
            ),
        ));
    }
    let mut plan = Vec::with_capacity(levels);
    for m in &metadata {
        plan.push(match m.i8(dm::FORMAT, 0)? {
            0 => Level::Dense(
                usize::try_from(m.i32(dm::DENSE_SIZE, 0)?)
                    .map_err(|_| invalid(name, "a negative dense size"))?,
            ),
            1 => Level::Csr {
                segments: index_vector(m, dm::ARRAY_SEGMENTS_TYPE, dm::ARRAY_SEGMENTS, name)?,
                indices: index_vector(m, dm::ARRAY_INDICES_TYPE, dm::ARRAY_INDICES, name)?,
            },
            other => return Err(invalid(name, format!("dimension format {other}"))),
        });
    }
    // The size of each block: the dense size of the level that traverses it.
    let mut block_size = vec![1usize; levels - rank];
    for (level, &o) in order.iter().enumerate().skip(rank) {
        match (plan.get(level), block_size.get_mut(o.wrapping_sub(rank))) {
            (Some(Level::Dense(n)), Some(b)) => *b = *n,
            _ => return Err(invalid(name, "a block dimension that is not dense")),
        }
    }
    let count = shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .and_then(|n| n.checked_mul(elem))
        .filter(|&n| n as u64 <= crate::MAX_MODEL_BYTES)
        .ok_or_else(|| invalid(name, "larger dense than the largest model file"))?;
    let mut dense = Vec::new();
    dense
        .try_reserve_exact(count)
        .map_err(|_| invalid(name, format!("no memory for {count} bytes")))?;
    dense.resize(count, 0);
    let mut walk = Walk {
        order: &order,
        block_map: &block_map,
        block_size: &block_size,
        plan: &plan,
        shape,
        elem,
        data,
        next: 0,
        indices: vec![0; levels],
        dense: &mut dense,
        name,
    };
    walk.visit(0, 0)?;
    if walk.next * elem != data.len() {
        return Err(invalid(
            name,
            format!(
                "{} values stored, {} visited",
                data.len() / elem.max(1),
                walk.next
            ),
        ));
    }
    Ok(dense)
}

/// The traversal's state.
struct Walk<'w> {
    order: &'w [usize],
    block_map: &'w [usize],
    block_size: &'w [usize],
    plan: &'w [Level],
    shape: &'w [usize],
    elem: usize,
    data: &'w [u8],
    /// The next stored value.
    next: usize,
    /// The position at each level.
    indices: Vec<usize>,
    dense: &'w mut Vec<u8>,
    name: &'w str,
}

impl Walk<'_> {
    fn visit(&mut self, level: usize, parent: usize) -> Result<()> {
        let Some(l) = self.plan.get(level) else {
            return self.store();
        };
        match l {
            Level::Dense(n) => {
                for i in 0..*n {
                    self.indices[level] = i;
                    let child = parent
                        .checked_mul(*n)
                        .and_then(|p| p.checked_add(i))
                        .ok_or_else(|| invalid(self.name, "a position overflows"))?;
                    self.visit(level + 1, child)?;
                }
            }
            Level::Csr { segments, indices } => {
                let (Some(&lo), Some(&hi)) = (segments.get(parent), segments.get(parent + 1))
                else {
                    return Err(invalid(
                        self.name,
                        format!("no segment for position {parent}"),
                    ));
                };
                for k in lo..hi {
                    let Some(&i) = indices.get(k) else {
                        return Err(invalid(self.name, format!("index {k} out of range")));
                    };
                    self.indices[level] = i;
                    self.visit(level + 1, k)?;
                }
            }
        }
        Ok(())
    }

    /// Store the next value at the position the levels' indices give.
    fn store(&mut self) -> Result<()> {
        let rank = self.shape.len();
        let mut orig = vec![0usize; rank];
        for (level, &o) in self.order.iter().enumerate() {
            let i = self.indices[level];
            if level < rank {
                orig[o] = i;
            } else {
                let b = o - rank;
                let d = self.block_map[b];
                orig[d] = orig[d] * self.block_size[b] + i;
            }
        }
        let mut flat = 0usize;
        for (&i, &d) in orig.iter().zip(self.shape) {
            if i >= d {
                return Err(invalid(
                    self.name,
                    format!("position {orig:?} outside {:?}", self.shape),
                ));
            }
            flat = flat * d + i;
        }
        let src = self.next * self.elem;
        let Some(value) = self.data.get(src..src + self.elem) else {
            return Err(invalid(self.name, "more positions than stored values"));
        };
        let dst = flat * self.elem;
        self.dense[dst..dst + self.elem].copy_from_slice(value);
        self.next += 1;
        Ok(())
    }
}
