//! Resize, nearest (any element type) and N-linear (f32, and f16 through [`super::half`]). The coordinate arithmetic is
//! core's (`CoordinateTransform::source`, `NearestMode::index`), run on the host when the
//! layer is planned: each axis gets a table (per output coordinate, the input index nearest
//! mode reads, or linear mode's two neighbours and weights), so the device only looks
//! indices up and blends, and ties round exactly as on the CPU.

use super::typed::{self, Storage};
use super::{linear_shader, linear_step, p32, p32s, product, strides, Bind, Step};
use backplane_core::ops::{linear_neighbours, CoordinateTransform, ResizeDesc, ResizeMode};

/// Most axes linear mode blends over (2^rank neighbours per output element).
const MAX_LINEAR_RANK: usize = 6;

/// Why GpuAcc does not run this Resize, if it does not.
fn refusal(desc: &ResizeDesc, x: &[usize]) -> Option<String> {
    if desc.coordinate_transform == CoordinateTransform::TfCropAndResize {
        return Some("GpuAcc does not implement Resize's tf_crop_and_resize".into());
    }
    if desc.mode == ResizeMode::Cubic {
        return Some("GpuAcc does not implement cubic Resize".into());
    }
    if desc.mode == ResizeMode::Linear && desc.antialias && desc.scales.iter().any(|&s| s < 1.0) {
        return Some("GpuAcc does not implement antialiased linear downsampling".into());
    }
    if x.contains(&0) || desc.output_shape.len() != x.len() || desc.scales.len() != x.len() {
        return Some("GpuAcc resizes non-empty inputs with one scale per axis".into());
    }
    None
}

/// Parameters shared by both modes: rank, output dims, input strides, then per axis the
/// offset (into the whole parameter array, counted from `first`) of its table; then the
/// tables, `width` values per output coordinate each.
fn params(
    x: &[usize],
    out: &[usize],
    first: usize,
    width: usize,
    table: impl Fn(usize, usize) -> Vec<u32>,
) -> Result<Vec<u32>, String> {
    let r = x.len();
    let mut head = vec![p32(r, "the rank")?];
    head.extend(p32s(out, "a dimension")?);
    head.extend(p32s(&strides(x), "a stride")?);
    let mut tables = Vec::new();
    let mut offsets = Vec::with_capacity(r);
    let base = first + head.len() + r;
    for (axis, &len) in out.iter().enumerate() {
        offsets.push(p32(base + tables.len(), "a table offset")?);
        for o in 0..len {
            let row = table(axis, o);
            debug_assert_eq!(row.len(), width);
            tables.extend(row);
        }
    }
    head.extend(offsets);
    head.extend(tables);
    Ok(head)
}

/// Resize of `x` (dims) whose elements are stored as `s`; `float`: whether linear mode can
/// blend them (f32, or f16 on a device with f16 kernels).
pub fn resize(
    desc: &ResizeDesc,
    x: &[usize],
    s: Storage,
    float: bool,
) -> Result<Vec<Step>, String> {
    if let Some(why) = refusal(desc, x) {
        return Err(why);
    }
    let out = desc.output_shape.clone();
    let coordinate = |axis: usize, o: usize| {
        desc.coordinate_transform
            .source(o, x[axis], out[axis], desc.scales[axis])
    };
    let n = product(&out);
    match desc.mode {
        ResizeMode::Nearest => {
            // The typed template puts its own two values first.
            let p = params(x, &out, 2, 1, |axis, o| {
                let i = desc.nearest_mode.index(coordinate(axis, o), x[axis]);
                vec![i as u32]
            })?;
            let ty = s.wgsl_type();
            let helpers = format!(
                "fn val(e: u32) -> {ty} {{
    let r = p[2];
    var rem = e;
    var src = 0u;
    for (var d = 0u; d < r; d = d + 1u) {{
        let k = r - 1u - d;
        let dim = p[3u + k];
        let o = rem % dim;
        rem = rem / dim;
        src = src + p[p[3u + 2u * r + k] + o] * p[3u + r + k];
    }}
    return ld0(src);
}}\n"
            );
            Ok(vec![typed::step(
                &[(Bind::Input(0), s)],
                (Bind::Output(0), s),
                n,
                &helpers,
                &p,
            )?])
        }
        ResizeMode::Linear => {
            if !float {
                return Err(
                    "GpuAcc's linear Resize takes f32 (and f16 where it has f16 kernels) only"
                        .into(),
                );
            }
            if x.len() > MAX_LINEAR_RANK {
                return Err(format!(
                    "GpuAcc's linear Resize blends at most {MAX_LINEAR_RANK} axes"
                ));
            }
            // Linear's two neighbours of the clamped coordinate and their weights, as
            // CpuRef's taps (weights rounded to f32).
            let p = params(x, &out, 1, 4, |axis, o| {
                let [(i0, w0), (i1, w1)] = linear_neighbours(coordinate(axis, o), x[axis]);
                vec![
                    i0 as u32,
                    i1 as u32,
                    (w0 as f32).to_bits(),
                    (w1 as f32).to_bits(),
                ]
            })?;
            let body = "    let r = p[1];
    var acc = 0.0;
    let corners = 1u << r;
    for (var c = 0u; c < corners; c = c + 1u) {
        var rem = i;
        var src = 0u;
        var w = 1.0;
        for (var d = 0u; d < r; d = d + 1u) {
            let k = r - 1u - d;
            let dim = p[2u + k];
            let o = rem % dim;
            rem = rem / dim;
            let t = p[2u + 2u * r + k] + 4u * o;
            let bit = (c >> k) & 1u;
            src = src + p[t + bit] * p[2u + r + k];
            w = w * bitcast<f32>(p[t + 2u + bit]);
        }
        if (w != 0.0) { acc = acc + w * x0[src]; }
    }
    y[i] = acc;";
            Ok(vec![linear_step(
                linear_shader(1, "", body),
                p,
                vec![Bind::Input(0), Bind::Output(0)],
                n,
            )?])
        }
        ResizeMode::Cubic => Err("GpuAcc does not implement cubic Resize".into()),
    }
}
