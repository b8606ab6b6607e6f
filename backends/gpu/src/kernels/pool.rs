//! Pooling: MaxPool and AveragePool over 1-D and 2-D windows (padding, dilation, ceil mode,
//! `count_include_pad` as CpuRef counts it), one thread per output; the global poolings as
//! reductions over the spatial axes.

use super::conv::Window2;
use super::{linear_shader, linear_step, product, Bind, Step};
use backplane_core::ops::ReduceKind;
use backplane_core::ops::{PoolDesc, PoolKind};

/// MaxPool / AveragePool of `x`.
pub fn pool(desc: &PoolDesc, x: &[usize]) -> Result<Vec<Step>, String> {
    let geo = desc.geometry(x).map_err(|e| e.to_string())?;
    let win = Window2::new(&geo, &x[2..])?;
    let mut params = vec![
        u32::from(desc.kind == PoolKind::Max),
        u32::from(desc.count_include_pad),
    ];
    params.extend(win.params()?);
    let body = "    let H = p[3]; let W = p[4]; let OH = p[5]; let OW = p[6];
    let KH = p[7]; let KW = p[8]; let SH = p[9]; let SW = p[10];
    let DH = p[11]; let DW = p[12]; let PH = p[13]; let PW = p[14];
    let EH = p[15]; let EW = p[16];
    let ow = i % OW;
    let t1 = i / OW;
    let oh = t1 % OH;
    let plane = t1 / OH;
    let base = plane * H * W;
    var mx = bitcast<f32>(0xff800000u);
    var sum = 0.0;
    var inside = 0u;
    var padded = 0u;
    for (var kh = 0u; kh < KH; kh = kh + 1u) {
        let ph = oh * SH + kh * DH;
        let ih = i32(ph) - i32(PH);
        for (var kw = 0u; kw < KW; kw = kw + 1u) {
            let pw = ow * SW + kw * DW;
            let iw = i32(pw) - i32(PW);
            if (ph < PH + H + EH && pw < PW + W + EW) { padded = padded + 1u; }
            if (ih < 0 || ih >= i32(H) || iw < 0 || iw >= i32(W)) { continue; }
            let v = x0[base + u32(ih) * W + u32(iw)];
            mx = max(mx, v);
            sum = sum + v;
            inside = inside + 1u;
        }
    }
    if (p[1] == 1u) {
        y[i] = mx;
    } else if (p[2] == 1u) {
        y[i] = sum / f32(padded);
    } else {
        y[i] = sum / f32(inside);
    }";
    let source = linear_shader(1, "", body);
    let out = x[0] * x[1] * product(&win.output);
    Ok(vec![linear_step(
        source,
        params,
        vec![Bind::Input(0), Bind::Output(0)],
        out,
    )?])
}

/// GlobalAveragePool / GlobalMaxPool: the mean or maximum over the spatial axes, as the
/// reduction kernels compute it (a workgroup per channel for a large plane).
pub fn global_pool(kind: PoolKind, x: &[usize]) -> Result<Vec<Step>, String> {
    let kind = match kind {
        PoolKind::Max => ReduceKind::Max,
        PoolKind::Average => ReduceKind::Mean,
    };
    let mask: Vec<bool> = (0..x.len()).map(|k| k >= 2).collect();
    super::reduce::reduce(kind, x, &mask)
}
