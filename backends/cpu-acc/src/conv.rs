//! Convolution: 1×1 (stride 1, no padding) as a plain GEMM on the input, general kernels as a
//! GEMM over implicit im2col panels, depthwise as its own sliding-window kernel. Weights are
//! packed once at workload creation; bias and activation are applied in the GEMM epilogue.

use crate::act::Activation;
use crate::gemm::{self, ASrc, BSrc, Epilogue, Im2col, MatView, Packed};
use crate::io::{f32s, f32s_mut, input, output, Io};
use crate::threads::Threads;
use crate::window::{self, Geo2, WindowKind};
use backplane_backend_api::{BackendError, Result, Workload};
use backplane_core::ops::ConvDesc;
use backplane_core::{Tensor, TensorView, TensorViewMut};

/// Why CpuAcc cannot run a convolution with these shapes, if it cannot.
pub fn check(desc: &ConvDesc, x: &[usize], w: &[usize]) -> std::result::Result<(), String> {
    if x.len() != 3 && x.len() != 4 {
        return Err(format!(
            "CpuAcc runs 1-D and 2-D convolutions, not {}-D",
            x.len().saturating_sub(2)
        ));
    }
    let g = desc.geometry(x).map_err(|e| e.to_string())?;
    Geo2::from_geometry(&g, &x[2..]).ok_or("unsupported geometry")?;
    if w.len() != x.len() {
        return Err("weight rank differs from input rank".into());
    }
    Ok(())
}

enum Weights {
    /// One packed A matrix per group.
    Packed(Vec<Packed>),
    /// Depthwise taps, [channels, kh·kw].
    Depthwise(Vec<f32>),
    /// Weights are a run-time input: packed per execution.
    Runtime,
}

/// A convolution (optionally with a fused activation).
pub struct ConvWorkload {
    io: Io,
    geo: Geo2,
    n: usize,
    c: usize,
    m: usize,
    group: usize,
    pointwise: bool,
    weights: Weights,
    bias: Option<Vec<f32>>,
    act: Activation,
    threads: Threads,
}

impl ConvWorkload {
    /// Build it: `weights`/`bias` are the constant values when known.
    pub fn new(
        io: Io,
        desc: &ConvDesc,
        weights: Option<&Tensor>,
        bias: Option<&Tensor>,
        act: Activation,
        threads: Threads,
    ) -> Result<Self> {
        let bad = |m: String| BackendError::Other(format!("{}: {m}", io.layer));
        let xd = io
            .inputs
            .first()
            .ok_or_else(|| bad("no input".into()))?
            .shape
            .dims()
            .to_vec();
        let wd = io
            .inputs
            .get(1)
            .ok_or_else(|| bad("no weights".into()))?
            .shape
            .dims()
            .to_vec();
        check(desc, &xd, &wd).map_err(bad)?;
        let g = desc.geometry(&xd)?;
        let geo = Geo2::from_geometry(&g, &xd[2..]).ok_or_else(|| bad("geometry".into()))?;
        let (n, c, m) = (xd[0], xd[1], wd[0]);
        let group = desc.group.max(1);
        let depthwise = group == c && m == c && c > 1;
        let pointwise = geo.kh == 1
            && geo.kw == 1
            && geo.sh == 1
            && geo.sw == 1
            && geo.pt == 0
            && geo.pl == 0
            && geo.oh == geo.h
            && geo.ow == geo.w;
        let weights = match weights {
            None => Weights::Runtime,
            Some(t) => {
                let w = t.as_slice::<f32>()?;
                if depthwise {
                    Weights::Depthwise(w.to_vec())
                } else {
                    Weights::Packed(pack_weights(w, m, group, c / group * geo.kh * geo.kw))
                }
            }
        };
        let bias = bias
            .map(|b| b.as_slice::<f32>().map(<[f32]>::to_vec))
            .transpose()?;
        Ok(ConvWorkload {
            io,
            geo,
            n,
            c,
            m,
            group,
            pointwise,
            weights,
            bias,
            act,
            threads,
        })
    }
}

fn pack_weights(w: &[f32], m: usize, group: usize, k: usize) -> Vec<Packed> {
    let mg = m / group;
    (0..group)
        .map(|g| {
            let view = MatView {
                data: &w[g * mg * k..(g + 1) * mg * k],
                rs: k,
                cs: 1,
            };
            Packed::pack_a(mg, k, view)
        })
        .collect()
}

impl Workload for ConvWorkload {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        self.io.check(inputs, outputs)?;
        let x = f32s(input(inputs, 0)?)?;
        let bias_in;
        let bias: Option<&[f32]> = match &self.bias {
            Some(b) => Some(b),
            None => match inputs.get(2) {
                Some(v) => {
                    bias_in = f32s(v)?;
                    Some(bias_in)
                }
                None => None,
            },
        };
        let y = f32s_mut(output(outputs)?)?;
        let geo = &self.geo;
        let runtime_weights;
        let weights = match &self.weights {
            Weights::Runtime => {
                let w = f32s(input(inputs, 1)?)?;
                if self.group == self.c && self.m == self.c && self.c > 1 {
                    runtime_weights = Weights::Depthwise(w.to_vec());
                } else {
                    let k = self.c / self.group * geo.kh * geo.kw;
                    runtime_weights = Weights::Packed(pack_weights(w, self.m, self.group, k));
                }
                &runtime_weights
            }
            other => other,
        };
        match weights {
            Weights::Depthwise(w) => {
                let taps = geo.kh * geo.kw;
                let c = self.c;
                let act = self.act;
                window::run_planes(&self.threads, geo, x, y, 0.0, |p| {
                    let ch = p % c;
                    WindowKind::Depthwise {
                        weights: &w[ch * taps..(ch + 1) * taps],
                        bias: bias.map_or(0.0, |b| b[ch]),
                        act,
                    }
                })
            }
            Weights::Packed(packed) => {
                let (cg, mg) = (self.c / self.group, self.m / self.group);
                let (in_plane, out_plane) = (geo.h * geo.w, geo.oh * geo.ow);
                let k = cg * geo.kh * geo.kw;
                for b in 0..self.n {
                    for (g, pa) in packed.iter().enumerate() {
                        let xs = (b * self.c + g * cg) * in_plane;
                        let xg = &x[xs..xs + cg * in_plane];
                        let ys = (b * self.m + g * mg) * out_plane;
                        let yg = &mut y[ys..ys + mg * out_plane];
                        let src = if self.pointwise {
                            BSrc::View(MatView {
                                data: xg,
                                rs: in_plane,
                                cs: 1,
                            })
                        } else {
                            BSrc::Im2col(Im2col {
                                x: xg,
                                c: cg,
                                h: geo.h,
                                w: geo.w,
                                kh: geo.kh,
                                kw: geo.kw,
                                sh: geo.sh,
                                sw: geo.sw,
                                dh: geo.dh,
                                dw: geo.dw,
                                ph: geo.pt,
                                pw: geo.pl,
                                oh: geo.oh,
                                ow: geo.ow,
                            })
                        };
                        let ep = Epilogue {
                            row_bias: bias.map(|bb| &bb[g * mg..(g + 1) * mg]),
                            act: self.act,
                            ..Epilogue::default()
                        };
                        gemm::sgemm(
                            &self.threads,
                            mg,
                            out_plane,
                            k,
                            &ASrc::Packed(pa),
                            &src,
                            yg,
                            out_plane,
                            &ep,
                        )?;
                    }
                }
                Ok(())
            }
            Weights::Runtime => Err(self.io.error("weights were not prepared".into())),
        }
    }
}
