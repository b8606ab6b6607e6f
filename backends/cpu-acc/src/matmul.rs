//! MatMul (numpy batched, broadcasting) and Gemm on the packed SGEMM, with constant right-hand
//! sides packed at workload creation and an optional fused column bias and activation.

use crate::act::Activation;
use crate::gemm::{self, ASrc, BSrc, Epilogue, MatView, Packed};
use crate::io::{f32s, f32s_mut, input, output, Io};
use crate::threads::Threads;
use backplane_backend_api::{BackendError, Result, Workload};
use backplane_core::ops::GemmDesc;
use backplane_core::shape::{broadcast_shapes, broadcast_strides};
use backplane_core::{Tensor, TensorView, TensorViewMut};

/// numpy MatMul, optionally `+ bias[n]` and an activation.
pub struct MatMulWorkload {
    io: Io,
    m: usize,
    k: usize,
    n: usize,
    /// Batch offsets (in matrices) of A and B for each output matrix.
    batches: Vec<(usize, usize)>,
    /// B packed at load time, when constant and shared by every batch.
    packed_b: Option<Packed>,
    /// Rows of A that form one GEMM when B is shared (A's batch folded into M).
    fold_rows: usize,
    bias: Option<Vec<f32>>,
    act: Activation,
    threads: Threads,
}

impl MatMulWorkload {
    /// Build it: `b` is B's value when constant, `bias` a column bias of n values.
    pub fn new(
        io: Io,
        b: Option<&Tensor>,
        bias: Option<Vec<f32>>,
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
        if ad.is_empty() || bd.is_empty() {
            return Err(bad("MatMul inputs must have rank >= 1"));
        }
        let a2: Vec<usize> = if ad.len() == 1 {
            vec![1, ad[0]]
        } else {
            ad.clone()
        };
        let b2: Vec<usize> = if bd.len() == 1 {
            vec![bd[0], 1]
        } else {
            bd.clone()
        };
        let (m, k) = (a2[a2.len() - 2], a2[a2.len() - 1]);
        let n = b2[b2.len() - 1];
        if b2[b2.len() - 2] != k {
            return Err(bad("inner dimensions differ"));
        }
        let (ab, bb) = (&a2[..a2.len() - 2], &b2[..b2.len() - 2]);
        let batch = broadcast_shapes(ab, bb)?;
        let sa = broadcast_strides(ab, &batch);
        let sb = broadcast_strides(bb, &batch);
        let count: usize = batch.iter().product();
        let mut batches = Vec::with_capacity(count);
        for idx in 0..count {
            let (mut rem, mut oa, mut ob) = (idx, 0, 0);
            for i in (0..batch.len()).rev() {
                let d = rem % batch[i];
                rem /= batch[i];
                oa += d * sa[i];
                ob += d * sb[i];
            }
            batches.push((oa, ob));
        }
        let b_shared = bb.iter().all(|&d| d == 1);
        // With one B for all batches and A's batches laid out contiguously in output order,
        // the whole product is one GEMM with batch·m rows.
        let fold = b_shared && ab.len() == batch.len() && ab == batch.as_slice();
        let packed_b = match (b, b_shared) {
            (Some(t), true) => {
                let data = t.as_slice::<f32>()?;
                Some(Packed::pack_b(k, n, MatView { data, rs: n, cs: 1 }))
            }
            _ => None,
        };
        if let Some(b) = &bias {
            if b.len() != n {
                return Err(bad("bias length differs from N"));
            }
        }
        Ok(MatMulWorkload {
            io,
            m,
            k,
            n,
            fold_rows: if fold { count * m } else { 0 },
            batches,
            packed_b,
            bias,
            act,
            threads,
        })
    }
}

impl Workload for MatMulWorkload {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        self.io.check(inputs, outputs)?;
        let a = f32s(input(inputs, 0)?)?;
        let b = f32s(input(inputs, 1)?)?;
        let y = f32s_mut(output(outputs)?)?;
        let (m, k, n) = (self.m, self.k, self.n);
        let ep = Epilogue {
            col_bias: self.bias.as_deref(),
            act: self.act,
            ..Epilogue::default()
        };
        let bsrc_of = |ob: usize| match &self.packed_b {
            Some(p) => BSrc::Packed(p),
            None => BSrc::View(MatView {
                data: &b[ob * k * n..(ob + 1) * k * n],
                rs: n,
                cs: 1,
            }),
        };
        if self.fold_rows > 0 {
            let rows = self.fold_rows;
            let asrc = ASrc::View(MatView {
                data: a,
                rs: k,
                cs: 1,
            });
            return gemm::sgemm(&self.threads, rows, n, k, &asrc, &bsrc_of(0), y, n, &ep);
        }
        for (i, &(oa, ob)) in self.batches.iter().enumerate() {
            let asrc = ASrc::View(MatView {
                data: &a[oa * m * k..(oa + 1) * m * k],
                rs: k,
                cs: 1,
            });
            let out = &mut y[i * m * n..(i + 1) * m * n];
            gemm::sgemm(&self.threads, m, n, k, &asrc, &bsrc_of(ob), out, n, &ep)?;
        }
        Ok(())
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
    packed_b: Option<Packed>,
    c: CTerm,
    act: Activation,
    threads: Threads,
}

impl GemmWorkload {
    /// Build it from the constant B and C when known.
    pub fn new(
        io: Io,
        desc: GemmDesc,
        b: Option<&Tensor>,
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
            Some(t) => Some(Packed::pack_b(
                k,
                n,
                b_view(&desc, t.as_slice::<f32>()?, k, n),
            )),
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

fn b_view<'a>(desc: &GemmDesc, data: &'a [f32], k: usize, n: usize) -> MatView<'a> {
    if desc.trans_b {
        MatView { data, rs: 1, cs: k }
    } else {
        MatView { data, rs: n, cs: 1 }
    }
}

impl Workload for GemmWorkload {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        self.io.check(inputs, outputs)?;
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
