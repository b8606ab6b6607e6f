//! Convolution (1-D and 2-D, grouped and depthwise included), by one of two algorithms that
//! [`choose`] picks per layer:
//!
//! - **implicit GEMM** (tiled): per group, the product of the weights (M/G × C/G·KH·KW) and
//!   the input's patches (C/G·KH·KW × OH·OW), never materialized: each 16×16 workgroup stages
//!   a tile of weights and a tile of patch values (read from the input where they lie, zero
//!   in the padding) in workgroup memory, as the tiled MatMul does. For layers with enough
//!   output channels per group (1×1 and 3×3 convolutions of real CNNs). In 16×16 tiles,
//!   64×64 register-blocked tiles, or 16×16 tiles over slices of K with a reduction pass
//!   (split-K), by workgroup count ([`super::tiles`]).
//! - **direct**: one thread per output element walks its window over the input channels of
//!   its group. For depthwise and narrow grouped convolutions, where a tile of output
//!   channels would mostly idle.
//!
//! All add the bias and apply the fused activation. 1-D inputs run as 2-D with a height of 1.

use super::elementwise::Act;
use super::tiles::{self, Layout, Shape, Tiles};
use super::{
    bindings, linear_shader, linear_step, p32, p32s, product, splitk, Bind, Step, BLOCK_4X4_INIT,
    BLOCK_4X4_ROW, BLOCK_4X4_STEP, MAX_GROUPS,
};
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

/// Fewest output channels per group for which the implicit GEMM's 16-row tiles pay (the
/// automatic choice walks narrower convolutions directly).
const GEMM_MIN_CHANNELS: usize = 8;

/// The layout of a convolution of X `x` with weights `w` in `group` groups producing
/// `positions` output positions, as `tiles` asks (see [`tiles::choose`]): the product of
/// each group is (M/G × C/G·KH·KW) by (C/G·KH·KW × positions), N·G of them.
pub fn choose(tiles: Tiles, x: &[usize], w: &[usize], group: usize, positions: usize) -> Layout {
    let m = w.first().copied().unwrap_or(0);
    let per_group = m.checked_div(group).unwrap_or(0);
    let shape = Shape {
        m: per_group,
        n: positions,
        k: product(w.get(1..).unwrap_or_default()),
        batches: x.first().copied().unwrap_or(1).saturating_mul(group),
    };
    tiles::choose(tiles, shape, true, per_group < GEMM_MIN_CHANNELS)
}

/// Tile edge of the implicit GEMM.
const TILE: u32 = 16;

/// The implicit-GEMM shader (see the module documentation). Parameters: N C M G, input H W,
/// output H W, kernel, strides, dilations, pads begin (16 values), then split-K's slice
/// count and length. With an epilogue (`Some((bias, act))`) it writes the finished output;
/// without (`None`) it is split-K's partial pass: workgroup z runs over batch × group ×
/// slice and each slice's raw sums go to the scratch buffer bound as `y`, slice-major (see
/// [`super::splitk`]).
fn gemm_shader(epilogue: Option<(bool, Act)>) -> String {
    let (inputs, act) = match epilogue {
        Some((bias, act)) => (if bias { 3 } else { 2 }, act),
        None => (2, Act::None),
    };
    let (split, finish) = match epilogue {
        None => (
            "let S = p[16];
    let SL = p[17];
    let z = wg.z / S;
    let ks = wg.z % S;
    let k0 = ks * SL;
    let k1 = min(K, k0 + SL);",
            "y[ks * (p[0] * M * P) + (n * M + m) * P + col] = acc;".to_string(),
        ),
        Some((bias, _)) => {
            let bias_term = if bias { "x2[m]" } else { "0.0" };
            (
                "let z = wg.z;
    let k0 = 0u;
    let k1 = K;",
                format!("y[(n * M + m) * P + col] = act(acc + {bias_term});"),
            )
        }
    };
    format!(
        "{}{}
var<workgroup> ta: array<array<f32, {TILE}>, {TILE}>;
var<workgroup> tb: array<array<f32, {TILE}>, {TILE}>;
@compute @workgroup_size({TILE}, {TILE}, 1)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {{
    let C = p[1]; let M = p[2]; let G = p[3];
    let H = p[4]; let W = p[5]; let OH = p[6]; let OW = p[7];
    let KH = p[8]; let KW = p[9]; let SH = p[10]; let SW = p[11];
    let DH = p[12]; let DW = p[13]; let PH = p[14]; let PW = p[15];
    let cg = C / G;
    let mg = M / G;
    let kk = KH * KW;
    let K = cg * kk;
    let P = OH * OW;
    {split}
    let n = z / G;
    let g = z % G;
    let row = wg.y * {TILE}u + lid.y;
    let col = wg.x * {TILE}u + lid.x;
    let oh = col / OW;
    let ow = col % OW;
    let xbase = (n * C + g * cg) * H;
    let wbase = g * mg;
    var acc = 0.0;
    for (var t = k0; t < k1; t = t + {TILE}u) {{
        let ak = t + lid.x;
        if (row < mg && ak < k1) {{
            ta[lid.y][lid.x] = x1[(wbase + row) * K + ak];
        }} else {{
            ta[lid.y][lid.x] = 0.0;
        }}
        let bk = t + lid.y;
        var v = 0.0;
        if (bk < k1 && col < P) {{
            let c = bk / kk;
            let r = bk % kk;
            let ih = i32(oh * SH + (r / KW) * DH) - i32(PH);
            let iw = i32(ow * SW + (r % KW) * DW) - i32(PW);
            if (ih >= 0 && ih < i32(H) && iw >= 0 && iw < i32(W)) {{
                v = x0[((xbase + c * H) + u32(ih)) * W + u32(iw)];
            }}
        }}
        tb[lid.y][lid.x] = v;
        workgroupBarrier();
        for (var q = 0u; q < {TILE}u; q = q + 1u) {{
            acc = acc + ta[lid.y][q] * tb[q][lid.x];
        }}
        workgroupBarrier();
    }}
    if (row < mg && col < P) {{
        let m = wbase + row;
        {finish}
    }}
}}
",
        bindings(inputs, 1),
        act.wgsl()
    )
}

/// The blocked implicit-GEMM shader: 16×16 threads, each computing a 4×4 block of a 64×64
/// output tile; per step of 16 along K, the workgroup stages 64×16 weights and 16×64 patch
/// values (four loads per thread each) in workgroup memory. Same parameters as
/// [`gemm_shader`].
fn blocked_shader(bias: bool, act: Act) -> String {
    let inputs = if bias { 3 } else { 2 };
    let bias_term = if bias { "x2[m]" } else { "0.0" };
    format!(
        "{}{}
var<workgroup> ta: array<f32, 1024>;
var<workgroup> tb: array<f32, 1024>;
@compute @workgroup_size(16, 16, 1)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {{
    let C = p[1]; let M = p[2]; let G = p[3];
    let H = p[4]; let W = p[5]; let OH = p[6]; let OW = p[7];
    let KH = p[8]; let KW = p[9]; let SH = p[10]; let SW = p[11];
    let DH = p[12]; let DW = p[13]; let PH = p[14]; let PW = p[15];
    let cg = C / G;
    let mg = M / G;
    let kk = KH * KW;
    let K = cg * kk;
    let P = OH * OW;
    let n = wg.z / G;
    let g = wg.z % G;
    let row0 = wg.y * 64u;
    let col0 = wg.x * 64u;
    let tid = lid.y * 16u + lid.x;
    let xbase = (n * C + g * cg) * H;
    let wbase = g * mg;
    // The patch column this thread loads, fixed for the whole loop.
    let bn = tid % 64u;
    let bcol = col0 + bn;
    let boh = bcol / OW;
    let bow = bcol % OW;
{BLOCK_4X4_INIT}
    for (var t = 0u; t < K; t = t + 16u) {{
        for (var j = 0u; j < 4u; j = j + 1u) {{
            let idx = tid + j * 256u;
            let am = idx / 16u;
            let ak = t + idx % 16u;
            var a = 0.0;
            if (row0 + am < mg && ak < K) {{ a = x1[(wbase + row0 + am) * K + ak]; }}
            ta[idx] = a;
            let bkl = tid / 64u + 4u * j;
            let bk = t + bkl;
            var v = 0.0;
            if (bk < K && bcol < P) {{
                let c = bk / kk;
                let r = bk % kk;
                let ih = i32(boh * SH + (r / KW) * DH) - i32(PH);
                let iw = i32(bow * SW + (r % KW) * DW) - i32(PW);
                if (ih >= 0 && ih < i32(H) && iw >= 0 && iw < i32(W)) {{
                    v = x0[((xbase + c * H) + u32(ih)) * W + u32(iw)];
                }}
            }}
            tb[bkl * 64u + bn] = v;
        }}
        workgroupBarrier();
{BLOCK_4X4_STEP}
        workgroupBarrier();
    }}
    for (var i = 0u; i < 4u; i = i + 1u) {{
        let row = row0 + lid.y * 4u + i;
        if (row >= mg) {{ continue; }}
        {BLOCK_4X4_ROW}
        let m = wbase + row;
        for (var j = 0u; j < 4u; j = j + 1u) {{
            let col = col0 + lid.x * 4u + j;
            if (col < P) {{
                y[(n * M + m) * P + col] = act(accs[j] + {bias_term});
            }}
        }}
    }}
}}
",
        bindings(inputs, 1),
        act.wgsl()
    )
}

/// The implicit-GEMM step of a convolution.
fn conv_gemm(
    dims: [usize; 4],
    win: &Window2,
    bias: bool,
    act: Act,
    layout: Layout,
) -> Result<Vec<Step>, String> {
    let [n, c, m, group] = dims;
    let mut params = p32s(&[n, c, m, group], "a Conv parameter")?;
    let w = win;
    params.extend(p32s(
        &[
            w.input[0],
            w.input[1],
            w.output[0],
            w.output[1],
            w.kernel[0],
            w.kernel[1],
            w.strides[0],
            w.strides[1],
            w.dilations[0],
            w.dilations[1],
            w.begin[0],
            w.begin[1],
        ],
        "a window parameter",
    )?);
    let k = (c / group) * w.kernel[0] * w.kernel[1];
    let (tile, splits, slice) = match layout {
        Layout::Blocked64 => (64, 1, k),
        Layout::SplitK { splits, slice } => (TILE as usize, splits, slice),
        Layout::Direct | Layout::Tiled16 => (TILE as usize, 1, k),
    };
    params.extend(p32s(&[splits, slice], "a K slice")?);
    let positions = product(&w.output);
    let cols = p32(positions.div_ceil(tile), "the output size")?;
    let rows = p32((m / group).div_ceil(tile), "the channels")?;
    let batches = p32((n * group).saturating_mul(splits), "the batch")?;
    if cols > MAX_GROUPS || rows > MAX_GROUPS || batches > MAX_GROUPS {
        return Err("the convolution is too large for one dispatch".into());
    }
    let groups = [cols.max(1), rows.max(1), batches.max(1)];
    if let Layout::SplitK { splits, .. } = layout {
        let out = n * m * positions;
        let partial = Step {
            source: gemm_shader(None),
            params,
            binds: vec![
                Bind::Input(0),
                Bind::Input(1),
                splitk::scratch(splits, out)?,
            ],
            groups,
        };
        let epilogue = splitk::Epilogue::Bias {
            positions,
            channels: m,
            bias,
        };
        return Ok(vec![partial, splitk::reduce(splits, out, &epilogue, act)?]);
    }
    let inputs = if bias { 3 } else { 2 };
    let mut binds: Vec<Bind> = (0..inputs).map(Bind::Input).collect();
    binds.push(Bind::Output(0));
    Ok(vec![Step {
        source: if layout == Layout::Blocked64 {
            blocked_shader(bias, act)
        } else {
            gemm_shader(Some((bias, act)))
        },
        params,
        binds,
        groups,
    }])
}

/// Conv of X `x` with weights `w` (and a bias when `bias`), then `act`, in the layout
/// [`choose`] picks for `tiles`.
pub fn conv(
    desc: &ConvDesc,
    x: &[usize],
    w: &[usize],
    bias: bool,
    act: Act,
    tiles: Tiles,
) -> Result<Vec<Step>, String> {
    let geo = desc.geometry(x).map_err(|e| e.to_string())?;
    let positions = product(&geo.output);
    let layout = choose(tiles, x, w, desc.group, positions);
    conv_with(desc, x, w, bias, act, layout)
}

/// Conv in a given layout.
pub fn conv_with(
    desc: &ConvDesc,
    x: &[usize],
    w: &[usize],
    bias: bool,
    act: Act,
    layout: Layout,
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
    if layout != Layout::Direct {
        return conv_gemm([n, c, m, desc.group], &win, bias, act, layout);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chooser_walks_narrow_convolutions_and_splits_few_long_ones() {
        let auto = |x: &[usize], w: &[usize], g, p| choose(Tiles::Auto, x, w, g, p);
        // Depthwise and narrow: direct.
        assert_eq!(auto(&[1, 32, 9, 9], &[32, 1, 3, 3], 32, 81), Layout::Direct);
        assert_eq!(auto(&[1, 4, 9, 9], &[4, 4, 3, 3], 1, 81), Layout::Direct);
        assert_eq!(auto(&[1, 4, 9, 9], &[4, 4, 3, 3], 0, 81), Layout::Direct);
        // Small and short: 16x16 tiles.
        assert_eq!(auto(&[1, 8, 7, 7], &[64, 8, 3, 3], 1, 49), Layout::Tiled16);
        // ResNet-50's early 1x1 expansion (256 x 3136 outputs): 16x16 tiles.
        assert_eq!(
            auto(&[1, 64, 56, 56], &[256, 64, 1, 1], 1, 3136),
            Layout::Tiled16
        );
        // ResNet-50's last 3x3 (512 x 49 outputs, K = 4608): split K.
        assert!(matches!(
            auto(&[1, 512, 7, 7], &[512, 512, 3, 3], 1, 49),
            Layout::SplitK { .. }
        ));
        // Forced: taken even where the automatic choice would not.
        assert_eq!(
            choose(Tiles::T64, &[1, 32, 9, 9], &[32, 1, 3, 3], 32, 81),
            Layout::Blocked64
        );
    }
}
