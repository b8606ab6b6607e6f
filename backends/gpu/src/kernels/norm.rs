//! Normalizations: Softmax / LogSoftmax along one axis and LayerNormalization over the
//! trailing axes. One thread per row (a row: the values one result is normalized over).

use super::{linear_shader, linear_step, p32, product, Bind, Step};

/// Softmax (or LogSoftmax when `log`) of `x` along `axis` (already normalized).
pub fn softmax(x: &[usize], axis: usize, log: bool) -> Result<Vec<Step>, String> {
    let (outer, len, inner) = (product(&x[..axis]), x[axis], product(&x[axis + 1..]));
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
    let base = i * L;
    var mean = 0.0;
    for (var j = 0u; j < L; j = j + 1u) {{ mean = mean + x0[base + j]; }}
    mean = mean / f32(L);
    var vs = 0.0;
    for (var j = 0u; j < L; j = j + 1u) {{ let d = x0[base + j] - mean; vs = vs + d * d; }}
    let inv = 1.0 / sqrt(vs / f32(L) + bitcast<f32>(p[2]));
    for (var j = 0u; j < L; j = j + 1u) {{
        y[base + j] = (x0[base + j] - mean) * inv * x1[j * p[3]] + {bias_term};
    }}"
    );
    let inputs = if bias.is_some() { 3 } else { 2 };
    let source = linear_shader(inputs, "", &body);
    let mut binds: Vec<Bind> = (0..inputs).map(Bind::Input).collect();
    binds.push(Bind::Output(0));
    Ok(vec![linear_step(source, params, binds, rows)?])
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
