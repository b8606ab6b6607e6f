//! MatMul (numpy batched, broadcasting) and Gemm on the packed SGEMM, with constant right-hand
//! sides packed at workload creation and an optional fused scale, column bias and activation.
//! A fused MatMul may also read its operands and write its result through [`StridedView`]s:
//! the Reshape/Transpose layers around an attention product folded away, so the permuted
//! copies are never made.

use crate::act::Activation;
use crate::gemm::{self, ASrc, BSrc, Epilogue, MatView, Packed};
use crate::io::{f32s, f32s_mut, input, output, Io};
use crate::threads::Threads;
use crate::{simd, weights};
use backplane_backend_api::{BackendError, Result, Workload};
use backplane_core::ops::GemmDesc;
use backplane_core::shape::{broadcast_shapes, broadcast_strides, checked_product, strides_of};
use backplane_core::{Tensor, TensorView, TensorViewMut};
use std::sync::Arc;

/// A tensor seen through other dims: element `i` of the view (a multi-index) is element
/// `Σ i[d]·strides[d]` of the tensor's row-major storage. A Reshape followed by Transposes is
/// such a view of the Reshape's input; so is a MatMul result written through a Transpose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StridedView {
    /// The dims seen.
    pub dims: Vec<usize>,
    /// The storage stride of each dim, in elements.
    pub strides: Vec<usize>,
}

impl StridedView {
    /// Plain row-major storage of `dims`.
    pub fn row_major(dims: &[usize]) -> Self {
        StridedView {
            dims: dims.to_vec(),
            strides: strides_of(dims),
        }
    }

    /// The view after a Transpose: axis `i` is this view's axis `perm[i]` (`None` when `perm`
    /// is not a permutation of the axes).
    pub fn transposed(&self, perm: &[usize]) -> Option<Self> {
        let mut seen = vec![false; self.dims.len()];
        for &p in perm {
            if std::mem::replace(seen.get_mut(p)?, true) {
                return None;
            }
        }
        (perm.len() == self.dims.len()).then(|| StridedView {
            dims: perm.iter().map(|&p| self.dims[p]).collect(),
            strides: perm.iter().map(|&p| self.strides[p]).collect(),
        })
    }

    /// Elements of storage the view reaches: one past its largest offset (0 when empty,
    /// `usize::MAX` when it overflows).
    pub fn extent(&self) -> usize {
        if self.dims.contains(&0) {
            return 0;
        }
        self.dims
            .iter()
            .zip(&self.strides)
            .try_fold(1usize, |acc, (&d, &s)| {
                acc.checked_add((d - 1).checked_mul(s)?)
            })
            .unwrap_or(usize::MAX)
    }

    /// Whether the view addresses each of `len` stored elements exactly once (the storage
    /// is row-major in some order of the view's axes), so writing through it fills a tensor.
    pub fn fills(&self, len: usize) -> bool {
        if self.dims.len() != self.strides.len() {
            return false;
        }
        if checked_product(&self.dims) == Some(0) {
            return len == 0;
        }
        let mut axes: Vec<(usize, usize)> = self
            .strides
            .iter()
            .zip(&self.dims)
            .filter(|(_, &d)| d > 1)
            .map(|(&s, &d)| (s, d))
            .collect();
        axes.sort_unstable();
        let mut next = 1;
        for (s, d) in axes {
            if s != next {
                return false;
            }
            next = match s.checked_mul(d) {
                Some(v) => v,
                None => return false,
            };
        }
        next == len && checked_product(&self.dims) == Some(len)
    }
}

/// How a fused MatMul reads its operands and writes its result, and the scale of its product.
#[derive(Debug, Clone, PartialEq)]
pub struct MatMulViews {
    /// A read through a view of input 0 (`None`: input 0 as it is).
    pub a: Option<StridedView>,
    /// B read through a view of input 1.
    pub b: Option<StridedView>,
    /// The result (with the dims numpy MatMul gives it) written through a view of the
    /// output; its last axis must have stride 1.
    pub y: Option<StridedView>,
    /// `A·B` is scaled by this before the bias.
    pub alpha: f32,
}

impl Default for MatMulViews {
    fn default() -> Self {
        MatMulViews {
            a: None,
            b: None,
            y: None,
            alpha: 1.0,
        }
    }
}

/// numpy MatMul, optionally `alpha·A·B + bias[n]` and an activation, operands and result
/// possibly through [`StridedView`]s.
pub struct MatMulWorkload {
    io: Io,
    m: usize,
    k: usize,
    n: usize,
    /// Element offsets of A, B and the result's matrices, one triple per output matrix.
    batches: Vec<(usize, usize, usize)>,
    /// Row and column strides of A, B and the result (whose column stride is 1).
    a_step: (usize, usize),
    b_step: (usize, usize),
    ldc: usize,
    /// B packed at load time, when constant and shared by every batch.
    packed_b: Option<Arc<Packed>>,
    /// A's batch folded into M, when B is shared (see [`Fold`]).
    fold: Option<Fold>,
    alpha: f32,
    bias: Option<Vec<f32>>,
    act: Activation,
    threads: Threads,
}

/// One GEMM for every batch: with one B for all batches, A's batch axes and rows that step
/// through storage as one axis (uniformly), and the result's likewise, the whole product is
/// a single GEMM of `rows` rows (a row of A every `a_rs` elements, of C every `ldc`), not one
/// small product per batch. ViT's in-projection reads its input through a Transpose as 197
/// batches of one row: folded, the packed weights are read once, not 197 times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fold {
    rows: usize,
    a_rs: usize,
    a_cs: usize,
    ldc: usize,
}

/// The stride of the one axis that `axes` (size and stride, outermost first) step through
/// storage as, when they do (axes of size 1 take no part): `Some(0)` when all are of size 1.
fn collapsed_stride(axes: impl DoubleEndedIterator<Item = (usize, usize)>) -> Option<usize> {
    let mut inner: Option<(usize, usize)> = None;
    for (d, s) in axes.rev().filter(|&(d, _)| d != 1) {
        match inner {
            None if s == 0 => return None,
            None => inner = Some((s, d)),
            Some((step, len)) => {
                let next = step.checked_mul(len)?;
                if s != next {
                    return None;
                }
                inner = Some((step, len.checked_mul(d)?));
            }
        }
    }
    Some(inner.map_or(0, |(step, _)| step))
}

/// An operand of rank ≥ 2 (numpy promotes a vector: A to one row, B to one column).
fn as_matrices(v: StridedView, is_a: bool) -> StridedView {
    match (v.dims.as_slice(), v.strides.as_slice()) {
        ([d], [s]) if is_a => StridedView {
            dims: vec![1, *d],
            strides: vec![0, *s],
        },
        ([d], [s]) => StridedView {
            dims: vec![*d, 1],
            strides: vec![*s, 0],
        },
        _ => v,
    }
}

/// Element strides of `v`'s batch axes (all but the last two) against the broadcast `batch`
/// (aligned to the right; a broadcast axis of size 1 steps by 0).
fn batch_steps(v: &StridedView, batch: &[usize]) -> Vec<usize> {
    let own = v.dims.len() - 2;
    (0..batch.len())
        .map(|i| match (i + own).checked_sub(batch.len()) {
            Some(j) if v.dims[j] != 1 => v.strides[j],
            _ => 0,
        })
        .collect()
}

/// For each index of `batch` in row-major order, the element offsets of three operands whose
/// batch axes step by `steps` (0 on a broadcast axis): A's, B's and Y's matrices of a
/// batched product.
pub(crate) fn batch_offsets(batch: &[usize], steps: [&[usize]; 3]) -> Vec<(usize, usize, usize)> {
    let count: usize = batch.iter().product();
    let mut offsets = Vec::with_capacity(count);
    for idx in 0..count {
        let (mut rem, mut off) = (idx, (0, 0, 0));
        for i in (0..batch.len()).rev() {
            let d = rem % batch[i];
            rem /= batch[i];
            off.0 += d * steps[0][i];
            off.1 += d * steps[1][i];
            off.2 += d * steps[2][i];
        }
        offsets.push(off);
    }
    offsets
}

impl MatMulWorkload {
    /// Build it: `b` is B's value when constant, `bias` a column bias of n values, `views`
    /// how the operands are read and the result written.
    pub fn new(
        io: Io,
        b: Option<&Arc<Tensor>>,
        bias: Option<Vec<f32>>,
        act: Activation,
        views: MatMulViews,
        threads: Threads,
    ) -> Result<Self> {
        let bad = |m: &str| BackendError::Other(format!("{}: {m}", io.layer));
        let info = |slot: usize, what: &str| {
            io.inputs
                .get(slot)
                .ok_or_else(|| bad(&format!("no {what}")))
        };
        let (ai, bi) = (info(0, "A")?, info(1, "B")?);
        let yi = io.outputs.first().ok_or_else(|| bad("no output"))?;
        let view_of = |v: &Option<StridedView>, i: &backplane_core::TensorInfo| {
            v.clone()
                .unwrap_or_else(|| StridedView::row_major(i.shape.dims()))
        };
        let (av, bv) = (view_of(&views.a, ai), view_of(&views.b, bi));
        for (v, i) in [(&av, ai), (&bv, bi)] {
            if v.dims.is_empty() || v.dims.len() != v.strides.len() {
                return Err(bad("MatMul inputs must have rank >= 1"));
            }
            if v.extent() > i.shape.elements() {
                return Err(bad("an operand view reaches past its input"));
            }
        }
        let (av, bv) = (as_matrices(av, true), as_matrices(bv, false));
        let (ra, rb) = (av.dims.len(), bv.dims.len());
        let (m, k, n) = (av.dims[ra - 2], av.dims[ra - 1], bv.dims[rb - 1]);
        if bv.dims[rb - 2] != k {
            return Err(bad("inner dimensions differ"));
        }
        let batch = broadcast_shapes(&av.dims[..ra - 2], &bv.dims[..rb - 2])?;
        let mut y_dims = batch.clone();
        y_dims.extend([m, n]);
        let yv = match &views.y {
            Some(v) => v.clone(),
            None => StridedView::row_major(&y_dims),
        };
        let y_len = yi.shape.elements();
        if yv.dims != y_dims || !yv.fills(y_len) || (n > 1 && yv.strides[batch.len() + 1] != 1) {
            return Err(bad("the result view does not fill the output"));
        }
        let (sa, sb, sy) = (
            batch_steps(&av, &batch),
            batch_steps(&bv, &batch),
            yv.strides[..batch.len()].to_vec(),
        );
        let count: usize = batch.iter().product();
        let batches = batch_offsets(&batch, [&sa, &sb, &sy]);
        let b_shared = sb.iter().all(|&s| s == 0);
        let rows_of = |steps: &[usize], row: usize| {
            collapsed_stride(
                batch
                    .iter()
                    .copied()
                    .zip(steps.iter().copied())
                    .chain([(m, row)]),
            )
        };
        let y_row = yv.strides[batch.len()];
        let fold = match (
            b_shared,
            rows_of(&sa, av.strides[ra - 2]),
            rows_of(&sy, y_row),
        ) {
            (true, Some(a_rs), Some(ldc)) if count > 1 && ldc >= n => Some(Fold {
                rows: count * m,
                a_rs,
                a_cs: av.strides[ra - 1],
                ldc,
            }),
            _ => None,
        };
        // Split halves where every product takes the in-place tiles (A's rows read where
        // they lie), the one path that reads them.
        let (rows, a_cs) = match fold {
            Some(f) => (f.rows, f.a_cs),
            None => (m, av.strides[ra - 1]),
        };
        let in_place = gemm::in_place_tiles(rows, a_cs, &Epilogue::default());
        let packed_b = match (b, b_shared && views.b.is_none()) {
            (Some(t), true) => {
                let halves = match in_place {
                    true => Some(gemm::halves_for(k)),
                    false => None,
                };
                // Keyed by the layout the panels end up in: interleaved ones serve every path.
                let tag = usize::from(halves == Some(simd::Halves::Split));
                Some(weights::packed(t, "matmul_b", [k, n, tag, 0], || {
                    let data = t.as_slice::<f32>()?;
                    let packed = Packed::pack_b(k, n, MatView { data, rs: n, cs: 1 });
                    Ok(match halves {
                        Some(h) => packed.with_halves(h),
                        None => packed,
                    })
                })?)
            }
            _ => None,
        };
        if bias.as_ref().is_some_and(|b| b.len() != n) {
            return Err(bad("bias length differs from N"));
        }
        Ok(MatMulWorkload {
            m,
            k,
            n,
            a_step: (av.strides[ra - 2], av.strides[ra - 1]),
            b_step: (bv.strides[rb - 2], bv.strides[rb - 1]),
            ldc: if m > 1 { yv.strides[batch.len()] } else { n },
            fold,
            batches,
            packed_b,
            alpha: views.alpha,
            bias,
            act,
            threads,
            io,
        })
    }
}

impl Workload for MatMulWorkload {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        self.io
            .check_copied(inputs, outputs, |slot| !self.reads_input(slot))?;
        let a = f32s(input(inputs, 0)?)?;
        let b = f32s(input(inputs, 1)?)?;
        let y = f32s_mut(output(outputs)?)?;
        let (m, k, n) = (self.m, self.k, self.n);
        let ep = Epilogue {
            alpha: self.alpha,
            col_bias: self.bias.as_deref(),
            act: self.act,
            ..Epilogue::default()
        };
        let short = || self.io.error("an operand is shorter than its view".into());
        if let Some(f) = self.fold {
            let asrc = ASrc::View(MatView {
                data: a,
                rs: f.a_rs,
                cs: f.a_cs,
            });
            let bsrc = match &self.packed_b {
                Some(p) => BSrc::Packed(p),
                None => BSrc::View(MatView {
                    data: b,
                    rs: self.b_step.0,
                    cs: self.b_step.1,
                }),
            };
            return gemm::sgemm(&self.threads, f.rows, n, k, &asrc, &bsrc, y, f.ldc, &ep);
        }
        for &(oa, ob, oy) in &self.batches {
            let asrc = ASrc::View(MatView {
                data: a.get(oa..).ok_or_else(short)?,
                rs: self.a_step.0,
                cs: self.a_step.1,
            });
            let bsrc = match &self.packed_b {
                Some(p) => BSrc::Packed(p),
                None => BSrc::View(MatView {
                    data: b.get(ob..).ok_or_else(short)?,
                    rs: self.b_step.0,
                    cs: self.b_step.1,
                }),
            };
            let out = y.get_mut(oy..).ok_or_else(short)?;
            gemm::sgemm(&self.threads, m, n, k, &asrc, &bsrc, out, self.ldc, &ep)?;
        }
        Ok(())
    }

    fn reads_constant_input(&self, slot: usize) -> bool {
        self.reads_input(slot)
    }
}

impl MatMulWorkload {
    /// A and a B that was not packed at load are read at execution; a packed B and a fused
    /// bias (input 2 on) were copied when the workload was created.
    fn reads_input(&self, slot: usize) -> bool {
        slot == 0 || (slot == 1 && self.packed_b.is_none())
    }
}

/// How Gemm's C input is applied.
enum CTerm {
    None,
    /// beta·C as a column bias (C broadcasts along rows).
    Col(Vec<f32>),
    /// beta·C as a row bias (C is [m, 1]).
    Row(Vec<f32>),
    /// C is a run-time input or a full matrix: pre-fill the output with beta·C (broadcast).
    Fill,
}

/// Gemm: `act(alpha·op(A)·op(B) + beta·C)`.
pub struct GemmWorkload {
    io: Io,
    desc: GemmDesc,
    m: usize,
    k: usize,
    n: usize,
    packed_b: Option<Arc<Packed>>,
    c: CTerm,
    act: Activation,
    threads: Threads,
}

impl GemmWorkload {
    /// Build it from the constant B and C when known.
    pub fn new(
        io: Io,
        desc: GemmDesc,
        b: Option<&Arc<Tensor>>,
        c: Option<&Tensor>,
        act: Activation,
        threads: Threads,
    ) -> Result<Self> {
        let bad = |m: &str| BackendError::Other(format!("{}: {m}", io.layer));
        let ad = io
            .inputs
            .first()
            .ok_or_else(|| bad("no A"))?
            .shape
            .dims()
            .to_vec();
        let bd = io
            .inputs
            .get(1)
            .ok_or_else(|| bad("no B"))?
            .shape
            .dims()
            .to_vec();
        if ad.len() != 2 || bd.len() != 2 {
            return Err(bad("Gemm inputs must be 2-D"));
        }
        let (m, k) = if desc.trans_a {
            (ad[1], ad[0])
        } else {
            (ad[0], ad[1])
        };
        let n = if desc.trans_b { bd[0] } else { bd[1] };
        let packed_b = match b {
            Some(t) => Some(weights::packed(
                t,
                "gemm_b",
                [k, n, usize::from(desc.trans_b), 0],
                || {
                    Ok(Packed::pack_b(
                        k,
                        n,
                        b_view(&desc, t.as_slice::<f32>()?, k, n),
                    ))
                },
            )?),
            None => None,
        };
        let cterm = match (io.inputs.get(2), c) {
            (None, _) => CTerm::None,
            (Some(info), Some(t)) => {
                let cd = info.shape.dims();
                let v = t.as_slice::<f32>()?;
                let scaled = |len: usize, at: &dyn Fn(usize) -> usize| -> Vec<f32> {
                    (0..len).map(|i| desc.beta * v[at(i)]).collect()
                };
                let elems: usize = cd.iter().product();
                if elems == 1 {
                    CTerm::Col(scaled(n, &|_| 0))
                } else if cd.last() == Some(&n) && elems == n {
                    CTerm::Col(scaled(n, &|i| i))
                } else if cd.len() == 2 && cd[1] == 1 && cd[0] == m {
                    CTerm::Row(scaled(m, &|i| i))
                } else {
                    CTerm::Fill
                }
            }
            (Some(_), None) => CTerm::Fill,
        };
        Ok(GemmWorkload {
            io,
            desc,
            m,
            k,
            n,
            packed_b,
            c: cterm,
            act,
            threads,
        })
    }
}

impl GemmWorkload {
    /// A, a B that was not packed at load, and a C applied as a whole matrix are read at
    /// execution; a packed B and a C folded into a bias were copied at load.
    fn reads_input(&self, slot: usize) -> bool {
        match slot {
            0 => true,
            1 => self.packed_b.is_none(),
            2 => matches!(self.c, CTerm::Fill),
            _ => true,
        }
    }
}

fn b_view<'a>(desc: &GemmDesc, data: &'a [f32], k: usize, n: usize) -> MatView<'a> {
    if desc.trans_b {
        MatView { data, rs: 1, cs: k }
    } else {
        MatView { data, rs: n, cs: 1 }
    }
}

impl Workload for GemmWorkload {
    fn reads_constant_input(&self, slot: usize) -> bool {
        self.reads_input(slot)
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        self.io
            .check_copied(inputs, outputs, |slot| !self.reads_input(slot))?;
        let a = f32s(input(inputs, 0)?)?;
        let (m, k, n) = (self.m, self.k, self.n);
        let c_in = inputs.get(2);
        let y = f32s_mut(output(outputs)?)?;
        let mut ep = Epilogue {
            alpha: self.desc.alpha,
            act: self.act,
            ..Epilogue::default()
        };
        match &self.c {
            CTerm::None => {}
            CTerm::Col(v) => ep.col_bias = Some(v),
            CTerm::Row(v) => ep.row_bias = Some(v),
            CTerm::Fill => {
                let c = c_in.ok_or_else(|| self.io.error("C is missing".into()))?;
                let cv = f32s(c)?;
                let st = broadcast_strides(c.dims(), &[m, n]);
                for i in 0..m {
                    for j in 0..n {
                        y[i * n + j] = self.desc.beta * cv[i * st[0] + j * st[1]];
                    }
                }
                ep.accumulate = true;
            }
        }
        let asrc = ASrc::View(if self.desc.trans_a {
            MatView {
                data: a,
                rs: 1,
                cs: m,
            }
        } else {
            MatView {
                data: a,
                rs: k,
                cs: 1,
            }
        });
        let bsrc = match &self.packed_b {
            Some(p) => BSrc::Packed(p),
            None => BSrc::View(b_view(&self.desc, f32s(input(inputs, 1)?)?, k, n)),
        };
        gemm::sgemm(&self.threads, m, n, k, &asrc, &bsrc, y, n, &ep)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use backplane_core::{DataType, TensorInfo};

    #[test]
    fn strided_views_follow_transposes_and_know_when_they_fill() {
        let v = StridedView::row_major(&[2, 3, 4]);
        assert_eq!(v.strides, [12, 4, 1]);
        assert_eq!(v.extent(), 24);
        assert!(v.fills(24) && !v.fills(25));
        let t = v.transposed(&[1, 0, 2]).unwrap();
        assert_eq!(
            (t.dims.as_slice(), t.strides.as_slice()),
            (&[3, 2, 4][..], &[4, 12, 1][..])
        );
        assert!(t.fills(24));
        assert_eq!(v.transposed(&[0, 0, 1]), None);
        assert_eq!(v.transposed(&[0, 1]), None);
        // Two axes on one stride overlap; a gap leaves elements unwritten.
        let overlap = StridedView {
            dims: vec![2, 3],
            strides: vec![1, 1],
        };
        assert!(!overlap.fills(6));
        let gap = StridedView {
            dims: vec![2, 3],
            strides: vec![4, 1],
        };
        assert!(!gap.fills(6) && gap.extent() == 7);
        assert!(StridedView::row_major(&[0, 3]).fills(0));
        let huge = StridedView {
            dims: vec![3],
            strides: vec![usize::MAX],
        };
        assert_eq!(huge.extent(), usize::MAX);
    }

    fn io(a: &[usize], b: &[usize], y: &[usize]) -> Io {
        let f = |d: &[usize]| TensorInfo::new(DataType::F32, d.to_vec());
        Io {
            layer: "mm".into(),
            inputs: vec![f(a), f(b)],
            outputs: vec![f(y)],
        }
    }

    /// Views that would read or write outside the tensors are refused at creation.
    #[test]
    fn views_outside_their_tensors_are_refused() {
        let th = Threads::single();
        let past = MatMulViews {
            a: Some(StridedView {
                dims: vec![2, 3],
                strides: vec![4, 1],
            }),
            ..MatMulViews::default()
        };
        let r = MatMulWorkload::new(
            io(&[6], &[3, 2], &[2, 2]),
            None,
            None,
            Activation::None,
            past,
            th.clone(),
        );
        assert!(r.is_err());
        let not_filling = MatMulViews {
            y: Some(StridedView {
                dims: vec![2, 2],
                strides: vec![1, 1],
            }),
            ..MatMulViews::default()
        };
        let r = MatMulWorkload::new(
            io(&[2, 3], &[3, 2], &[2, 2]),
            None,
            None,
            Activation::None,
            not_filling,
            th,
        );
        assert!(r.is_err());
    }

    /// A transposed operand and a transposed result give what the plain product gives.
    #[test]
    fn strided_operands_and_result_match_the_plain_product() {
        let th = Threads::single();
        let (m, k, n) = (3, 5, 4);
        let a: Vec<f32> = (0..m * k).map(|i| i as f32 * 0.25 - 1.0).collect();
        let b: Vec<f32> = (0..k * n).map(|i| (i % 7) as f32 - 3.0).collect();
        // B given as its transpose [n, k], read through a view.
        let bt: Vec<f32> = (0..n * k).map(|i| b[(i % k) * n + i / k]).collect();
        let views = MatMulViews {
            b: Some(StridedView::row_major(&[n, k]).transposed(&[1, 0]).unwrap()),
            alpha: 0.5,
            ..MatMulViews::default()
        };
        let w = MatMulWorkload::new(
            io(&[m, k], &[n, k], &[m, n]),
            None,
            None,
            Activation::None,
            views,
            th,
        )
        .unwrap();
        let at = Tensor::from_vec(vec![m, k], a.clone()).unwrap();
        let bt = Tensor::from_vec(vec![n, k], bt).unwrap();
        let mut y = Tensor::from_vec(vec![m, n], vec![f32::NAN; m * n]).unwrap();
        w.execute(&[at.view(), bt.view()], &mut [y.view_mut()])
            .unwrap();
        let got = y.as_slice::<f32>().unwrap();
        for i in 0..m {
            for j in 0..n {
                let want: f32 = 0.5 * (0..k).map(|l| a[i * k + l] * b[l * n + j]).sum::<f32>();
                assert!((got[i * n + j] - want).abs() < 1e-4, "{i},{j}");
            }
        }
    }
}
