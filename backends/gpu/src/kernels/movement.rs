//! Data movement of f32 tensors on the device: Transpose, Concat, Slice and Pad. (Copies,
//! Expand/Tile, Gather and Split move any element type: see [`super::typed`].)

use super::{linear_shader, linear_step, p32, p32s, product, strides, Bind, Step};

/// Transpose of `x` by `perm` (output axis k is input axis `perm[k]`).
pub fn transpose(x: &[usize], perm: &[usize]) -> Result<Vec<Step>, String> {
    if perm.len() != x.len() || perm.iter().any(|&a| a >= x.len()) {
        return Err(format!(
            "Transpose perm {perm:?} does not fit rank {}",
            x.len()
        ));
    }
    let in_strides = strides(x);
    let out: Vec<usize> = perm.iter().map(|&a| x[a]).collect();
    let read: Vec<usize> = perm.iter().map(|&a| in_strides[a]).collect();
    let mut params = vec![p32(out.len(), "the rank")?];
    params.extend(p32s(&out, "a dimension")?);
    params.extend(p32s(&read, "a stride")?);
    let body = "    let r = p[1];
    var rem = i;
    var at = 0u;
    for (var d = 0u; d < r; d = d + 1u) {
        let k = r - 1u - d;
        let dim = p[2u + k];
        at = at + (rem % dim) * p[2u + r + k];
        rem = rem / dim;
    }
    y[i] = x0[at];";
    let source = linear_shader(1, "", body);
    Ok(vec![linear_step(
        source,
        params,
        vec![Bind::Input(0), Bind::Output(0)],
        product(x),
    )?])
}

/// Concat of `inputs` along `axis` (normalized): one step per non-empty input, each writing
/// its slab of the output.
pub fn concat(inputs: &[Vec<usize>], axis: usize) -> Result<Vec<Step>, String> {
    let total: usize = inputs
        .iter()
        .map(|d| d.get(axis).copied().unwrap_or(0))
        .sum();
    let mut offset = 0usize;
    let mut steps = Vec::new();
    let body = "    let I = p[2];
    let A = p[1];
    let a = (i / I) % A;
    let o = i / (I * A);
    y[(o * p[3] + p[4] + a) * I + i % I] = x0[i];";
    for (slot, d) in inputs.iter().enumerate() {
        let len = d.get(axis).copied().unwrap_or(0);
        let n = product(d);
        if n > 0 {
            let params = p32s(
                &[len, product(&d[axis + 1..]), total, offset],
                "a Concat parameter",
            )?;
            let source = linear_shader(1, "", body);
            steps.push(linear_step(
                source,
                params,
                vec![Bind::Input(slot), Bind::Output(0)],
                n,
            )?);
        }
        offset += len;
    }
    Ok(steps)
}

/// A strided slice of `x`: one range per axis (`start`, `step`, which may be negative, and
/// the count read), as core's `SliceDesc::resolve` answers them.
pub fn slice(x: &[usize], ranges: &[(i64, i64, usize)]) -> Result<Vec<Step>, String> {
    if ranges.len() != x.len() {
        return Err("the slice ranges do not fit the input's rank".into());
    }
    let in_strides = strides(x);
    let int = |v: i64| -> Result<u32, String> {
        i32::try_from(v)
            .map(|v| v as u32)
            .map_err(|_| format!("slice bound {v} exceeds GpuAcc's 32-bit indexing"))
    };
    let mut params = vec![p32(x.len(), "the rank")?];
    for &(_, _, len) in ranges {
        params.push(p32(len, "a dimension")?);
    }
    for &(start, _, _) in ranges {
        params.push(int(start)?);
    }
    for &(_, step, _) in ranges {
        params.push(int(step)?);
    }
    params.extend(p32s(&in_strides, "a stride")?);
    // p: [n, rank, out dims, starts, steps (i32 bits), input strides]
    let body = "    let r = p[1];
    var rem = i;
    var at = 0i;
    for (var d = 0u; d < r; d = d + 1u) {
        let k = r - 1u - d;
        let dim = p[2u + k];
        let c = i32(rem % dim);
        at = at + (bitcast<i32>(p[2u + r + k]) + c * bitcast<i32>(p[2u + 2u * r + k])) * i32(p[2u + 3u * r + k]);
        rem = rem / dim;
    }
    y[i] = x0[u32(at)];";
    let out: Vec<usize> = ranges.iter().map(|r| r.2).collect();
    Ok(vec![linear_step(
        linear_shader(1, "", body),
        params,
        vec![Bind::Input(0), Bind::Output(0)],
        product(&out),
    )?])
}

/// How Pad fills outside the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PadFill {
    /// With a constant (its f32 bits).
    Constant(u32),
    /// Mirror without repeating the edge.
    Reflect,
    /// Repeat the edge value.
    Edge,
    /// Wrap around.
    Wrap,
}

/// Pad `x` by `begins` (negative crops) into `out` with `fill`.
pub fn pad(x: &[usize], begins: &[i64], out: &[usize], fill: PadFill) -> Result<Vec<Step>, String> {
    if begins.len() != x.len() || out.len() != x.len() || x.contains(&0) {
        return Err("GpuAcc pads non-empty inputs with one begin per axis".into());
    }
    let (mode, value) = match fill {
        PadFill::Constant(bits) => (0, bits),
        PadFill::Reflect => (1, 0),
        PadFill::Edge => (2, 0),
        PadFill::Wrap => (3, 0),
    };
    let mut params = vec![p32(x.len(), "the rank")?, mode, value];
    params.extend(p32s(out, "a dimension")?);
    params.extend(p32s(x, "a dimension")?);
    params.extend(p32s(&strides(x), "a stride")?);
    for &b in begins {
        params.push(
            i32::try_from(b)
                .map(|v| v as u32)
                .map_err(|_| format!("pad {b} exceeds GpuAcc's 32-bit indexing"))?,
        );
    }
    // p: [n, rank, mode, value bits, out dims, input dims, input strides, begins (i32)]
    let body = "    let r = p[1];
    let mode = p[2];
    var rem = i;
    var at = 0u;
    var inside = true;
    for (var d = 0u; d < r; d = d + 1u) {
        let k = r - 1u - d;
        let dim = p[4u + k];
        let n = i32(p[4u + r + k]);
        var c = i32(rem % dim) - bitcast<i32>(p[4u + 3u * r + k]);
        rem = rem / dim;
        if (c < 0 || c >= n) {
            if (mode == 0u) {
                inside = false;
            } else if (mode == 1u) {
                if (c < 0) { c = -c; } else { c = 2 * (n - 1) - c; }
            } else if (mode == 2u) {
                c = clamp(c, 0, n - 1);
            } else {
                c = ((c % n) + n) % n;
            }
        }
        at = at + u32(max(c, 0)) * p[4u + 2u * r + k];
    }
    if (inside) { y[i] = x0[at]; } else { y[i] = bitcast<f32>(p[3]); }";
    Ok(vec![linear_step(
        linear_shader(1, "", body),
        params,
        vec![Bind::Input(0), Bind::Output(0)],
        product(out),
    )?])
}
