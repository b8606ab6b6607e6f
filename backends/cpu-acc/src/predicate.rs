//! Predicates: comparisons (Equal, Less, LessOrEqual, Greater, GreaterOrEqual), logical
//! operators (And, Or, Xor, Not) and float classification (IsNaN, IsInf). Their results are
//! bool tensors (one byte, 0 or 1) with exactly CpuRef's values: comparisons follow IEEE (NaN
//! compares false, +0 equals -0), integers compare exactly, bool inputs read any non-zero
//! byte as true. They sit in the hot paths of transformers (attention masks, padding checks),
//! so leaving them to CpuRef costs a widening of every element to a scalar and back.

use crate::elementwise::{zip_broadcast, BroadcastPlan};
use crate::io::{input, output, Io};
use crate::movement::PARALLEL_MIN;
use crate::plan::{done, Plan};
use crate::threads::Threads;
use backplane_backend_api::{BackendError, LayerDesc, Result, Workload};
use backplane_core::ops::{BinaryExtOp, MathOp};
use backplane_core::{DataType, TensorView, TensorViewMut};
use half::f16;

/// The types CpuAcc compares (u64 stays on CpuRef).
const ORDERED: [DataType; 10] = [
    DataType::F32,
    DataType::F64,
    DataType::F16,
    DataType::I8,
    DataType::U8,
    DataType::I16,
    DataType::U16,
    DataType::I32,
    DataType::U32,
    DataType::I64,
];

/// A comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cmp {
    Eq,
    Lt,
    Le,
    Gt,
    Ge,
}

/// A logical operator on two bools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Logic {
    And,
    Or,
    Xor,
}

/// What a two-input predicate workload computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pred2 {
    /// A comparison of two tensors of an [`ORDERED`] type.
    Cmp(Cmp, DataType),
    /// Equal on bools.
    BoolEq,
    /// And, Or, Xor.
    Logic(Logic),
}

/// What a one-input predicate workload computes.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Pred1 {
    /// IsNaN on a float type.
    IsNaN(DataType),
    /// IsInf on a float type, by sign.
    IsInf {
        dtype: DataType,
        negative: bool,
        positive: bool,
    },
    /// Logical not.
    Not,
}

/// `$body` with `$T` the Rust type of `$dt` (one of [`ORDERED`]), else `$other`.
macro_rules! with_ordered {
    ($dt:expr, $T:ident => $body:expr, $other:expr) => {
        match $dt {
            DataType::F32 => {
                type $T = f32;
                $body
            }
            DataType::F64 => {
                type $T = f64;
                $body
            }
            DataType::F16 => {
                type $T = f16;
                $body
            }
            DataType::I8 => {
                type $T = i8;
                $body
            }
            DataType::U8 => {
                type $T = u8;
                $body
            }
            DataType::I16 => {
                type $T = i16;
                $body
            }
            DataType::U16 => {
                type $T = u16;
                $body
            }
            DataType::I32 => {
                type $T = i32;
                $body
            }
            DataType::U32 => {
                type $T = u32;
                $body
            }
            DataType::I64 => {
                type $T = i64;
                $body
            }
            _ => $other,
        }
    };
}

/// Plan a comparison or logical operator, or say why CpuAcc leaves it.
pub fn plan_binary(
    layer: &LayerDesc,
    op: BinaryExtOp,
) -> std::result::Result<Plan<'static>, String> {
    let dt = layer
        .inputs
        .first()
        .ok_or("a predicate takes two inputs")?
        .dtype;
    let cmp = |c| {
        if ORDERED.contains(&dt) {
            Ok(Pred2::Cmp(c, dt))
        } else {
            Err(format!(
                "{} on {dt}: CpuAcc compares floats and integers up to 32 bits unsigned, \
                 64 bits signed",
                op.name()
            ))
        }
    };
    let pred = match op {
        BinaryExtOp::Equal if dt == DataType::Bool => Pred2::BoolEq,
        BinaryExtOp::Equal => cmp(Cmp::Eq)?,
        BinaryExtOp::Less => cmp(Cmp::Lt)?,
        BinaryExtOp::LessOrEqual => cmp(Cmp::Le)?,
        BinaryExtOp::Greater => cmp(Cmp::Gt)?,
        BinaryExtOp::GreaterOrEqual => cmp(Cmp::Ge)?,
        BinaryExtOp::And => Pred2::Logic(Logic::And),
        BinaryExtOp::Or => Pred2::Logic(Logic::Or),
        BinaryExtOp::Xor => Pred2::Logic(Logic::Xor),
        other => return Err(format!("{} is not a predicate", other.name())),
    };
    if matches!(pred, Pred2::Logic(_)) && dt != DataType::Bool {
        return Err(format!("{} takes bool inputs", op.name()));
    }
    Ok(Plan::new(move |io, threads| {
        done(Predicate2Workload::new(io, pred, threads)?)
    }))
}

/// Plan IsNaN, IsInf or Not, or say why CpuAcc leaves it.
pub fn plan_unary(layer: &LayerDesc, op: MathOp) -> std::result::Result<Plan<'static>, String> {
    let dt = layer
        .inputs
        .first()
        .ok_or("a predicate takes one input")?
        .dtype;
    let float = matches!(dt, DataType::F32 | DataType::F64 | DataType::F16);
    let pred = match op {
        MathOp::IsNaN if float => Pred1::IsNaN(dt),
        MathOp::IsInf {
            detect_negative,
            detect_positive,
        } if float => Pred1::IsInf {
            dtype: dt,
            negative: detect_negative,
            positive: detect_positive,
        },
        MathOp::Not if dt == DataType::Bool => Pred1::Not,
        _ => return Err(format!("CpuAcc does not implement {} on {dt}", op.name())),
    };
    Ok(Plan::new(move |io, threads| {
        done(Predicate1Workload { io, pred, threads })
    }))
}

/// A comparison or logical operator with broadcasting.
pub struct Predicate2Workload {
    io: Io,
    pred: Pred2,
    plan: BroadcastPlan,
    threads: Threads,
}

impl Predicate2Workload {
    fn new(io: Io, pred: Pred2, threads: Threads) -> Result<Self> {
        let plan = BroadcastPlan::for_layer(&io)?;
        Ok(Predicate2Workload {
            io,
            pred,
            plan,
            threads,
        })
    }
}

/// `y = cmp(a, b)` as bytes.
fn compare<T: PartialOrd + Copy + Sync>(
    th: &Threads,
    plan: &BroadcastPlan,
    c: Cmp,
    a: &[T],
    b: &[T],
    y: &mut [u8],
) -> Result<()> {
    match c {
        Cmp::Eq => zip_broadcast(th, plan, a, b, y, |p, q| u8::from(p == q)),
        Cmp::Lt => zip_broadcast(th, plan, a, b, y, |p, q| u8::from(p < q)),
        Cmp::Le => zip_broadcast(th, plan, a, b, y, |p, q| u8::from(p <= q)),
        Cmp::Gt => zip_broadcast(th, plan, a, b, y, |p, q| u8::from(p > q)),
        Cmp::Ge => zip_broadcast(th, plan, a, b, y, |p, q| u8::from(p >= q)),
    }
}

impl Workload for Predicate2Workload {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        self.io.check(inputs, outputs)?;
        let (a, b) = (input(inputs, 0)?, input(inputs, 1)?);
        let y: &mut [u8] = &mut *output(outputs)?.data;
        let (th, plan) = (&self.threads, &self.plan);
        match self.pred {
            Pred2::Cmp(c, dt) => with_ordered!(dt, T => {
                compare::<T>(th, plan, c, a.as_slice::<T>()?, b.as_slice::<T>()?, y)
            }, Err(self.io.error(format!("cannot compare {dt}")))),
            Pred2::BoolEq => zip_broadcast(th, plan, a.data, b.data, y, |p, q| {
                u8::from((p != 0) == (q != 0))
            }),
            Pred2::Logic(Logic::And) => zip_broadcast(th, plan, a.data, b.data, y, |p, q| {
                u8::from(p != 0 && q != 0)
            }),
            Pred2::Logic(Logic::Or) => zip_broadcast(th, plan, a.data, b.data, y, |p, q| {
                u8::from(p != 0 || q != 0)
            }),
            Pred2::Logic(Logic::Xor) => zip_broadcast(th, plan, a.data, b.data, y, |p, q| {
                u8::from((p != 0) != (q != 0))
            }),
        }
    }
}

/// IsNaN, IsInf or Not, elementwise.
pub struct Predicate1Workload {
    io: Io,
    pred: Pred1,
    threads: Threads,
}

/// `y[i] = f(x[i])` as bytes, in parallel for large tensors.
fn map<T: Copy + Sync>(
    th: &Threads,
    x: &[T],
    y: &mut [u8],
    f: impl Fn(T) -> bool + Sync + Send,
) -> Result<()> {
    if x.len() != y.len() {
        return Err(BackendError::Execution(
            "a predicate's buffers differ in length".into(),
        ));
    }
    let chunk = if x.len() <= PARALLEL_MIN {
        x.len()
    } else {
        th.chunk_size(x.len(), 16 * 1024, 64)
    };
    th.chunks(y, chunk, |ci, yc| {
        let s = ci * chunk;
        let xs = x.get(s..s + yc.len()).ok_or_else(|| {
            BackendError::Execution("a predicate's chunk leaves its input".into())
        })?;
        for (o, &v) in yc.iter_mut().zip(xs) {
            *o = u8::from(f(v));
        }
        Ok(())
    })
}

impl Workload for Predicate1Workload {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        self.io.check(inputs, outputs)?;
        let x = input(inputs, 0)?;
        let y: &mut [u8] = &mut *output(outputs)?.data;
        let th = &self.threads;
        match self.pred {
            Pred1::Not => map(th, x.data, y, |v| v == 0),
            Pred1::IsNaN(DataType::F32) => map(th, x.as_slice::<f32>()?, y, f32::is_nan),
            Pred1::IsNaN(DataType::F64) => map(th, x.as_slice::<f64>()?, y, f64::is_nan),
            Pred1::IsNaN(DataType::F16) => map(th, x.as_slice::<f16>()?, y, f16::is_nan),
            Pred1::IsInf {
                dtype,
                negative,
                positive,
            } => {
                let hit = move |v: f64| {
                    (positive && v == f64::INFINITY) || (negative && v == f64::NEG_INFINITY)
                };
                match dtype {
                    DataType::F32 => map(th, x.as_slice::<f32>()?, y, |v| hit(f64::from(v))),
                    DataType::F64 => map(th, x.as_slice::<f64>()?, y, hit),
                    DataType::F16 => map(th, x.as_slice::<f16>()?, y, |v| hit(v.to_f64())),
                    dt => Err(self.io.error(format!("IsInf on {dt}"))),
                }
            }
            Pred1::IsNaN(dt) => Err(self.io.error(format!("IsNaN on {dt}"))),
        }
    }
}
