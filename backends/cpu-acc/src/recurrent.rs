//! RNN, GRU and LSTM (f32): the input projection of every timestep as one SGEMM per
//! direction, then per step the small recurrent SGEMM and the gate math vectorized over the
//! hidden units. Constant W and R are packed once at load, constant biases summed there.

use crate::act::Activation;
use crate::gemm::{self, ASrc, BSrc, Epilogue, MatView, Packed};
use crate::io::{f32s, f32s_mut, input, Io};
use crate::threads::Threads;
use backplane_backend_api::{BackendError, LayerDesc, Result, Workload};
use backplane_core::ops::{RnnActivation, RnnActivationKind, RnnDesc, RnnDirection, RnnKind};
use backplane_core::{DataType, Tensor, TensorView, TensorViewMut};

/// Multiply-adds of one step's recurrent product from which the pool is used for it.
const STEP_PARALLEL_WORK: usize = 1 << 18;

/// The CpuAcc activation computing a recurrent activation, for those CpuAcc has.
fn activation(a: &RnnActivation) -> Option<Activation> {
    Some(match a.kind {
        RnnActivationKind::Sigmoid => Activation::Sigmoid,
        RnnActivationKind::Tanh => Activation::Tanh,
        RnnActivationKind::Relu => Activation::Relu,
        RnnActivationKind::LeakyRelu => Activation::LeakyRelu { alpha: a.alpha },
        RnnActivationKind::HardSigmoid => Activation::HardSigmoid {
            alpha: a.alpha,
            beta: a.beta,
        },
        RnnActivationKind::Elu => Activation::Elu { alpha: a.alpha },
        RnnActivationKind::Softplus => Activation::Softplus,
        _ => return None,
    })
}

/// Why CpuAcc cannot run the recurrent layer `layer`, if it cannot (the layer's shapes have
/// been checked against `desc` already).
pub fn check(desc: &RnnDesc, layer: &LayerDesc) -> std::result::Result<(), String> {
    let name = desc.name();
    let x = layer
        .inputs
        .first()
        .ok_or_else(|| format!("{name} has no input"))?;
    if x.dtype != DataType::F32 {
        return Err(format!(
            "{name} on {}: CpuAcc computes it on f32 only",
            x.dtype
        ));
    }
    if x.shape.dims().contains(&0) || desc.hidden_size == 0 {
        return Err(format!("{name} with an empty dimension"));
    }
    if let Some(a) = desc.activations.iter().find(|a| activation(a).is_none()) {
        return Err(format!(
            "{name} activation {} is not implemented by CpuAcc",
            a.kind.name()
        ));
    }
    Ok(())
}

/// The B side of `data` (rows of `n` gates, `k` long each) read transposed.
fn transposed(data: &[f32], k: usize) -> MatView<'_> {
    MatView { data, rs: 1, cs: k }
}

/// `Bᵀ` of `data` packed at load for products of `m` rows, its half-panels laid out for the
/// tiles that will read it.
fn pack(k: usize, n: usize, data: &[f32], m: usize) -> Packed {
    let packed = Packed::pack_b(k, n, transposed(data, k));
    if gemm::in_place_tiles(m, 1, &Epilogue::default()) {
        packed.with_halves(gemm::halves_for(k))
    } else {
        packed
    }
}

/// The biases of one direction: the column bias of the input projection (W's and R's summed
/// where the cell allows) and, for a GRU with linear_before_reset, R's candidate bias.
fn biases(desc: &RnnDesc, b: &[f32], d: usize, h: usize) -> Option<(Vec<f32>, Vec<f32>)> {
    let gh = desc.kind.gates() * h;
    let wb = b.get(d * 2 * gh..d * 2 * gh + gh)?;
    let rb = b.get(d * 2 * gh + gh..(d + 1) * 2 * gh)?;
    let mut col: Vec<f32> = wb.iter().zip(rb).map(|(a, c)| a + c).collect();
    let mut rbh = Vec::new();
    if desc.kind == RnnKind::Gru && desc.linear_before_reset {
        col[2 * h..].copy_from_slice(&wb[2 * h..]);
        rbh = rb[2 * h..].to_vec();
    }
    Some((col, rbh))
}

/// One direction's load-time products: packed W and R (when constant) and biases.
struct DirPlan {
    /// Wᵀ packed ([input, gates·hidden]).
    w: Option<Packed>,
    /// Rᵀ packed: all gates, or for a GRU without linear_before_reset the z and r gates.
    r: Option<Packed>,
    /// A GRU without linear_before_reset: the candidate gate's Rᵀ.
    r_h: Option<Packed>,
    /// Biases, when B is constant.
    bias: Option<(Vec<f32>, Vec<f32>)>,
}

/// An RNN, GRU or LSTM layer.
pub struct RecurrentWorkload {
    io: Io,
    desc: RnnDesc,
    seq: usize,
    batch: usize,
    input: usize,
    hidden: usize,
    dirs: Vec<DirPlan>,
    /// Activations per direction: f, g, h (as many as the cell uses).
    acts: Vec<Vec<Activation>>,
    threads: Threads,
    single: Threads,
}

impl RecurrentWorkload {
    /// Plan the layer: `k(slot)` is input `slot` when constant.
    pub fn new<'a>(
        io: Io,
        desc: &RnnDesc,
        k: impl Fn(usize) -> Option<&'a Tensor>,
        threads: Threads,
    ) -> Result<Self> {
        let bad = |m: &str| BackendError::Other(format!("{}: {m}", io.layer));
        let xd = io.input_dims()?;
        let [a0, a1, input] = xd.as_slice() else {
            return Err(bad("X must have rank 3"));
        };
        let (seq, batch) = if desc.batch_first {
            (*a1, *a0)
        } else {
            (*a0, *a1)
        };
        let (input, h) = (*input, desc.hidden_size);
        let g = desc.kind.gates();
        let gh = g * h;
        let split_r = desc.kind == RnnKind::Gru && !desc.linear_before_reset;
        let count = desc.direction.count();
        let per = desc.kind.activations_per_direction();
        let mut dirs = Vec::with_capacity(count);
        let mut acts = Vec::with_capacity(count);
        for d in 0..count {
            let group = desc
                .activations
                .get(d * per..(d + 1) * per)
                .ok_or_else(|| bad("activations are missing"))?;
            acts.push(
                group
                    .iter()
                    .map(activation)
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| bad("an activation is not implemented"))?,
            );
            let slice = |slot: usize, len: usize| -> Result<Option<&[f32]>> {
                match k(slot) {
                    Some(t) => Ok(Some(
                        t.as_slice::<f32>()?
                            .get(d * len..(d + 1) * len)
                            .ok_or_else(|| bad("a weight is too short"))?,
                    )),
                    None => Ok(None),
                }
            };
            let w = slice(1, gh * input)?.map(|w| pack(input, gh, w, seq * batch));
            let rd = slice(2, gh * h)?;
            let (r, r_h) = match rd {
                Some(rd) if split_r => (
                    Some(pack(h, 2 * h, &rd[..2 * h * h], batch)),
                    Some(pack(h, h, &rd[2 * h * h..], batch)),
                ),
                Some(rd) => (Some(pack(h, gh, rd, batch)), None),
                None => (None, None),
            };
            let bias = match k(3) {
                Some(t) => Some(
                    biases(desc, t.as_slice::<f32>()?, d, h)
                        .ok_or_else(|| bad("B is too short"))?,
                ),
                None => None,
            };
            dirs.push(DirPlan { w, r, r_h, bias });
        }
        Ok(RecurrentWorkload {
            io,
            desc: desc.clone(),
            seq,
            batch,
            input,
            hidden: h,
            dirs,
            acts,
            threads,
            single: Threads::single(),
        })
    }

    /// Row of X (and of the projection) holding timestep `t` of batch entry `b`.
    fn x_row(&self, t: usize, b: usize) -> usize {
        if self.desc.batch_first {
            b * self.seq + t
        } else {
            t * self.batch + b
        }
    }

    /// Offset of a state (initial_h, Y_h, ...) of direction `d`, batch entry `b`.
    fn state(&self, d: usize, b: usize) -> usize {
        let dirs = self.dirs.len();
        if self.desc.batch_first {
            (b * dirs + d) * self.hidden
        } else {
            (d * self.batch + b) * self.hidden
        }
    }

    /// Offset of Y's row for timestep `t`, direction `d`, batch entry `b`.
    fn y(&self, t: usize, d: usize, b: usize) -> usize {
        let dirs = self.dirs.len();
        if self.desc.batch_first {
            ((b * self.seq + t) * dirs + d) * self.hidden
        } else {
            ((t * dirs + d) * self.batch + b) * self.hidden
        }
    }

    /// The sequence lengths, each in `0..=seq`.
    fn lens(&self, v: &TensorView<'_>) -> Result<Vec<usize>> {
        let raw: Vec<i64> = match v.info.dtype {
            DataType::I32 => v.as_slice::<i32>()?.iter().map(|&l| i64::from(l)).collect(),
            DataType::I64 => v.as_slice::<i64>()?.to_vec(),
            other => {
                return Err(self.io.error(format!("sequence_lens of type {other}")));
            }
        };
        raw.into_iter()
            .map(|l| {
                usize::try_from(l)
                    .ok()
                    .filter(|&n| n <= self.seq)
                    .ok_or_else(|| {
                        self.io
                            .error(format!("sequence length {l} is not in 0..={}", self.seq))
                    })
            })
            .collect()
    }

    /// Clamp gate inputs to the clip range, if any.
    fn clip(&self, v: &mut [f32]) {
        if let Some(c) = self.desc.clip {
            for x in v {
                *x = if *x < -c {
                    -c
                } else if *x > c {
                    c
                } else {
                    *x
                };
            }
        }
    }
}

/// The run-time data of one layer execution.
struct Data<'a> {
    x: &'a [f32],
    w: &'a [f32],
    r: &'a [f32],
    b: &'a [f32],
    h0: &'a [f32],
    c0: &'a [f32],
    p: &'a [f32],
    lens: Vec<usize>,
}

/// The B operand: packed when planned, else read in place.
fn bsrc<'a>(packed: &'a Option<Packed>, data: &'a [f32], k: usize) -> BSrc<'a> {
    match packed {
        Some(p) => BSrc::Packed(p),
        None => BSrc::View(transposed(data, k)),
    }
}

impl RecurrentWorkload {
    /// Run direction `d`, writing its Y rows (when `y` is not empty) and final states.
    fn direction(
        &self,
        d: usize,
        data: &Data<'_>,
        y: &mut [f32],
        y_h: &mut [f32],
        y_c: &mut [f32],
    ) -> Result<()> {
        let (h, input, batch) = (self.hidden, self.input, self.batch);
        let kind = self.desc.kind;
        let gh = kind.gates() * h;
        let plan = &self.dirs[d];
        let acts = &self.acts[d];
        let short = || self.io.error("an input is shorter than its shape".into());
        let wd = data
            .w
            .get(d * gh * input..(d + 1) * gh * input)
            .ok_or_else(short)?;
        let rd = data.r.get(d * gh * h..(d + 1) * gh * h).ok_or_else(short)?;
        let computed;
        let (col_bias, rb_h) = match &plan.bias {
            Some((c, r)) => (c.as_slice(), r.as_slice()),
            None => {
                computed = biases(&self.desc, data.b, d, h).ok_or_else(short)?;
                (computed.0.as_slice(), computed.1.as_slice())
            }
        };
        // The input projection of every timestep: X·Wᵀ + biases.
        let rows = self.seq * batch;
        let mut proj = vec![0f32; rows * gh];
        let ep = Epilogue {
            col_bias: Some(col_bias),
            ..Epilogue::default()
        };
        let xa = ASrc::View(MatView {
            data: data.x,
            rs: input,
            cs: 1,
        });
        gemm::sgemm(
            &self.threads,
            rows,
            gh,
            input,
            &xa,
            &bsrc(&plan.w, wd, input),
            &mut proj,
            gh,
            &ep,
        )?;
        // States [batch, hidden].
        let mut hs = vec![0f32; batch * h];
        let mut cs = vec![0f32; batch * h];
        for b in 0..batch {
            let s = self.state(d, b);
            hs[b * h..(b + 1) * h].copy_from_slice(data.h0.get(s..s + h).ok_or_else(short)?);
            if kind == RnnKind::Lstm {
                cs[b * h..(b + 1) * h].copy_from_slice(data.c0.get(s..s + h).ok_or_else(short)?);
            }
        }
        let peep = if kind == RnnKind::Lstm {
            data.p.get(d * 3 * h..(d + 1) * 3 * h).ok_or_else(short)?
        } else {
            &[]
        };
        let split_r = kind == RnnKind::Gru && !self.desc.linear_before_reset;
        let reverse = self.desc.direction == RnnDirection::Reverse || d == 1;
        let step_th = if batch * gh * h >= STEP_PARALLEL_WORK {
            &self.threads
        } else {
            &self.single
        };
        let none = Epilogue::default();
        let mut hr = vec![0f32; batch * gh];
        let mut gates = vec![0f32; gh];
        let mut reset_h = if split_r {
            vec![0f32; batch * h]
        } else {
            Vec::new()
        };
        let longest = data.lens.iter().copied().max().unwrap_or(0);
        for step in 0..longest {
            // The recurrent product H·Rᵀ for every batch entry (those past their length are
            // left unchanged below).
            let (r_cols, r_data) = if split_r {
                (2 * h, &rd[..2 * h * h])
            } else {
                (gh, rd)
            };
            let ha = ASrc::View(MatView {
                data: &hs,
                rs: h,
                cs: 1,
            });
            gemm::sgemm(
                step_th,
                batch,
                r_cols,
                h,
                &ha,
                &bsrc(&plan.r, r_data, h),
                &mut hr,
                gh,
                &none,
            )?;
            let active = |b: usize| data.lens.get(b).is_some_and(|&l| step < l);
            let time = |b: usize| {
                let len = data.lens.get(b).copied().unwrap_or(0);
                if reverse {
                    len - 1 - step
                } else {
                    step
                }
            };
            if split_r {
                // GRU (linear_before_reset = 0): the reset gate scales H before R_h.
                for b in (0..batch).filter(|&b| active(b)) {
                    let p = &proj[self.x_row(time(b), b) * gh..][..2 * h];
                    let r = &mut gates[h..2 * h];
                    for ((o, &a), &c) in r.iter_mut().zip(&p[h..]).zip(&hr[b * gh + h..]) {
                        *o = a + c;
                    }
                    self.clip(r);
                    crate::simd::unary_in_place(acts[0], r);
                    for ((o, &rv), &hv) in reset_h[b * h..(b + 1) * h]
                        .iter_mut()
                        .zip(r.iter())
                        .zip(&hs[b * h..])
                    {
                        *o = rv * hv;
                    }
                }
                let ra = ASrc::View(MatView {
                    data: &reset_h,
                    rs: h,
                    cs: 1,
                });
                gemm::sgemm(
                    step_th,
                    batch,
                    h,
                    h,
                    &ra,
                    &bsrc(&plan.r_h, &rd[2 * h * h..], h),
                    &mut hr[2 * h..],
                    gh,
                    &none,
                )?;
            }
            for b in (0..batch).filter(|&b| active(b)) {
                let t = time(b);
                let p = &proj[self.x_row(t, b) * gh..][..gh];
                for ((o, &a), &c) in gates.iter_mut().zip(p).zip(&hr[b * gh..]) {
                    *o = a + c;
                }
                let hb = &mut hs[b * h..(b + 1) * h];
                match kind {
                    RnnKind::Rnn => {
                        self.clip(&mut gates);
                        crate::simd::unary_in_place(acts[0], &mut gates);
                        hb.copy_from_slice(&gates);
                    }
                    RnnKind::Gru => {
                        let (zr, cand) = gates.split_at_mut(2 * h);
                        if !split_r {
                            // linear_before_reset: candidate = x·W_h + wb_h + r ⊙ (h·R_h + rb_h);
                            // the sum above added h·R_h unscaled, so start again from x·W_h.
                            let (px, pr) = (&p[2 * h..], &hr[b * gh + 2 * h..(b + 1) * gh]);
                            cand.copy_from_slice(&px[..h]);
                            self.clip(zr);
                            crate::simd::unary_in_place(acts[0], zr);
                            let r = &zr[h..];
                            for (((o, &rv), &rr), &rb) in cand.iter_mut().zip(r).zip(pr).zip(rb_h) {
                                *o += rv * (rr + rb);
                            }
                        } else {
                            self.clip(zr);
                            crate::simd::unary_in_place(acts[0], zr);
                        }
                        self.clip(cand);
                        crate::simd::unary_in_place(acts[1], cand);
                        let z = &zr[..h];
                        for ((o, &zv), &cv) in hb.iter_mut().zip(z).zip(cand.iter()) {
                            *o = (1.0 - zv) * cv + zv * *o;
                        }
                    }
                    RnnKind::Lstm => {
                        let cb = &mut cs[b * h..(b + 1) * h];
                        let (io_, fc) = gates.split_at_mut(2 * h);
                        let (ig, og) = io_.split_at_mut(h);
                        let (fg, cg) = fc.split_at_mut(h);
                        for ((o, &pv), &cv) in ig.iter_mut().zip(&peep[..h]).zip(cb.iter()) {
                            *o += pv * cv;
                        }
                        self.clip(ig);
                        crate::simd::unary_in_place(acts[0], ig);
                        if self.desc.input_forget {
                            for (o, &iv) in fg.iter_mut().zip(ig.iter()) {
                                *o = 1.0 - iv;
                            }
                        } else {
                            for ((o, &pv), &cv) in fg.iter_mut().zip(&peep[2 * h..]).zip(cb.iter())
                            {
                                *o += pv * cv;
                            }
                            self.clip(fg);
                            crate::simd::unary_in_place(acts[0], fg);
                        }
                        self.clip(cg);
                        crate::simd::unary_in_place(acts[1], cg);
                        for (((c, &f), &i), &g) in
                            cb.iter_mut().zip(fg.iter()).zip(ig.iter()).zip(cg.iter())
                        {
                            *c = f * *c + i * g;
                        }
                        for ((o, &pv), &cv) in og.iter_mut().zip(&peep[h..2 * h]).zip(cb.iter()) {
                            *o += pv * cv;
                        }
                        self.clip(og);
                        crate::simd::unary_in_place(acts[0], og);
                        // Reuse the candidate slot for act(C).
                        cg.copy_from_slice(cb);
                        crate::simd::unary_in_place(acts[2], cg);
                        for ((o, &ov), &cv) in hb.iter_mut().zip(og.iter()).zip(cg.iter()) {
                            *o = ov * cv;
                        }
                    }
                }
                if !y.is_empty() {
                    let yo = self.y(t, d, b);
                    y.get_mut(yo..yo + h)
                        .ok_or_else(short)?
                        .copy_from_slice(&hs[b * h..(b + 1) * h]);
                }
            }
        }
        for b in 0..batch {
            let s = self.state(d, b);
            if !y_h.is_empty() {
                y_h.get_mut(s..s + h)
                    .ok_or_else(short)?
                    .copy_from_slice(&hs[b * h..(b + 1) * h]);
            }
            if !y_c.is_empty() {
                y_c.get_mut(s..s + h)
                    .ok_or_else(short)?
                    .copy_from_slice(&cs[b * h..(b + 1) * h]);
            }
        }
        Ok(())
    }
}

impl Workload for RecurrentWorkload {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        self.io.check(inputs, outputs)?;
        let get = |slot: usize| -> Result<&[f32]> { f32s(input(inputs, slot)?) };
        let lstm = self.desc.kind == RnnKind::Lstm;
        let data = Data {
            x: get(0)?,
            w: get(1)?,
            r: get(2)?,
            b: get(3)?,
            lens: self.lens(input(inputs, 4)?)?,
            h0: get(5)?,
            c0: if lstm { get(6)? } else { &[] },
            p: if lstm { get(7)? } else { &[] },
        };
        // Y, Y_h, Y_c as the layer produces them (an absent one is an empty slice).
        let mut slots = outputs.iter_mut();
        let mut outs: [&mut [f32]; 3] = [&mut [], &mut [], &mut []];
        for (o, &produced) in outs.iter_mut().zip(&self.desc.outputs) {
            if produced {
                let view = slots
                    .next()
                    .ok_or_else(|| self.io.error("an output buffer is missing".into()))?;
                *o = f32s_mut(view)?;
            }
        }
        let [y, y_h, y_c] = outs;
        // Rows past a sequence's end stay zero.
        y.fill(0.0);
        for d in 0..self.dirs.len() {
            self.direction(d, &data, y, y_h, y_c)?;
        }
        Ok(())
    }
}
