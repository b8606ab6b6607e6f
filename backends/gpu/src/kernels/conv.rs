//! Convolution (1-D and 2-D, grouped and depthwise included), direct: one thread per output
//! element walks its window over the input channels of its group, adds the bias and applies
//! the fused activation. 1-D inputs run as 2-D with a height of 1.

use super::elementwise::Act;
use super::{linear_shader, linear_step, p32s, product, Bind, Step};
use backplane_core::ops::{ConvDesc, Geometry};

/// A 1-D or 2-D window resolved to 2-D: (kernel, stride, dilation, pad begin, pad end) per
/// axis (height, width) and the output extent.
#[derive(Debug, Clone, Copy)]
pub struct Window2 {
    /// Input height and width.
    pub input: [usize; 2],
    /// Output height and width.
    pub output: [usize; 2],
    /// Kernel extents.
    pub kernel: [usize; 2],
    /// Strides.
    pub strides: [usize; 2],
    /// Dilations.
    pub dilations: [usize; 2],
    /// Padding before.
    pub begin: [usize; 2],
    /// Padding after.
    pub end: [usize; 2],
}

impl Window2 {
    /// The window of `geo` over the spatial dims `spatial` (1 or 2 of them).
    pub fn new(geo: &Geometry, spatial: &[usize]) -> Result<Window2, String> {
        let two = |v: &[usize], fill: usize| -> Result<[usize; 2], String> {
            match v {
                [w] => Ok([fill, *w]),
                [h, w] => Ok([*h, *w]),
                _ => Err("GpuAcc runs 1-D and 2-D windows only".into()),
            }
        };
        Ok(Window2 {
            input: two(spatial, 1)?,
            output: two(&geo.output, 1)?,
            kernel: two(&geo.kernel, 1)?,
            strides: two(&geo.strides, 1)?,
            dilations: two(&geo.dilations, 1)?,
            begin: two(&geo.pads_begin, 0)?,
            end: two(&geo.pads_end, 0)?,
        })
    }

    /// Its parameters: input H W, output H W, kernel, strides, dilations, pads begin, pads
    /// end (18 values).
    pub fn params(&self) -> Result<Vec<u32>, String> {
        let mut v = Vec::new();
        for pair in [
            self.input,
            self.output,
            self.kernel,
            self.strides,
            self.dilations,
            self.begin,
            self.end,
        ] {
            v.extend_from_slice(&pair);
        }
        p32s(&v, "a window parameter")
    }
}

/// Conv of X `x` with weights `w` (and a bias when `bias`), then `act`.
pub fn conv(
    desc: &ConvDesc,
    x: &[usize],
    w: &[usize],
    bias: bool,
    act: Act,
) -> Result<Vec<Step>, String> {
    let geo = desc.geometry(x).map_err(|e| e.to_string())?;
    let win = Window2::new(&geo, &x[2..])?;
    let (n, c, m) = (x[0], x[1], w[0]);
    if desc.group == 0 || c % desc.group != 0 || m % desc.group != 0 {
        return Err(format!(
            "Conv group {} does not divide C={c} and M={m}",
            desc.group
        ));
    }
    // params after the count: N C M group, then the window (p[5]..p[22]).
    let mut params = p32s(&[n, c, m, desc.group], "a Conv parameter")?;
    params.extend(win.params()?);
    let bias_term = if bias { "x2[m]" } else { "0.0" };
    let body = format!(
        "    let C = p[2];
    let M = p[3];
    let G = p[4];
    let H = p[5]; let W = p[6]; let OH = p[7]; let OW = p[8];
    let KH = p[9]; let KW = p[10]; let SH = p[11]; let SW = p[12];
    let DH = p[13]; let DW = p[14]; let PH = p[15]; let PW = p[16];
    let ow = i % OW;
    let t1 = i / OW;
    let oh = t1 % OH;
    let t2 = t1 / OH;
    let m = t2 % M;
    let nn = t2 / M;
    let cg = C / G;
    let g = m / (M / G);
    var acc = {bias_term};
    for (var c = 0u; c < cg; c = c + 1u) {{
        let xc = (nn * C + g * cg + c) * H;
        let wc = (m * cg + c) * KH;
        for (var kh = 0u; kh < KH; kh = kh + 1u) {{
            let ih = i32(oh * SH + kh * DH) - i32(PH);
            if (ih < 0 || ih >= i32(H)) {{ continue; }}
            let xr = (xc + u32(ih)) * W;
            let wr = (wc + kh) * KW;
            for (var kw = 0u; kw < KW; kw = kw + 1u) {{
                let iw = i32(ow * SW + kw * DW) - i32(PW);
                if (iw < 0 || iw >= i32(W)) {{ continue; }}
                acc = acc + x0[xr + u32(iw)] * x1[wr + kw];
            }}
        }}
    }}
    y[i] = act(acc);"
    );
    let inputs = if bias { 3 } else { 2 };
    let source = linear_shader(inputs, &act.wgsl(), &body);
    let mut binds: Vec<Bind> = (0..inputs).map(Bind::Input).collect();
    binds.push(Bind::Output(0));
    let out = n * m * product(&win.output);
    Ok(vec![linear_step(source, params, binds, out)?])
}
