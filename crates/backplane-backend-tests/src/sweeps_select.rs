//! Random sweeps of the ops transformers and detectors use to pick, convert and resample
//! values: Gather (i32 and i64 indices, negative ones included), Where, Cast (between f32,
//! i32, i64 and bool, with NaNs, infinities and values past the target's range), Split and
//! Resize (nearest and linear under every coordinate transform). Families of
//! [`crate::sweeps::FAMILIES`], generated and checked like the others.

use crate::sweeps::{Rng, SweepCase};
use backplane::core::ops::{CoordinateTransform, NearestMode, ResizeDesc, ResizeMode};
use backplane::core::Op;
use backplane::{DataType, Tensor};

/// Sizes that find edge cases: 1, primes, a power of two and one past it.
const SIZES: [usize; 7] = [1, 2, 3, 7, 16, 17, 31];

fn dims(r: &mut Rng, rank: usize) -> Vec<usize> {
    (0..rank).map(|_| r.pick(&SIZES)).collect()
}

/// Data of `dtype`: integers and floats in -100..100, bools 0 or 1.
fn data(r: &mut Rng, dtype: DataType, d: &[usize]) -> Result<Tensor, String> {
    if dtype == DataType::Bool {
        r.tensor(dtype, d, 0.0, 2.0)
    } else {
        r.tensor(dtype, d, -100.0, 100.0)
    }
}

/// Gather along a random axis with indices of random rank (0 to 2), negative ones included.
pub fn gather(r: &mut Rng) -> Result<SweepCase, String> {
    let rank = 1 + r.below(4);
    let d = dims(r, rank);
    let axis = r.below(rank);
    let dtype = r.pick(&[
        DataType::F32,
        DataType::F32,
        DataType::I64,
        DataType::I32,
        DataType::Bool,
        DataType::F16,
    ]);
    let idx_rank = r.below(3);
    let idx_dims = dims(r, idx_rank);
    let len = d[axis] as f64;
    let index_type = r.pick(&[DataType::I64, DataType::I32]);
    let indices = r.tensor(index_type, &idx_dims, -len, len)?;
    // Signed axes half of the time.
    let axis = if r.below(2) == 0 {
        axis as i64
    } else {
        axis as i64 - rank as i64
    };
    Ok(SweepCase {
        family: "Gather",
        op: Op::Gather { axis },
        inputs: vec![
            (data(r, dtype, &d)?, r.below(3) == 0),
            (indices, r.below(2) == 0),
        ],
        rtol: 0.0,
        atol: 0.0,
    })
}

/// `d` with a random number of leading axes dropped and some axes set to 1.
fn broadcastable(r: &mut Rng, d: &[usize]) -> Vec<usize> {
    let drop = r.below(d.len() + 1);
    d[drop..]
        .iter()
        .map(|&x| if r.below(3) == 0 { 1 } else { x })
        .collect()
}

/// Where(condition, x, y), the three shapes broadcast together.
pub fn where_(r: &mut Rng) -> Result<SweepCase, String> {
    let rank = 1 + r.below(4);
    let full = dims(r, rank);
    let mut shapes = [
        broadcastable(r, &full),
        broadcastable(r, &full),
        broadcastable(r, &full),
    ];
    // One of them spans the whole output.
    let k = r.below(3);
    shapes[k] = full;
    let dtype = r.pick(&[
        DataType::F32,
        DataType::F32,
        DataType::I64,
        DataType::I32,
        DataType::Bool,
    ]);
    let cond = r.tensor(DataType::Bool, &shapes[0], 0.0, 2.0)?;
    let x = data(r, dtype, &shapes[1])?;
    let y = data(r, dtype, &shapes[2])?;
    Ok(SweepCase {
        family: "Where",
        op: Op::Where,
        inputs: vec![(cond, false), (x, r.below(3) == 0), (y, r.below(3) == 0)],
        rtol: 0.0,
        atol: 0.0,
    })
}

/// Values for a Cast from `from`: ordinary ones plus the hard cases of the type (NaN,
/// infinities, values past i32's range, halves; i64 beyond 2^24 and 2^53).
fn cast_source(r: &mut Rng, from: DataType, d: &[usize]) -> Result<Tensor, String> {
    let n: usize = d.iter().product();
    match from {
        DataType::I64 => {
            let hard = [
                0i64,
                -1,
                16_777_217,
                -16_777_219,
                (1 << 40) + 12_345,
                -(1 << 53) - 3,
                i64::MAX,
                i64::MIN,
                2_147_483_648,
                -2_147_483_649,
            ];
            let v: Vec<i64> = (0..n)
                .map(|_| {
                    if r.below(3) == 0 {
                        r.pick(&hard)
                    } else {
                        (r.unit() * 1000.0) as i64
                    }
                })
                .collect();
            Tensor::from_vec(d.to_vec(), v).map_err(|e| e.to_string())
        }
        DataType::I32 => {
            let hard = [0i32, -1, 16_777_217, -16_777_219, i32::MAX, i32::MIN];
            let v: Vec<i32> = (0..n)
                .map(|_| {
                    if r.below(3) == 0 {
                        r.pick(&hard)
                    } else {
                        (r.unit() * 1000.0) as i32
                    }
                })
                .collect();
            Tensor::from_vec(d.to_vec(), v).map_err(|e| e.to_string())
        }
        DataType::F32 => {
            let hard = [
                f32::NAN,
                f32::INFINITY,
                f32::NEG_INFINITY,
                0.0,
                -0.0,
                0.5,
                -1.5,
                3e9,
                -3e9,
                1e19,
                -1e19,
                2_147_483_520.0,
            ];
            let v: Vec<f32> = (0..n)
                .map(|_| {
                    if r.below(3) == 0 {
                        r.pick(&hard)
                    } else {
                        (r.unit() * 1000.0) as f32
                    }
                })
                .collect();
            Tensor::from_vec(d.to_vec(), v).map_err(|e| e.to_string())
        }
        other => r.tensor(other, d, 0.0, 2.0),
    }
}

/// Cast between f32, i32, i64 and bool.
pub fn cast(r: &mut Rng) -> Result<SweepCase, String> {
    let types = [DataType::F32, DataType::I32, DataType::I64, DataType::Bool];
    let from = r.pick(&types);
    let to = loop {
        let t = r.pick(&types);
        if t != from {
            break t;
        }
    };
    let rank = 1 + r.below(3);
    let d = dims(r, rank);
    let x = cast_source(r, from, &d)?;
    Ok(SweepCase {
        family: "Cast",
        op: Op::Cast { to, saturate: true },
        inputs: vec![(x, false)],
        rtol: 0.0,
        atol: 0.0,
    })
}

/// Split along a random axis into 1 to 3 non-empty pieces.
pub fn split(r: &mut Rng) -> Result<SweepCase, String> {
    let rank = 1 + r.below(4);
    let mut d = dims(r, rank);
    let axis = r.below(rank);
    let pieces = 1 + r.below(3);
    d[axis] = d[axis].max(pieces);
    // Cut points: pieces - 1 distinct positions inside the axis.
    let mut sizes = Vec::with_capacity(pieces);
    let mut left = d[axis];
    for k in 0..pieces {
        let rest = pieces - k - 1;
        let size = if rest == 0 {
            left
        } else {
            1 + r.below(left - rest)
        };
        sizes.push(size);
        left -= size;
    }
    let dtype = r.pick(&[
        DataType::F32,
        DataType::F32,
        DataType::I64,
        DataType::Bool,
        DataType::F16,
    ]);
    Ok(SweepCase {
        family: "Split",
        op: Op::Split {
            axis: axis as i64,
            splits: sizes,
        },
        inputs: vec![(data(r, dtype, &d)?, false)],
        rtol: 0.0,
        atol: 0.0,
    })
}

/// Resize of an NCHW tensor, nearest or linear, up or down by whole and fractional scales.
pub fn resize(r: &mut Rng) -> Result<SweepCase, String> {
    let mode = r.pick(&[ResizeMode::Nearest, ResizeMode::Linear]);
    let transform = r.pick(&[
        CoordinateTransform::HalfPixel,
        CoordinateTransform::PytorchHalfPixel,
        CoordinateTransform::AlignCorners,
        CoordinateTransform::Asymmetric,
        CoordinateTransform::HalfPixelSymmetric,
    ]);
    let nearest_mode = r.pick(&[
        NearestMode::RoundPreferFloor,
        NearestMode::RoundPreferCeil,
        NearestMode::Floor,
        NearestMode::Ceil,
    ]);
    let x_dims = vec![
        1 + r.below(2),
        1 + r.below(3),
        r.pick(&SIZES[..6]),
        r.pick(&SIZES[..6]),
    ];
    let mut scales = vec![1.0f32, 1.0];
    let mut out = x_dims[..2].to_vec();
    for &len in &x_dims[2..] {
        let s = r.pick(&[0.5f32, 1.0, 1.5, 2.0, 3.0, 0.6]);
        scales.push(s);
        out.push(((len as f32 * s).floor() as usize).max(1));
    }
    let dtype = if mode == ResizeMode::Nearest {
        r.pick(&[DataType::F32, DataType::F32, DataType::I64, DataType::U8])
    } else {
        DataType::F32
    };
    let x = data(r, dtype, &x_dims)?;
    let desc = ResizeDesc {
        mode,
        coordinate_transform: transform,
        nearest_mode,
        cubic_coeff_a: -0.75,
        exclude_outside: false,
        output_shape: out,
        scales,
        antialias: false,
        roi: Vec::new(),
        extrapolation_value: 0.0,
    };
    Ok(SweepCase {
        family: "Resize",
        op: Op::Resize(desc),
        inputs: vec![(x, false)],
        rtol: 1e-5,
        atol: 1e-5,
    })
}
