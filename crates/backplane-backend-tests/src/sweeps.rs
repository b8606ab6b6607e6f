//! Random sweeps: one-layer networks of random shapes and parameters (odd sizes, broadcasting,
//! padding, stride, dilation, groups, constant or run-time weights, every data type an op
//! takes), run on the backend under test alone and compared with CpuRef's kernels on the same
//! inputs. Every case is generated from its own seed, printed with a failure: the same
//! `--seed` regenerates the same cases.

use crate::exec::{run_network, Run};
use crate::report::{Outcome, Report};
use backplane::compare::{compare, Mismatch};
use backplane::core::ops::{
    AutoPad, BinaryExtOp, BinaryOp, ConvDesc, GemmDesc, MathOp, PoolDesc, PoolKind, ReduceDesc,
    ReduceKind, UnaryOp, Window,
};
use backplane::core::Op;
use backplane::{BackendId, DataType, Network, Runtime, Tensor, TensorInfo};

mod cnn;
mod dilated;
mod gemm_tiles;
mod split;
mod stem;
mod xfmr;

/// The suite's name in reports.
pub const SUITE: &str = "random sweeps";

/// A small deterministic generator (SplitMix64).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in 0..n (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    /// One of `v` (non-empty).
    pub fn pick<T: Copy>(&mut self, v: &[T]) -> T {
        v[self.below(v.len())]
    }

    /// Uniform in [-1, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    }

    /// A tensor of `dtype` and `dims`: floats uniform in [lo, hi), integers in lo..hi. An
    /// error (a type or shape no tensor can have) is a bug of the generator calling it.
    pub fn tensor(
        &mut self,
        dtype: DataType,
        dims: &[usize],
        lo: f64,
        hi: f64,
    ) -> Result<Tensor, String> {
        let n: usize = dims.iter().product();
        let values: Vec<f64> = (0..n)
            .map(|_| {
                let u = (self.unit() + 1.0) / 2.0;
                let v = lo + u * (hi - lo);
                if dtype.is_float() {
                    v
                } else {
                    v.floor()
                }
            })
            .collect();
        Tensor::from_f64_values(TensorInfo::new(dtype, dims.to_vec()), &values)
            .map_err(|e| format!("generating a {dtype:?} tensor of dims {dims:?}: {e}"))
    }
}

/// Sizes that find edge cases: 1, primes, a power of two and one past it.
const SIZES: [usize; 7] = [1, 2, 3, 7, 16, 17, 31];

/// One generated case: the layer, its inputs (with which are load-time constants) and the
/// tolerance its results are held to.
pub struct SweepCase {
    /// The op family, as reports group it.
    pub family: &'static str,
    /// The layer.
    pub op: Op,
    /// Inputs and whether each is a constant of the network.
    pub inputs: Vec<(Tensor, bool)>,
    /// Relative tolerance.
    pub rtol: f64,
    /// Absolute tolerance.
    pub atol: f64,
}

/// A family's generator; an error is a bug of the generator (its case is skipped, with it).
type Generator = fn(&mut Rng) -> Result<SweepCase, String>;

/// The families, each a generator of cases.
pub const FAMILIES: &[(&str, Generator)] = &[
    ("Unary", unary),
    ("Binary", binary),
    ("Compare", comparison),
    ("Predicate", predicate),
    ("Pow", pow),
    ("MatMul", matmul),
    ("Gemm", gemm),
    ("Conv", conv),
    ("Pool", pool),
    ("Softmax", softmax),
    ("Reduce", reduce),
    ("Transpose", transpose),
    ("Concat", concat),
    ("Gather", crate::sweeps_select::gather),
    ("Where", crate::sweeps_select::where_),
    ("Cast", crate::sweeps_select::cast),
    ("Split", crate::sweeps_select::split),
    ("Resize", crate::sweeps_select::resize),
    ("Slice", crate::sweeps_movement::slice),
    ("Pad", crate::sweeps_movement::pad),
    ("GroupedConv", cnn::grouped_conv),
    ("SmallMaxPool", cnn::small_max_pool),
    ("WinogradConv", cnn::winograd_conv),
    ("LaneGroupedConv", cnn::lane_grouped_conv),
    ("SmallPlanePointwise", cnn::small_plane_pointwise),
    ("FewRowsMatMul", xfmr::few_rows_matmul),
    ("ProjectionGemm", xfmr::projection_gemm),
    ("TileRowsMatMul", gemm_tiles::tile_rows_matmul),
    ("LargeGemm", gemm_tiles::large_gemm),
    ("LargeConcat", split::large_concat),
    ("FewOutputConv", split::few_output_conv),
    ("FirstLayerConv", stem::first_layer_conv),
    ("StridedPointwise", stem::strided_pointwise),
    ("AtrousConv", dilated::atrous_conv),
];

fn dims(r: &mut Rng, rank: usize) -> Vec<usize> {
    (0..rank).map(|_| r.pick(&SIZES)).collect()
}

fn unary(r: &mut Rng) -> Result<SweepCase, String> {
    let op = r.pick(&[
        UnaryOp::Relu,
        UnaryOp::LeakyRelu { alpha: 0.1 },
        UnaryOp::Clip {
            min: -0.5,
            max: 0.25,
        },
        UnaryOp::Sigmoid,
        UnaryOp::Tanh,
        UnaryOp::Erf,
        UnaryOp::Gelu {
            tanh_approximation: false,
        },
        UnaryOp::Sqrt,
        UnaryOp::Exp,
        UnaryOp::Log,
        UnaryOp::Neg,
        UnaryOp::Abs,
    ]);
    let rank = 1 + r.below(4);
    let d = dims(r, rank);
    let (lo, hi) = match op {
        UnaryOp::Sqrt | UnaryOp::Log => (0.01, 4.0),
        _ => (-4.0, 4.0),
    };
    let dtype = r.pick(&[DataType::F32, DataType::F32, DataType::F16, DataType::F64]);
    let x = r.tensor(dtype, &d, lo, hi)?;
    let (rtol, atol) = if dtype == DataType::F16 {
        (1e-3, 1e-3)
    } else {
        (1e-5, 1e-6)
    };
    Ok(SweepCase {
        family: "Unary",
        op: Op::Unary(op),
        inputs: vec![(x, false)],
        rtol,
        atol,
    })
}

/// Two shapes that broadcast: b's dims are each a's or 1, and b may have fewer axes.
fn broadcast_pair(r: &mut Rng) -> (Vec<usize>, Vec<usize>) {
    let rank = 1 + r.below(4);
    let a = dims(r, rank);
    let drop = r.below(rank + 1);
    let b: Vec<usize> = a[drop..]
        .iter()
        .map(|&d| if r.below(3) == 0 { 1 } else { d })
        .collect();
    if r.below(2) == 0 {
        (a, b)
    } else {
        (b, a)
    }
}

fn binary(r: &mut Rng) -> Result<SweepCase, String> {
    let op = r.pick(&[
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Max,
        BinaryOp::Min,
    ]);
    let dtype = r.pick(&[
        DataType::F32,
        DataType::F32,
        DataType::F64,
        DataType::F16,
        DataType::I32,
        DataType::I64,
        DataType::I8,
        DataType::U8,
        DataType::U32,
    ]);
    let (ad, bd) = broadcast_pair(r);
    let a = r.tensor(dtype, &ad, -8.0, 8.0)?;
    // Divisors kept away from zero (and positive for integer division's sake).
    let b = if op == BinaryOp::Div {
        r.tensor(dtype, &bd, 1.0, 8.0)?
    } else {
        r.tensor(dtype, &bd, -8.0, 8.0)?
    };
    let constant = r.below(3) == 0;
    let (rtol, atol) = if dtype == DataType::F16 {
        (1e-3, 1e-3)
    } else {
        (1e-6, 1e-6)
    };
    Ok(SweepCase {
        family: "Binary",
        op: Op::Binary(op),
        inputs: vec![(a, false), (b, constant)],
        rtol,
        atol,
    })
}

/// Comparisons (every ordered type, with repeated values so equality happens) and logical
/// operators (bool).
fn comparison(r: &mut Rng) -> Result<SweepCase, String> {
    let op = r.pick(&[
        BinaryExtOp::Equal,
        BinaryExtOp::Less,
        BinaryExtOp::LessOrEqual,
        BinaryExtOp::Greater,
        BinaryExtOp::GreaterOrEqual,
        BinaryExtOp::And,
        BinaryExtOp::Or,
        BinaryExtOp::Xor,
    ]);
    let dtype = match op {
        BinaryExtOp::And | BinaryExtOp::Or | BinaryExtOp::Xor => DataType::Bool,
        BinaryExtOp::Equal => r.pick(&[
            DataType::F32,
            DataType::I64,
            DataType::I32,
            DataType::Bool,
            DataType::U8,
        ]),
        _ => r.pick(&[
            DataType::F32,
            DataType::F32,
            DataType::F64,
            DataType::F16,
            DataType::I64,
            DataType::I32,
            DataType::I8,
            DataType::U16,
        ]),
    };
    let (ad, bd) = broadcast_pair(r);
    // Few distinct values (integers, or floats on a coarse grid) so that ties occur.
    let (lo, hi) = if dtype == DataType::Bool {
        (0.0, 2.0)
    } else {
        (0.0, 4.0)
    };
    let grid = |r: &mut Rng, d: &[usize]| -> Result<Tensor, String> {
        let t = r.tensor(dtype, d, lo, hi)?;
        Ok(if dtype.is_float() {
            let v: Vec<f64> = t.to_f64_vec().iter().map(|x| x.floor() / 2.0).collect();
            Tensor::from_f64_values(t.info().clone(), &v).unwrap_or(t)
        } else {
            t
        })
    };
    let a = grid(r, &ad)?;
    let b = grid(r, &bd)?;
    let constant = r.below(3) == 0;
    Ok(SweepCase {
        family: "Compare",
        op: Op::BinaryExt(op),
        inputs: vec![(a, false), (b, constant)],
        rtol: 0.0,
        atol: 0.0,
    })
}

/// IsNaN, IsInf (by sign) on floats holding NaNs and infinities, and Not on bools.
fn predicate(r: &mut Rng) -> Result<SweepCase, String> {
    let op = r.pick(&[
        MathOp::IsNaN,
        MathOp::IsInf {
            detect_negative: true,
            detect_positive: true,
        },
        MathOp::IsInf {
            detect_negative: false,
            detect_positive: true,
        },
        MathOp::Not,
    ]);
    let rank = 1 + r.below(4);
    let d = dims(r, rank);
    let x = if op == MathOp::Not {
        r.tensor(DataType::Bool, &d, 0.0, 2.0)?
    } else {
        let dtype = r.pick(&[DataType::F32, DataType::F64, DataType::F16]);
        let t = r.tensor(dtype, &d, -2.0, 2.0)?;
        let special = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY];
        let v: Vec<f64> = t
            .to_f64_vec()
            .iter()
            .map(|&x| if x > 1.0 { special[r.below(3)] } else { x })
            .collect();
        Tensor::from_f64_values(t.info().clone(), &v).unwrap_or(t)
    };
    Ok(SweepCase {
        family: "Predicate",
        op: Op::Math(op),
        inputs: vec![(x, false)],
        rtol: 0.0,
        atol: 0.0,
    })
}

/// Pow of f32 bases: constant exponents of the common short forms (squares, cubes, square
/// roots, reciprocals), and random exponents of every numeric exponent type.
fn pow(r: &mut Rng) -> Result<SweepCase, String> {
    let (ad, bd) = broadcast_pair(r);
    let a = r.tensor(DataType::F32, &ad, -3.0, 3.0)?;
    let (b, constant) = if r.below(2) == 0 {
        let e = r.pick(&[0.0, 1.0, 2.0, 3.0, 4.0, -1.0, -2.0, 0.5, 1.5, -0.5]);
        let dtype = r.pick(&[DataType::F32, DataType::F64]);
        let b = Tensor::from_f64_values(TensorInfo::new(dtype, vec![1]), &[e])
            .unwrap_or_else(|_| Tensor::scalar(2.0f32));
        (b, r.below(4) != 0)
    } else {
        let dtype = r.pick(&[DataType::F32, DataType::I64, DataType::I32]);
        (r.tensor(dtype, &bd, -3.0, 4.0)?, r.below(3) == 0)
    };
    Ok(SweepCase {
        family: "Pow",
        op: Op::Binary(BinaryOp::Pow),
        inputs: vec![(a, false), (b, constant)],
        rtol: 1e-6,
        atol: 1e-30,
    })
}

fn matmul(r: &mut Rng) -> Result<SweepCase, String> {
    let m = r.pick(&[1, 3, 7, 17, 63]);
    let k = r.pick(&[1, 7, 16, 63, 257]);
    let n = r.pick(&[1, 3, 16, 17, 129]);
    let batch: Vec<usize> = (0..r.below(3)).map(|_| r.pick(&[1, 2, 3])).collect();
    let mut ad = batch.clone();
    ad.extend([m, k]);
    let bd = if r.below(2) == 0 {
        vec![k, n]
    } else {
        let mut v = batch;
        v.extend([k, n]);
        v
    };
    let a = r.tensor(DataType::F32, &ad, -1.0, 1.0)?;
    let b = r.tensor(DataType::F32, &bd, -1.0, 1.0)?;
    Ok(SweepCase {
        family: "MatMul",
        op: Op::MatMul,
        inputs: vec![(a, false), (b, r.below(2) == 0)],
        rtol: 1e-4,
        atol: 1e-4 * (k as f64).sqrt(),
    })
}

/// A Gemm's operands for an `m`×`k` by `k`×`n` product, drawn in this order: whether A and
/// whether B are transposed, A ([m, k] or [k, m]), B ([k, n] or [n, k]), and C of [n],
/// [1, n], [m, 1] or [m, n]; with the two transposes.
pub(super) fn gemm_operands(
    r: &mut Rng,
    m: usize,
    k: usize,
    n: usize,
) -> Result<(Tensor, Tensor, Tensor, bool, bool), String> {
    let (ta, tb) = (r.below(2) == 0, r.below(2) == 0);
    let a = r.tensor(DataType::F32, &if ta { [k, m] } else { [m, k] }, -1.0, 1.0)?;
    let b = r.tensor(DataType::F32, &if tb { [n, k] } else { [k, n] }, -1.0, 1.0)?;
    let c_dims = match r.below(4) {
        0 => vec![n],
        1 => vec![1, n],
        2 => vec![m, 1],
        _ => vec![m, n],
    };
    let c = r.tensor(DataType::F32, &c_dims, -1.0, 1.0)?;
    Ok((a, b, c, ta, tb))
}

fn gemm(r: &mut Rng) -> Result<SweepCase, String> {
    let (m, k, n) = (r.pick(&SIZES), r.pick(&[1, 7, 17, 64]), r.pick(&SIZES));
    let (a, b, c, ta, tb) = gemm_operands(r, m, k, n)?;
    let constant = r.below(2) == 0;
    Ok(SweepCase {
        family: "Gemm",
        op: Op::Gemm(GemmDesc {
            alpha: 0.75,
            beta: -1.25,
            trans_a: ta,
            trans_b: tb,
        }),
        inputs: vec![(a, false), (b, constant), (c, constant)],
        rtol: 1e-4,
        atol: 1e-4 * (k as f64).sqrt(),
    })
}

/// A 2-D window whose output is at least one pixel for an input of `h` x `w`.
pub(crate) fn window(r: &mut Rng, h: usize, w: usize, max_kernel: usize) -> Window {
    let k = [
        1 + r.below(max_kernel.min(h + 2)),
        1 + r.below(max_kernel.min(w + 2)),
    ];
    let strides = vec![1 + r.below(2), 1 + r.below(3)];
    let dilations = vec![1 + usize::from(r.below(4) == 0), 1];
    let pads: Vec<usize> = (0..4).map(|i| r.below(k[i % 2].min(3))).collect();
    let mut win = Window {
        kernel: k.to_vec(),
        strides,
        dilations,
        pads,
        auto_pad: AutoPad::NotSet,
    };
    // Shrink the kernel until the window fits the padded input.
    for (axis, size) in [h, w].into_iter().enumerate() {
        while win.kernel[axis] > 1
            && (win.kernel[axis] - 1) * win.dilations[axis] + 1
                > size + win.pads[axis] + win.pads[axis + 2]
        {
            win.kernel[axis] -= 1;
        }
        if (win.kernel[axis] - 1) * win.dilations[axis] + 1
            > size + win.pads[axis] + win.pads[axis + 2]
        {
            win.dilations[axis] = 1;
        }
        win.pads[axis] = win.pads[axis].min(win.kernel[axis].saturating_sub(1));
        win.pads[axis + 2] = win.pads[axis + 2].min(win.kernel[axis].saturating_sub(1));
    }
    win
}

fn conv(r: &mut Rng) -> Result<SweepCase, String> {
    let group = r.pick(&[1, 1, 2, 3]);
    let depthwise = r.below(4) == 0;
    let (cin, cout, group) = if depthwise {
        let c = r.pick(&[1, 3, 8, 17]);
        (c, c, c)
    } else {
        (
            group * r.pick(&[1, 2, 5]),
            group * r.pick(&[1, 3, 4, 7]),
            group,
        )
    };
    let (n, h, w) = (
        r.pick(&[1, 1, 2]),
        r.pick(&[1, 5, 8, 13]),
        r.pick(&[1, 6, 9, 14]),
    );
    let win = window(r, h, w, 5);
    let x = r.tensor(DataType::F32, &[n, cin, h, w], -1.0, 1.0)?;
    let wt = r.tensor(
        DataType::F32,
        &[cout, cin / group, win.kernel[0], win.kernel[1]],
        -1.0,
        1.0,
    )?;
    let k = (cin / group) * win.kernel[0] * win.kernel[1];
    let mut inputs = vec![(x, false), (wt, r.below(4) != 0)];
    if r.below(2) == 0 {
        inputs.push((r.tensor(DataType::F32, &[cout], -1.0, 1.0)?, true));
    }
    Ok(SweepCase {
        family: "Conv",
        op: Op::Conv(ConvDesc { window: win, group }),
        inputs,
        rtol: 1e-4,
        atol: 1e-4 * (k as f64).sqrt(),
    })
}

fn pool(r: &mut Rng) -> Result<SweepCase, String> {
    let (n, c, h, w) = (
        r.pick(&[1, 2]),
        r.pick(&[1, 3, 16, 17]),
        r.pick(&[1, 4, 7, 12]),
        r.pick(&[1, 5, 8, 13]),
    );
    let kind = r.pick(&[PoolKind::Max, PoolKind::Average]);
    let mut win = window(r, h, w, 4);
    // Pads smaller than the kernel, so every window sees an input value.
    for i in 0..4 {
        win.pads[i] = win.pads[i].min(win.kernel[i % 2].saturating_sub(1));
    }
    win.dilations = vec![1, 1];
    let x = r.tensor(DataType::F32, &[n, c, h, w], -2.0, 2.0)?;
    Ok(SweepCase {
        family: "Pool",
        op: Op::Pool(PoolDesc {
            kind,
            window: win,
            ceil_mode: false,
            count_include_pad: r.below(2) == 0,
        }),
        inputs: vec![(x, false)],
        rtol: 1e-5,
        atol: 1e-6,
    })
}

fn softmax(r: &mut Rng) -> Result<SweepCase, String> {
    let rank = 1 + r.below(4);
    let d = dims(r, rank);
    let axis = r.below(rank) as i64 - if r.below(2) == 0 { rank as i64 } else { 0 };
    let x = r.tensor(DataType::F32, &d, -6.0, 6.0)?;
    Ok(SweepCase {
        family: "Softmax",
        op: Op::Softmax { axis },
        inputs: vec![(x, false)],
        rtol: 1e-5,
        atol: 1e-6,
    })
}

fn reduce(r: &mut Rng) -> Result<SweepCase, String> {
    let rank = 1 + r.below(4);
    let d = dims(r, rank);
    let kind = r.pick(&[
        ReduceKind::Mean,
        ReduceKind::Sum,
        ReduceKind::Max,
        ReduceKind::Min,
        ReduceKind::L2,
        ReduceKind::SumSquare,
        ReduceKind::LogSumExp,
    ]);
    let axes: Vec<i64> = (0..rank as i64).filter(|_| r.below(2) == 0).collect();
    let x = r.tensor(DataType::F32, &d, -2.0, 2.0)?;
    Ok(SweepCase {
        family: "Reduce",
        op: Op::Reduce(ReduceDesc {
            kind,
            axes,
            keepdims: r.below(2) == 0,
            noop_with_empty_axes: false,
        }),
        inputs: vec![(x, false)],
        rtol: 1e-5,
        atol: 1e-5,
    })
}

fn transpose(r: &mut Rng) -> Result<SweepCase, String> {
    let rank = 1 + r.below(5);
    let d = dims(r, rank);
    let mut perm: Vec<usize> = (0..rank).collect();
    for i in (1..rank).rev() {
        perm.swap(i, r.below(i + 1));
    }
    let dtype = r.pick(&[DataType::F32, DataType::I64, DataType::U8, DataType::F16]);
    let x = r.tensor(dtype, &d, -100.0, 100.0)?;
    Ok(SweepCase {
        family: "Transpose",
        op: Op::Transpose { perm },
        inputs: vec![(x, false)],
        rtol: 0.0,
        atol: 0.0,
    })
}

fn concat(r: &mut Rng) -> Result<SweepCase, String> {
    let rank = 1 + r.below(4);
    let base = dims(r, rank);
    let axis = r.below(rank);
    let dtype = r.pick(&[DataType::F32, DataType::I32, DataType::Bool]);
    let inputs = (0..1 + r.below(4))
        .map(|_| {
            let mut d = base.clone();
            d[axis] = r.pick(&SIZES);
            Ok((r.tensor(dtype, &d, 0.0, 2.0)?, r.below(4) == 0))
        })
        .collect::<Result<Vec<(Tensor, bool)>, String>>()?;
    Ok(SweepCase {
        family: "Concat",
        op: Op::Concat { axis: axis as i64 },
        inputs,
        rtol: 0.0,
        atol: 0.0,
    })
}

/// A network holding the case's one layer; constants as constants, the rest as inputs.
pub fn network(case: &SweepCase) -> Result<(Network, Vec<(String, Tensor)>), String> {
    let mut net = Network::new();
    let mut ids = Vec::new();
    let mut feed = Vec::new();
    for (i, (t, constant)) in case.inputs.iter().enumerate() {
        let name = format!("in{i}");
        let id = if *constant {
            net.add_constant(&name, t.clone())
        } else {
            feed.push((name.clone(), t.clone()));
            net.add_input(&name, t.info().clone())
        }
        .map_err(|e| e.to_string())?;
        ids.push(id);
    }
    let outs = net
        .add_layer("under_test", case.op.clone(), &ids)
        .map_err(|e| e.to_string())?;
    for o in outs {
        net.mark_output(o).map_err(|e| e.to_string())?;
    }
    Ok((net, feed))
}

/// Run `cases` cases of every family on `backend` alone, from `seed`, into `report`.
pub fn run(runtime: &Runtime, backend: &BackendId, seed: u64, cases: usize, report: &mut Report) {
    for (fi, (family, generate)) in FAMILIES.iter().enumerate() {
        for i in 0..cases {
            let case_seed = seed
                .wrapping_mul(1_000_003)
                .wrapping_add((fi * 100_000 + i) as u64);
            let case = match generate(&mut Rng::new(case_seed)) {
                Ok(case) => case,
                Err(e) => {
                    let name = format!("{family} #{i} (--seed {seed}; case seed {case_seed})");
                    report.record(SUITE, family, &name, Outcome::Skipped(e));
                    continue;
                }
            };
            let name = format!(
                "{family} #{i} (--seed {seed}; case seed {case_seed}: {})",
                describe(&case)
            );
            let outcome = match run_case(runtime, backend, &case) {
                Outcome::Failed { why, worst } => Outcome::Failed {
                    why: match shrink(runtime, backend, &case) {
                        Some(small) => {
                            format!("{why}; smallest failing case: {}", describe(&small))
                        }
                        None => why,
                    },
                    worst,
                },
                other => other,
            };
            report.record(SUITE, family, &name, outcome);
        }
    }
}

/// The case in a line: op and input shapes and types.
fn describe(case: &SweepCase) -> String {
    let shapes: Vec<String> = case
        .inputs
        .iter()
        .map(|(t, c)| format!("{}{}", t.info(), if *c { " const" } else { "" }))
        .collect();
    format!("{:?} on {}", case.op, shapes.join(", "))
}

/// At most this many reruns go into shrinking one failing case.
const SHRINK_RUNS: usize = 120;

/// A smaller case that still fails, or `None` if no smaller one does: input dims are cut (to
/// 1, half, or one less; one input at a time, or the same axis of every input at once, so
/// broadcasting and matching dims survive), keeping the values at the indices that remain,
/// as long as the layer is still valid and still fails. Greedy, bounded by `SHRINK_RUNS`.
pub fn shrink(runtime: &Runtime, backend: &BackendId, case: &SweepCase) -> Option<SweepCase> {
    let mut best: Option<SweepCase> = None;
    let mut runs = 0;
    loop {
        let current = best.as_ref().unwrap_or(case);
        let mut improved = None;
        for candidate in smaller(current) {
            if runs >= SHRINK_RUNS {
                return best;
            }
            let inputs: Vec<&Tensor> = candidate.inputs.iter().map(|(t, _)| t).collect();
            if backplane::cpu_ref::evaluate(&candidate.op, &inputs).is_err() {
                continue;
            }
            runs += 1;
            if matches!(
                run_case(runtime, backend, &candidate),
                Outcome::Failed { .. }
            ) {
                improved = Some(candidate);
                break;
            }
        }
        match improved {
            Some(c) => best = Some(c),
            None => return best,
        }
    }
}

/// The candidates one step smaller than `case` (same op, fewer elements).
fn smaller(case: &SweepCase) -> Vec<SweepCase> {
    let mut out = Vec::new();
    let cuts = |d: usize| -> Vec<usize> {
        let mut v = vec![1, d / 2, d.saturating_sub(1)];
        v.retain(|&x| x >= 1 && x < d);
        v.dedup();
        v
    };
    let max_rank = case
        .inputs
        .iter()
        .map(|(t, _)| t.shape().dims().len())
        .max()
        .unwrap_or(0);
    // The same axis (counted from the right) of every input that has that dim.
    for back in 0..max_rank {
        let Some(d) = case.inputs.iter().find_map(|(t, _)| {
            let dims = t.shape().dims();
            (back < dims.len()).then(|| dims[dims.len() - 1 - back])
        }) else {
            continue;
        };
        for to in cuts(d) {
            let inputs = case
                .inputs
                .iter()
                .map(|(t, c)| {
                    let mut dims = t.shape().dims().to_vec();
                    let r = dims.len();
                    if back < r && dims[r - 1 - back] == d {
                        dims[r - 1 - back] = to;
                    }
                    Ok((cut(t, &dims)?, *c))
                })
                .collect::<Result<Vec<_>, String>>();
            if let Ok(inputs) = inputs {
                out.push(with_inputs(case, inputs));
            }
        }
    }
    // One axis of one input.
    for (i, (t, _)) in case.inputs.iter().enumerate() {
        for (k, &d) in t.shape().dims().iter().enumerate() {
            for to in cuts(d) {
                let mut dims = t.shape().dims().to_vec();
                dims[k] = to;
                let Ok(small) = cut(t, &dims) else { continue };
                let mut inputs: Vec<(Tensor, bool)> = case.inputs.clone();
                inputs[i].0 = small;
                out.push(with_inputs(case, inputs));
            }
        }
    }
    out
}

fn with_inputs(case: &SweepCase, inputs: Vec<(Tensor, bool)>) -> SweepCase {
    SweepCase {
        family: case.family,
        op: case.op.clone(),
        inputs,
        rtol: case.rtol,
        atol: case.atol,
    }
}

/// The part of `t` at the indices below `dims` (each at most `t`'s).
fn cut(t: &Tensor, dims: &[usize]) -> Result<Tensor, String> {
    let old = t.shape().dims();
    let values = t.to_f64_vec();
    let n: usize = dims.iter().product();
    let mut out = Vec::new();
    out.try_reserve_exact(n).map_err(|e| e.to_string())?;
    let mut index = vec![0usize; dims.len()];
    for _ in 0..n {
        let flat = index
            .iter()
            .zip(old)
            .fold(0usize, |acc, (&i, &d)| acc * d + i);
        out.push(values.get(flat).copied().unwrap_or(0.0));
        for k in (0..dims.len()).rev() {
            index[k] += 1;
            if index[k] < dims[k] {
                break;
            }
            index[k] = 0;
        }
    }
    Tensor::from_f64_values(TensorInfo::new(t.dtype(), dims.to_vec()), &out)
        .map_err(|e| e.to_string())
}

/// One case on `backend` alone against CpuRef's kernels.
pub fn run_case(runtime: &Runtime, backend: &BackendId, case: &SweepCase) -> Outcome {
    let inputs: Vec<&Tensor> = case.inputs.iter().map(|(t, _)| t).collect();
    let want = match backplane::cpu_ref::evaluate(&case.op, &inputs) {
        Ok(w) => w,
        Err(e) => return Outcome::Skipped(format!("CpuRef: {e}")),
    };
    let (net, feed) = match network(case) {
        Ok(v) => v,
        Err(e) => return Outcome::Skipped(e),
    };
    match run_network(runtime, &net, std::slice::from_ref(backend), &feed) {
        Run::Refused(why) => Outcome::Refused(why),
        Run::Ran { outputs, .. } => match outputs {
            Err(why) => Outcome::Failed { why, worst: None },
            Ok(got) => {
                if got.len() != want.len() {
                    return Outcome::Failed {
                        why: format!("{} outputs, expected {}", got.len(), want.len()),
                        worst: None,
                    };
                }
                for ((_, g), w) in got.iter().zip(&want) {
                    if let Err(Mismatch {
                        message: why,
                        worst,
                        ..
                    }) = compare(g, w, case.rtol, case.atol)
                    {
                        return Outcome::Failed {
                            why,
                            worst: Some(worst),
                        };
                    }
                }
                Outcome::Passed
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cases_are_reproducible_from_their_seed() {
        for (_, generate) in FAMILIES {
            let (a, b) = (generate(&mut Rng::new(42)), generate(&mut Rng::new(42)));
            assert!(a.is_ok() && b.is_ok(), "the generator failed");
            let (Ok(a), Ok(b)) = (a, b) else { continue };
            assert_eq!(a.op, b.op);
            assert_eq!(a.inputs.len(), b.inputs.len());
            for ((x, _), (y, _)) in a.inputs.iter().zip(&b.inputs) {
                assert_eq!(x, y);
            }
        }
    }

    #[test]
    fn a_cut_keeps_the_values_at_the_indices_that_remain() {
        let t = Tensor::from_f64_values(
            TensorInfo::new(DataType::F32, vec![2, 3]),
            &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0],
        );
        assert!(t.is_ok());
        let Ok(t) = t else { return };
        let small = cut(&t, &[2, 2]).map(|s| s.to_f64_vec());
        assert_eq!(small, Ok(vec![0.0, 1.0, 3.0, 4.0]));
    }

    #[test]
    fn smaller_cases_have_fewer_elements_and_the_same_op() {
        let case = binary(&mut Rng::new(3));
        assert!(case.is_ok());
        let Ok(case) = case else { return };
        let size =
            |c: &SweepCase| -> usize { c.inputs.iter().map(|(t, _)| t.to_f64_vec().len()).sum() };
        let candidates = smaller(&case);
        assert!(!candidates.is_empty() || size(&case) == case.inputs.len());
        for c in &candidates {
            assert_eq!(c.op, case.op);
            assert!(size(c) < size(&case));
        }
    }

    #[test]
    fn generated_cases_are_valid_layers() {
        for (family, generate) in FAMILIES {
            for seed in 0..50 {
                let case = generate(&mut Rng::new(seed));
                assert!(case.is_ok(), "{family} seed {seed}: {:?}", case.err());
                let Ok(case) = case else { continue };
                let inputs: Vec<&Tensor> = case.inputs.iter().map(|(t, _)| t).collect();
                let r = backplane::cpu_ref::evaluate(&case.op, &inputs);
                assert!(r.is_ok(), "{family} seed {seed}: {:?}: {r:?}", case.op);
            }
        }
    }
}
