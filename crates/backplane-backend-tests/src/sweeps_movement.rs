//! Random sweeps of Slice and Pad over every element type a model moves (f32, i32, i64, u8,
//! bool): strided and reversed slices with bounds past the ends, and padding in all four
//! modes (constant with a fill value of the type, a negative pad cropping). Families of
//! [`crate::sweeps::FAMILIES`], generated and checked like the others (exactly: data
//! movement changes no value).

use crate::sweeps::{Rng, SweepCase};
use backplane::core::ops::{PadDesc, PadMode, SliceDesc};
use backplane::core::Op;
use backplane::{DataType, Tensor};

/// Sizes that find edge cases: 1, primes, a power of two and one past it.
const SIZES: [usize; 6] = [1, 2, 3, 7, 16, 17];

/// The element types the families move.
const TYPES: [DataType; 6] = [
    DataType::F32,
    DataType::F32,
    DataType::I32,
    DataType::I64,
    DataType::U8,
    DataType::Bool,
];

fn dims(r: &mut Rng, rank: usize) -> Vec<usize> {
    (0..rank).map(|_| r.pick(&SIZES)).collect()
}

/// Data of `dtype`: bools 0 or 1, u8 in its range, others in -100..100.
fn data(r: &mut Rng, dtype: DataType, d: &[usize]) -> Result<Tensor, String> {
    match dtype {
        DataType::Bool => r.tensor(dtype, d, 0.0, 2.0),
        DataType::U8 => r.tensor(dtype, d, 0.0, 256.0),
        _ => r.tensor(dtype, d, -100.0, 100.0),
    }
}

/// Slice over a random subset of axes (signed axes, negative and out-of-range bounds,
/// steps of -2 to 3, reversed walks).
pub fn slice(r: &mut Rng) -> Result<SweepCase, String> {
    let rank = 1 + r.below(4);
    let d = dims(r, rank);
    let dtype = r.pick(&TYPES);
    let mut desc = SliceDesc::default();
    for (axis, &n) in d.iter().enumerate() {
        if r.below(3) == 0 {
            continue;
        }
        let n = n as i64;
        let step = r.pick(&[1i64, 1, 2, 3, -1, -2]);
        // Bounds that never leave the slice empty (no backend makes an empty output): from
        // the first half forwards past the end, or from the second half backwards.
        let (start, end) = if step > 0 {
            let start = r.pick(&[0, n / 2, -n, -n - 3, (n - 1) / 2 - n]);
            (start, r.pick(&[n, n + 5, i64::MAX]))
        } else {
            let start = r.pick(&[n - 1, -1, n + 5, n / 2]);
            (start, r.pick(&[-n - 1, -n - 3, i64::MIN]))
        };
        desc.starts.push(start);
        desc.ends.push(end);
        desc.axes.push(if r.below(2) == 0 {
            axis as i64
        } else {
            axis as i64 - rank as i64
        });
        desc.steps.push(step);
    }
    let x = data(r, dtype, &d)?;
    Ok(SweepCase {
        family: "Slice",
        op: Op::Slice(desc),
        inputs: vec![(x, r.below(4) == 0)],
        rtol: 0.0,
        atol: 0.0,
    })
}

/// Pad in a random mode: begins and ends of 0 to 2 per axis (below the axis for reflect and
/// wrap), in constant mode a value of the type and at times a crop of 1.
pub fn pad(r: &mut Rng) -> Result<SweepCase, String> {
    let rank = 1 + r.below(4);
    let d = dims(r, rank);
    let dtype = r.pick(&TYPES);
    let mode = r.pick(&[
        PadMode::Constant,
        PadMode::Constant,
        PadMode::Reflect,
        PadMode::Edge,
        PadMode::Wrap,
    ]);
    let mut pads = vec![0i64; 2 * rank];
    for (k, &n) in d.iter().enumerate() {
        let most = match mode {
            PadMode::Reflect | PadMode::Wrap => (n - 1).min(2),
            _ => 2,
        };
        pads[k] = r.below(most + 1) as i64;
        pads[rank + k] = r.below(most + 1) as i64;
        if mode == PadMode::Constant && n > 2 && r.below(4) == 0 {
            pads[k] = -1;
        }
    }
    let value = match dtype {
        DataType::Bool => 1.0,
        DataType::U8 => 200.0,
        DataType::F32 => -2.5,
        _ => -7.0,
    };
    let x = data(r, dtype, &d)?;
    Ok(SweepCase {
        family: "Pad",
        op: Op::Pad(PadDesc { mode, pads, value }),
        inputs: vec![(x, r.below(4) == 0)],
        rtol: 0.0,
        atol: 0.0,
    })
}
