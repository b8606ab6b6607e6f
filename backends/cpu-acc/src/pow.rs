//! Pow of an f32 base. A constant exponent with one value that has an exact short form
//! (0, ±1, 2, 3, 4, -2, 1/2: the squares of variances, the cube of the tanh GELU, square
//! roots) is planned into multiplications, a division or a square root, computed so that
//! each result is CpuRef's (the f64 power rounded once to f32): products that are exact in
//! f64 or rounded once there. Any other exponent (of type f32, f64, i32 or i64, constant or
//! not) takes the general path, the f64 power per element, with broadcasting.

use crate::elementwise::{zip_broadcast, BroadcastPlan};
use crate::io::{f32s, f32s_mut, input, output, Io};
use crate::movement::PARALLEL_MIN;
use crate::plan::{done, Plan};
use crate::threads::Threads;
use backplane_backend_api::{BackendError, LayerDesc, Result, Workload};
use backplane_core::{DataType, Tensor, TensorView, TensorViewMut};

/// An exponent with an exact short form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Short {
    /// x⁰ = 1 (NaN included).
    Zero,
    /// x¹ = x.
    One,
    /// x², one f32 product (exact in f64, so rounded once).
    Two,
    /// x³, in f64: x² exact, one rounding, then to f32.
    Three,
    /// x⁴, in f64: (x²)² rounded once, then to f32.
    Four,
    /// 1 / x, in f64, then to f32.
    MinusOne,
    /// 1 / x², in f64 (x² exact), then to f32.
    MinusTwo,
    /// √x, with pow's special cases: √-0 = +0 and (-∞)^½ = +∞.
    Half,
}

impl Short {
    /// The short form of exponent `e`, if it has one.
    pub fn of(e: f64) -> Option<Short> {
        Some(match e {
            0.0 => Short::Zero,
            1.0 => Short::One,
            2.0 => Short::Two,
            3.0 => Short::Three,
            4.0 => Short::Four,
            -1.0 => Short::MinusOne,
            -2.0 => Short::MinusTwo,
            0.5 => Short::Half,
            _ => return None,
        })
    }

    /// `x` to this power, as CpuRef computes it.
    #[inline(always)]
    pub fn apply(self, x: f32) -> f32 {
        let d = f64::from(x);
        match self {
            Short::Zero => 1.0,
            Short::One => x,
            Short::Two => x * x,
            Short::Three => (d * d * d) as f32,
            Short::Four => {
                let s = d * d;
                (s * s) as f32
            }
            Short::MinusOne => (1.0 / d) as f32,
            Short::MinusTwo => (1.0 / (d * d)) as f32,
            Short::Half => {
                if x == f32::NEG_INFINITY {
                    f32::INFINITY
                } else {
                    // `+ 0.0` turns √-0 = -0 into pow's +0.
                    x.sqrt() + 0.0
                }
            }
        }
    }
}

/// The exponent types the general path reads.
const EXPONENTS: [DataType; 4] = [DataType::F32, DataType::F64, DataType::I32, DataType::I64];

/// The one value of a constant exponent that broadcasts onto the base's shape, if it is one.
fn uniform(e: &Tensor) -> Option<f64> {
    let v = e.to_f64_vec();
    let first = *v.first()?;
    v.iter().all(|&x| x == first).then_some(first)
}

/// Plan a Pow, or say why CpuAcc leaves it.
pub fn plan(layer: &LayerDesc) -> std::result::Result<Plan<'_>, String> {
    let (base, exponent) = match (layer.inputs.first(), layer.inputs.get(1)) {
        (Some(b), Some(e)) => (b, e),
        _ => return Err("Pow takes two inputs".into()),
    };
    if base.dtype != DataType::F32 || !EXPONENTS.contains(&exponent.dtype) {
        return Err(format!(
            "Pow of {} to {}: CpuAcc raises f32 bases to f32, f64, i32 or i64 exponents",
            base.dtype, exponent.dtype
        ));
    }
    let same_shape = layer
        .outputs
        .first()
        .is_some_and(|y| y.shape.dims() == base.shape.dims());
    let short = layer
        .constant(1)
        .and_then(uniform)
        .and_then(Short::of)
        .filter(|_| same_shape);
    Ok(Plan::new(move |io, threads| match short {
        Some(short) => done(ShortPowWorkload { io, short, threads }),
        None => done(PowWorkload::new(io, threads)?),
    }))
}

/// `y = x^e` for a constant exponent with a short form.
pub struct ShortPowWorkload {
    io: Io,
    short: Short,
    threads: Threads,
}

impl Workload for ShortPowWorkload {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        self.io.check(inputs, outputs)?;
        let x = f32s(input(inputs, 0)?)?;
        let y = f32s_mut(output(outputs)?)?;
        if x.len() != y.len() {
            return Err(self
                .io
                .error("Pow's base and output differ in length".into()));
        }
        let chunk = if x.len() <= PARALLEL_MIN {
            x.len()
        } else {
            self.threads.chunk_size(x.len(), 16 * 1024, 64)
        };
        let short = self.short;
        self.threads.chunks(y, chunk, |ci, yc| {
            let s = ci * chunk;
            let xs = x
                .get(s..s + yc.len())
                .ok_or_else(|| BackendError::Execution("Pow: a chunk leaves the base".into()))?;
            macro_rules! run {
                ($s:expr) => {
                    for (o, &v) in yc.iter_mut().zip(xs) {
                        *o = $s.apply(v);
                    }
                };
            }
            // One loop per form, so each is a straight vectorizable body.
            match short {
                Short::Zero => run!(Short::Zero),
                Short::One => run!(Short::One),
                Short::Two => run!(Short::Two),
                Short::Three => run!(Short::Three),
                Short::Four => run!(Short::Four),
                Short::MinusOne => run!(Short::MinusOne),
                Short::MinusTwo => run!(Short::MinusTwo),
                Short::Half => run!(Short::Half),
            }
            Ok(())
        })
    }
}

/// `y = x^e` per element with broadcasting, the power computed in f64 and rounded once.
pub struct PowWorkload {
    io: Io,
    plan: BroadcastPlan,
    threads: Threads,
}

impl PowWorkload {
    fn new(io: Io, threads: Threads) -> Result<Self> {
        let plan = BroadcastPlan::for_layer(&io)?;
        Ok(PowWorkload { io, plan, threads })
    }
}

/// The f64 power rounded once, as CpuRef computes a float power.
#[inline(always)]
fn pow_f64(p: f32, q: f64) -> f32 {
    f64::from(p).powf(q) as f32
}

impl Workload for PowWorkload {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        self.io.check(inputs, outputs)?;
        let (x, e) = (input(inputs, 0)?, input(inputs, 1)?);
        let x = f32s(x)?;
        let y = f32s_mut(output(outputs)?)?;
        let (th, plan) = (&self.threads, &self.plan);
        match e.info.dtype {
            DataType::F32 => zip_broadcast(th, plan, x, e.as_slice::<f32>()?, y, |p, q| {
                pow_f64(p, f64::from(q))
            }),
            DataType::F64 => zip_broadcast(th, plan, x, e.as_slice::<f64>()?, y, pow_f64),
            DataType::I32 => zip_broadcast(th, plan, x, e.as_slice::<i32>()?, y, |p, q| {
                pow_f64(p, f64::from(q))
            }),
            DataType::I64 => zip_broadcast(th, plan, x, e.as_slice::<i64>()?, y, |p, q| {
                pow_f64(p, q as f64)
            }),
            dt => Err(self.io.error(format!("Pow with a {dt} exponent"))),
        }
    }
}
