//! Normalizations: Softmax / LogSoftmax along one axis and LayerNormalization over the
//! trailing axes (a row: the values one result is normalized over). A row of contiguous
//! values (LayerNormalization; Softmax along the last axis) takes one workgroup, its threads
//! striding along the row and meeting in workgroup-memory reductions; a Softmax row strided
//! through memory takes one thread.

use super::{bindings, linear_shader, linear_step, p32, product, Bind, Step, MAX_GROUPS};

/// Threads of a row kernel's workgroup.
pub(super) const ROW_GROUP: u32 = 64;

/// The WGSL function `NAME(v, t)` in which a workgroup's `ROW_GROUP` threads each bring a
/// value `v` (thread `t`) and all get back their combination (`combine` of `a` and `b`), met in
/// the workgroup array `part`; every thread must call it.
pub(super) fn meet_fn(name: &str, combine: &str) -> String {
    format!(
        "fn {name}(v: f32, t: u32) -> f32 {{
    part[t] = v;
    workgroupBarrier();
    for (var w = {half}u; w > 0u; w = w >> 1u) {{
        if (t < w) {{
            let a = part[t];
            let b = part[t + w];
            part[t] = {combine};
        }}
        workgroupBarrier();
    }}
    let r = part[0];
    workgroupBarrier();
    return r;
}}
",
        half = ROW_GROUP / 2
    )
}

/// A one-workgroup-per-row shader: `row` is the row, `t` the thread, `live` whether the row
/// exists (workgroups past the last row still meet every barrier); `body` may call
/// `reduce_sum(v)` and `reduce_max(v)`, which every thread must reach.
fn row_shader(inputs: usize, body: &str) -> String {
    format!(
        "{}var<workgroup> part: array<f32, {ROW_GROUP}>;
{}{}@compute @workgroup_size({ROW_GROUP})
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {{
    let row = wg.x + wg.y * nwg.x;
    let live = row < p[0];
{body}
}}
",
        bindings(inputs, 1),
        meet_fn("reduce_sum", "a + b"),
        meet_fn("reduce_max", "max(a, b)"),
    )
}

/// A step of a row kernel over `rows` rows (`params` after the row count).
pub(super) fn row_step(
    source: String,
    mut params: Vec<u32>,
    binds: Vec<Bind>,
    rows: usize,
) -> Result<Step, String> {
    params.insert(0, p32(rows, "the row count")?);
    let groups = p32(rows, "the row count")?;
    let x = groups.clamp(1, MAX_GROUPS);
    let y = groups.div_ceil(x).max(1);
    if y > MAX_GROUPS {
        return Err(format!("{rows} rows exceed one dispatch"));
    }
    Ok(Step {
        source,
        params,
        binds,
        groups: [x, y, 1],
    })
}

/// Softmax (or LogSoftmax when `log`) of `x` along `axis` (already normalized).
pub fn softmax(x: &[usize], axis: usize, log: bool) -> Result<Vec<Step>, String> {
    let (outer, len, inner) = (product(&x[..axis]), x[axis], product(&x[axis + 1..]));
    if inner == 1 {
        let body = "    let A = p[1];
    let base = row * A;
    var mx = bitcast<f32>(0xff800000u);
    if (live) { for (var a = t; a < A; a = a + 64u) { mx = max(mx, x0[base + a]); } }
    let m = reduce_max(mx, t);
    var s = 0.0;
    if (live) { for (var a = t; a < A; a = a + 64u) { s = s + exp(x0[base + a] - m); } }
    let total = reduce_sum(s, t);
    let ls = log(total);
    if (live) {
        for (var a = t; a < A; a = a + 64u) {
            let v = x0[base + a] - m;
            y[base + a] = select(exp(v) / total, v - ls, p[2] == 1u);
        }
    }";
        let params = vec![p32(len, "the axis")?, u32::from(log)];
        return Ok(vec![row_step(
            row_shader(1, body),
            params,
            vec![Bind::Input(0), Bind::Output(0)],
            outer,
        )?]);
    }
    let params = vec![
        p32(len, "the axis")?,
        p32(inner, "the inner size")?,
        u32::from(log),
    ];
    let body = "    let A = p[1];
    let I = p[2];
    let base = (i / I) * A * I + i % I;
    var mx = bitcast<f32>(0xff800000u);
    for (var a = 0u; a < A; a = a + 1u) { mx = max(mx, x0[base + a * I]); }
    var s = 0.0;
    for (var a = 0u; a < A; a = a + 1u) { s = s + exp(x0[base + a * I] - mx); }
    let ls = log(s);
    for (var a = 0u; a < A; a = a + 1u) {
        let v = x0[base + a * I] - mx;
        y[base + a * I] = select(exp(v) / s, v - ls, p[3] == 1u);
    }";
    let source = linear_shader(1, "", body);
    Ok(vec![linear_step(
        source,
        params,
        vec![Bind::Input(0), Bind::Output(0)],
        outer * inner,
    )?])
}

/// LayerNormalization of `x` over the axes from `axis` on, with a scale (`scale`: its
/// element count, 1 or the row length) and an optional bias (`bias`: likewise).
pub fn layer_norm(
    x: &[usize],
    axis: usize,
    epsilon: f32,
    scale: usize,
    bias: Option<usize>,
) -> Result<Vec<Step>, String> {
    let (rows, len) = (product(&x[..axis]), product(&x[axis..]));
    let full = |n: usize| u32::from(n != 1);
    let params = vec![
        p32(len, "the row length")?,
        epsilon.to_bits(),
        full(scale),
        bias.map(full).unwrap_or(0),
    ];
    let bias_term = if bias.is_some() {
        "x2[j * p[4]]"
    } else {
        "0.0"
    };
    let body = format!(
        "    let L = p[1];
    let base = row * L;
    var s = 0.0;
    if (live) {{ for (var j = t; j < L; j = j + 64u) {{ s = s + x0[base + j]; }} }}
    let mean = reduce_sum(s, t) / f32(L);
    var vs = 0.0;
    if (live) {{ for (var j = t; j < L; j = j + 64u) {{ let d = x0[base + j] - mean; vs = vs + d * d; }} }}
    let inv = 1.0 / sqrt(reduce_sum(vs, t) / f32(L) + bitcast<f32>(p[2]));
    if (live) {{
        for (var j = t; j < L; j = j + 64u) {{
            y[base + j] = (x0[base + j] - mean) * inv * x1[j * p[3]] + {bias_term};
        }}
    }}"
    );
    let inputs = if bias.is_some() { 3 } else { 2 };
    let source = row_shader(inputs, &body);
    let mut binds: Vec<Bind> = (0..inputs).map(Bind::Input).collect();
    binds.push(Bind::Output(0));
    Ok(vec![row_step(source, params, binds, rows)?])
}

/// BatchNormalization (inference) of `x` [N, C, ...] with per-channel scale, bias, mean and
/// variance (inputs 1 to 4).
pub fn batch_norm(x: &[usize], epsilon: f32) -> Result<Vec<Step>, String> {
    let channels = x.get(1).copied().unwrap_or(1);
    let inner = product(x.get(2..).unwrap_or(&[]));
    let params = vec![
        p32(channels, "the channels")?,
        p32(inner, "the spatial size")?,
        epsilon.to_bits(),
    ];
    let body = "    let c = (i / p[2]) % p[1];
    y[i] = (x0[i] - x3[c]) / sqrt(x4[c] + bitcast<f32>(p[3])) * x1[c] + x2[c];";
    let source = linear_shader(5, "", body);
    let mut binds: Vec<Bind> = (0..5).map(Bind::Input).collect();
    binds.push(Bind::Output(0));
    Ok(vec![linear_step(source, params, binds, product(x))?])
}
