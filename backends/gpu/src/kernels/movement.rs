//! Data movement on the device: copies (Identity, Reshape, Flatten, Squeeze, Unsqueeze),
//! Transpose and Concat. f32 tensors only, like the rest of GpuAcc's memory.

use super::{linear_shader, linear_step, p32, p32s, product, strides, Bind, Step};

/// The values of input 0, unchanged (a reshape of contiguous memory).
pub fn copy(n: usize) -> Result<Vec<Step>, String> {
    let source = linear_shader(1, "", "    y[i] = x0[i];");
    Ok(vec![linear_step(
        source,
        vec![],
        vec![Bind::Input(0), Bind::Output(0)],
        n,
    )?])
}

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
