//! Integer arithmetic with broadcasting (Add, Sub, Mul, Div, Max, Min on every integer type):
//! the shape and index computations that remain at run time (a position id plus an offset,
//! a sequence length times a head count). Results are exactly CpuRef's: two's-complement
//! wrap-around, division truncating toward zero (MIN / -1 wraps to MIN), and division by
//! zero an error naming the layer rather than a crash.

use crate::elementwise::{zip_broadcast, BroadcastPlan};
use crate::io::{input, output, Io};
use crate::plan::{done, Plan};
use crate::threads::Threads;
use backplane_backend_api::{LayerDesc, Result, Workload};
use backplane_core::ops::BinaryOp;
use backplane_core::{DataType, TensorView, TensorViewMut};

/// Plan an integer `op`, or say why CpuAcc leaves it.
pub fn plan(layer: &LayerDesc, op: BinaryOp) -> std::result::Result<Plan<'static>, String> {
    let dt = layer
        .inputs
        .first()
        .ok_or("arithmetic takes two inputs")?
        .dtype;
    if !dt.is_integer() || layer.inputs.iter().any(|i| i.dtype != dt) {
        return Err(format!(
            "{} on {dt}: CpuAcc's integer arithmetic takes two inputs of one integer type",
            op.name()
        ));
    }
    if op == BinaryOp::Pow {
        return Err("CpuAcc does not implement Pow on integers".into());
    }
    Ok(Plan::new(move |io, threads| {
        done(IntBinaryWorkload::new(io, op, threads)?)
    }))
}

/// A broadcasting integer operation.
pub struct IntBinaryWorkload {
    io: Io,
    op: BinaryOp,
    plan: BroadcastPlan,
    threads: Threads,
}

impl IntBinaryWorkload {
    fn new(io: Io, op: BinaryOp, threads: Threads) -> Result<Self> {
        let plan = BroadcastPlan::for_layer(&io)?;
        Ok(IntBinaryWorkload {
            io,
            op,
            plan,
            threads,
        })
    }
}

/// The integer operations, per type.
macro_rules! int_run {
    ($T:ty, $self:expr, $a:expr, $b:expr, $y:expr) => {{
        let a = $a.as_slice::<$T>()?;
        let b = $b.as_slice::<$T>()?;
        let y = $y.as_mut_slice::<$T>()?;
        let (th, plan) = (&$self.threads, &$self.plan);
        match $self.op {
            BinaryOp::Add => zip_broadcast(th, plan, a, b, y, <$T>::wrapping_add),
            BinaryOp::Sub => zip_broadcast(th, plan, a, b, y, <$T>::wrapping_sub),
            BinaryOp::Mul => zip_broadcast(th, plan, a, b, y, <$T>::wrapping_mul),
            BinaryOp::Max => zip_broadcast(th, plan, a, b, y, |p: $T, q: $T| p.max(q)),
            BinaryOp::Min => zip_broadcast(th, plan, a, b, y, |p: $T, q: $T| p.min(q)),
            BinaryOp::Div => {
                // Checked once up front, so the loop divides without a branch to fail.
                if b.contains(&0) {
                    return Err($self.io.error("integer division by zero".into()));
                }
                zip_broadcast(th, plan, a, b, y, |p: $T, q: $T| {
                    p.wrapping_div(if q == 0 { 1 } else { q })
                })
            }
            BinaryOp::Pow => Err($self.io.error("Pow on integers".into())),
        }
    }};
}

impl Workload for IntBinaryWorkload {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        self.io.check(inputs, outputs)?;
        let (a, b) = (input(inputs, 0)?, input(inputs, 1)?);
        let y = output(outputs)?;
        match a.info.dtype {
            DataType::I8 => int_run!(i8, self, a, b, y),
            DataType::U8 => int_run!(u8, self, a, b, y),
            DataType::I16 => int_run!(i16, self, a, b, y),
            DataType::U16 => int_run!(u16, self, a, b, y),
            DataType::I32 => int_run!(i32, self, a, b, y),
            DataType::U32 => int_run!(u32, self, a, b, y),
            DataType::I64 => int_run!(i64, self, a, b, y),
            DataType::U64 => int_run!(u64, self, a, b, y),
            dt => Err(self.io.error(format!("integer arithmetic on {dt}"))),
        }
    }
}
