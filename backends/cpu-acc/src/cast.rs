//! Cast between the common element types (f32, f64, f16, i64, i32, i8, u8, bool), with
//! exactly CpuRef's results: each element is widened and narrowed by the shared rules of
//! [`backplane_core::scalar::Scalar`] (floats to integers truncating and saturating, NaN to 0;
//! integers to narrower integers wrapping; to floats rounding to nearest even; to bool
//! `x != 0`). Each pair of types compiles to its own loop.

use crate::io::{input, output, Io};
use crate::movement::PARALLEL_MIN;
use crate::plan::{done, Plan};
use crate::threads::Threads;
use backplane_backend_api::{BackendError, LayerDesc, Result, Workload};
use backplane_core::dtype::Element;
use backplane_core::scalar::Scalar;
use backplane_core::{DataType, TensorView, TensorViewMut};
use half::f16;
use half::slice::HalfFloatSliceExt;

/// The types CpuAcc casts between.
const TYPES: [DataType; 8] = [
    DataType::F32,
    DataType::F64,
    DataType::F16,
    DataType::I64,
    DataType::I32,
    DataType::I8,
    DataType::U8,
    DataType::Bool,
];

/// How CpuAcc runs the Cast layer `layer` (to `to`), or why it cannot.
pub fn plan(layer: &LayerDesc, to: DataType) -> std::result::Result<Plan<'static>, String> {
    let from = layer.inputs.first().ok_or("Cast takes one input")?.dtype;
    if TYPES.contains(&from) && TYPES.contains(&to) {
        Ok(Plan::new(|io, threads| {
            done(CastWorkload::new(io, threads))
        }))
    } else {
        Err(format!(
            "Cast {from} -> {to}: CpuAcc casts between f32, f64, f16, i64, i32, i8, u8 and \
             bool only"
        ))
    }
}

/// Cast to one of the common types.
pub struct CastWorkload {
    io: Io,
    threads: Threads,
}

impl CastWorkload {
    /// A Cast workload (the types were checked by [`plan`]).
    pub fn new(io: Io, threads: Threads) -> Self {
        CastWorkload { io, threads }
    }
}

/// `f(src block, dst block)` over equal-length blocks of `src` and `dst`, on the pool for
/// large tensors.
fn blocks<S, D>(
    threads: &Threads,
    src: &[S],
    dst: &mut [D],
    f: impl Fn(&[S], &mut [D]) + Sync + Send,
) -> Result<()>
where
    S: Sync,
    D: Send,
{
    if src.len() != dst.len() {
        return Err(BackendError::Execution(
            "Cast buffers differ in length".into(),
        ));
    }
    if threads.count() == 1 || dst.len() <= PARALLEL_MIN {
        f(src, dst);
        return Ok(());
    }
    let per = threads.chunk_size(dst.len(), 16 * 1024, 64);
    threads.chunks(dst, per, |ci, d| {
        let s = src
            .get(ci * per..ci * per + d.len())
            .ok_or_else(|| BackendError::Execution("Cast block leaves its input".into()))?;
        f(s, d);
        Ok(())
    })
}

/// `dst[i] = narrow(wide(src[i]))`.
fn convert<S, D>(
    threads: &Threads,
    src: &[S],
    dst: &mut [D],
    wide: impl Fn(S) -> Scalar + Sync + Send,
    narrow: impl Fn(Scalar) -> D + Sync + Send,
) -> Result<()>
where
    S: Copy + Sync,
    D: Send,
{
    blocks(threads, src, dst, |s, d| {
        for (d, &s) in d.iter_mut().zip(s) {
            *d = narrow(wide(s));
        }
    })
}

/// Convert `src` (widened by `wide`) into `y`, whatever its type.
fn to_any<S: Copy + Sync>(
    threads: &Threads,
    src: &[S],
    wide: impl Fn(S) -> Scalar + Copy + Sync + Send,
    y: &mut TensorViewMut<'_>,
) -> Result<()> {
    fn typed<'a, T: Element>(y: &'a mut TensorViewMut<'_>) -> Result<&'a mut [T]> {
        Ok(y.as_mut_slice::<T>()?)
    }
    match y.info.dtype {
        DataType::F32 => convert(threads, src, typed::<f32>(y)?, wide, Scalar::to_f32),
        DataType::F64 => convert(threads, src, typed::<f64>(y)?, wide, Scalar::to_f64),
        DataType::F16 => convert(threads, src, typed::<f16>(y)?, wide, Scalar::to_f16),
        DataType::I64 => convert(threads, src, typed::<i64>(y)?, wide, Scalar::to_i64),
        DataType::I32 => convert(threads, src, typed::<i32>(y)?, wide, Scalar::to_i32),
        DataType::I8 => convert(threads, src, typed::<i8>(y)?, wide, Scalar::to_i8),
        DataType::U8 => convert(threads, src, typed::<u8>(y)?, wide, Scalar::to_u8),
        DataType::Bool => convert(threads, src, typed::<u8>(y)?, wide, |v| {
            u8::from(v.to_bool())
        }),
        other => Err(BackendError::Execution(format!(
            "CpuAcc does not cast to {other}"
        ))),
    }
}

impl Workload for CastWorkload {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        self.io.check(inputs, outputs)?;
        let x = input(inputs, 0)?;
        let y = output(outputs)?;
        let th = &self.threads;
        // f32 <-> f16 through half's slice conversions (F16C where the CPU has it): for every
        // f32 (all 2^32 checked) and every f16 they give the bits of the widened path below.
        let r = match (x.info.dtype, y.info.dtype) {
            (DataType::F32, DataType::F16) => blocks(
                th,
                x.as_slice::<f32>()?,
                y.as_mut_slice::<f16>()?,
                |s, d| d.convert_from_f32_slice(s),
            ),
            (DataType::F16, DataType::F32) => blocks(
                th,
                x.as_slice::<f16>()?,
                y.as_mut_slice::<f32>()?,
                |s, d| s.convert_to_f32_slice(d),
            ),
            _ => self.any(x, y),
        };
        r.map_err(|e| self.io.error(e.to_string()))
    }
}

impl CastWorkload {
    /// Any pair of the common types, element by element.
    fn any(&self, x: &TensorView<'_>, y: &mut TensorViewMut<'_>) -> Result<()> {
        let th = &self.threads;
        match x.info.dtype {
            DataType::F32 => to_any(th, x.as_slice::<f32>()?, |v| Scalar::Float(f64::from(v)), y),
            DataType::F64 => to_any(th, x.as_slice::<f64>()?, Scalar::Float, y),
            DataType::F16 => to_any(th, x.as_slice::<f16>()?, |v| Scalar::Float(v.to_f64()), y),
            DataType::I64 => to_any(th, x.as_slice::<i64>()?, Scalar::Int, y),
            DataType::I32 => to_any(th, x.as_slice::<i32>()?, |v| Scalar::Int(v.into()), y),
            DataType::I8 => to_any(th, x.as_slice::<i8>()?, |v| Scalar::Int(v.into()), y),
            DataType::U8 => to_any(th, x.as_slice::<u8>()?, |v| Scalar::Int(v.into()), y),
            DataType::Bool => to_any(th, x.as_slice::<u8>()?, |v| Scalar::Bool(v != 0), y),
            other => Err(BackendError::Execution(format!(
                "CpuAcc does not cast from {other}"
            ))),
        }
    }
}
