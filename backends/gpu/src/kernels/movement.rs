//! Data movement on the device: Transpose, Concat, Slice and Pad, of any element type. Like
//! [`super::typed`]'s kernels they move raw bits (tensors bound as `array<u32>`, an element
//! read by its size), so i32, i64, bool and u8 tensors move as f32 ones do and no bit
//! pattern passes through float registers. Transpose, Slice and Pad gather (each output
//! word computed by one thread); Concat scatters each input into its slab of the output,
//! word by word, or, for elements smaller than a word (whose slabs may share a word),
//! rewrites the output's words input by input, keeping the bytes of other slabs.

use super::typed::{self, Storage};
use super::{p32, p32s, product, strides, Bind, Step};
use backplane_core::DataType;

/// Transpose of `x` (elements stored as `s`) by `perm` (output axis k is input axis
/// `perm[k]`).
pub fn transpose(s: Storage, x: &[usize], perm: &[usize]) -> Result<Vec<Step>, String> {
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
    // p: [threads, n, rank, out dims, input strides]
    let helpers = format!(
        "fn val(e: u32) -> {} {{
    let r = p[2];
    var rem = e;
    var at = 0u;
    for (var d = 0u; d < r; d = d + 1u) {{
        let k = r - 1u - d;
        let dim = p[3u + k];
        at = at + (rem % dim) * p[3u + r + k];
        rem = rem / dim;
    }}
    return ld0(at);
}}\n",
        s.wgsl_type()
    );
    Ok(vec![typed::step(
        &[(Bind::Input(0), s)],
        (Bind::Output(0), s),
        product(x),
        &helpers,
        &params,
    )?])
}

/// Concat of `inputs` (elements stored as `s`) along `axis` (normalized): one step per
/// non-empty input, each writing its slab of the output.
pub fn concat(s: Storage, inputs: &[Vec<usize>], axis: usize) -> Result<Vec<Step>, String> {
    let total: usize = inputs
        .iter()
        .map(|d| d.get(axis).copied().unwrap_or(0))
        .sum();
    let out_n = match inputs.first() {
        Some(d) if axis < d.len() => product(&d[..axis]) * total * product(&d[axis + 1..]),
        _ => 0,
    };
    let mut offset = 0usize;
    let mut steps = Vec::new();
    for (slot, d) in inputs.iter().enumerate() {
        let len = d.get(axis).copied().unwrap_or(0);
        let n = product(d);
        if n > 0 {
            let params = p32s(
                &[len, product(&d[axis + 1..]), total, offset],
                "a Concat parameter",
            )?;
            steps.push(match s {
                Storage::Word | Storage::DWord => scatter(s, slot, params, n)?,
                Storage::Byte | Storage::Half => merge(s, slot, &params, out_n)?,
            });
        }
        offset += len;
    }
    Ok(steps)
}

/// One Concat input's elements written to their places in the output, one thread per
/// element (of a word or two, so no two threads share a word). `params`: the input's axis
/// length, the inner size, the output's axis length and the input's offset along it.
fn scatter(s: Storage, slot: usize, params: Vec<u32>, n: usize) -> Result<Step, String> {
    let copy = if s == Storage::DWord {
        "y[2u * at] = x0[2u * i];\n    y[2u * at + 1u] = x0[2u * i + 1u];"
    } else {
        "y[at] = x0[i];"
    };
    let source = format!(
        "@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> x0: array<u32>;
@group(0) @binding(2) var<storage, read_write> y: array<u32>;
@compute @workgroup_size({g})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {{
    let i = gid.x + gid.y * nwg.x * {g}u;
    if (i >= p[0]) {{ return; }}
    let A = p[1];
    let I = p[2];
    let a = (i / I) % A;
    let o = i / (I * A);
    let at = (o * p[3] + p[4] + a) * I + i % I;
    {copy}
}}
",
        g = super::LINEAR_GROUP
    );
    let mut all = vec![p32(n, "the element count")?];
    all.extend(params);
    Ok(Step {
        source,
        params: all,
        binds: vec![Bind::Input(slot), Bind::Output(0)],
        groups: super::linear_groups(n)?,
    })
}

/// One Concat input of sub-word elements merged into the output: every output word is
/// rewritten, its elements in this input's slab read from the input and the others kept
/// (written by the steps of the other inputs, which run in order).
fn merge(s: Storage, slot: usize, params: &[u32], out_n: usize) -> Result<Step, String> {
    let (per, bits, mask) = if s == Storage::Byte {
        (4, 8, "0xffu")
    } else {
        (2, 16, "0xffffu")
    };
    let helpers = format!(
        "fn val(e: u32) -> u32 {{
    let A = p[2];
    let I = p[3];
    let T = p[4];
    let a = (e / I) % T;
    if (a >= p[5] && a < p[5] + A) {{
        let o = e / (I * T);
        return ld0((o * A + a - p[5]) * I + e % I);
    }}
    return (y[e / {per}u] >> ((e % {per}u) * {bits}u)) & {mask};
}}\n"
    );
    typed::step(
        &[(Bind::Input(slot), s)],
        (Bind::Output(0), s),
        out_n,
        &helpers,
        params,
    )
}

/// A strided slice of `x` (elements stored as `s`): one range per axis (`start`, `step`,
/// which may be negative, and the count read), as core's `SliceDesc::resolve` answers them.
pub fn slice(s: Storage, x: &[usize], ranges: &[(i64, i64, usize)]) -> Result<Vec<Step>, String> {
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
    // p: [threads, n, rank, out dims, starts, steps (i32 bits), input strides]
    let helpers = format!(
        "fn val(e: u32) -> {} {{
    let r = p[2];
    var rem = e;
    var at = 0i;
    for (var d = 0u; d < r; d = d + 1u) {{
        let k = r - 1u - d;
        let dim = p[3u + k];
        let c = i32(rem % dim);
        at = at + (bitcast<i32>(p[3u + r + k]) + c * bitcast<i32>(p[3u + 2u * r + k])) * i32(p[3u + 3u * r + k]);
        rem = rem / dim;
    }}
    return ld0(u32(at));
}}\n",
        s.wgsl_type()
    );
    let out: Vec<usize> = ranges.iter().map(|r| r.2).collect();
    Ok(vec![typed::step(
        &[(Bind::Input(0), s)],
        (Bind::Output(0), s),
        product(&out),
        &helpers,
        &params,
    )?])
}

/// How Pad fills outside the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PadFill {
    /// With a constant: its bits in the tensor's type (low word first).
    Constant([u32; 2]),
    /// Mirror without repeating the edge.
    Reflect,
    /// Repeat the edge value.
    Edge,
    /// Wrap around.
    Wrap,
}

/// The bits of `value` as an element of `dtype`, converted as the host converts a Pad value
/// (low word first; sub-word types in the low bits), or why it cannot be.
pub fn constant_bits(dtype: DataType, value: f64) -> Result<[u32; 2], String> {
    let info = backplane_core::TensorInfo::new(dtype, vec![1]);
    let t = backplane_core::Tensor::from_f64_values(info, &[value]).map_err(|e| e.to_string())?;
    let mut b = [0u8; 8];
    let bytes = t.bytes();
    let n = bytes.len().min(8);
    b[..n].copy_from_slice(&bytes[..n]);
    Ok([
        u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
        u32::from_le_bytes([b[4], b[5], b[6], b[7]]),
    ])
}

/// Pad `x` (elements stored as `s`) by `begins` (negative crops) into `out` with `fill`.
pub fn pad(
    s: Storage,
    x: &[usize],
    begins: &[i64],
    out: &[usize],
    fill: PadFill,
) -> Result<Vec<Step>, String> {
    if begins.len() != x.len() || out.len() != x.len() || x.contains(&0) {
        return Err("GpuAcc pads non-empty inputs with one begin per axis".into());
    }
    let (mode, value) = match fill {
        PadFill::Constant(bits) => (0, bits),
        PadFill::Reflect => (1, [0, 0]),
        PadFill::Edge => (2, [0, 0]),
        PadFill::Wrap => (3, [0, 0]),
    };
    let mut params = vec![p32(x.len(), "the rank")?, mode, value[0], value[1]];
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
    let constant = match s {
        Storage::DWord => "vec2<u32>(p[4], p[5])",
        _ => "p[4]",
    };
    // p: [threads, n, rank, mode, value (two words), out dims, input dims, input strides,
    // begins (i32)]
    let helpers = format!(
        "fn val(e: u32) -> {ty} {{
    let r = p[2];
    let mode = p[3];
    var rem = e;
    var at = 0u;
    for (var d = 0u; d < r; d = d + 1u) {{
        let k = r - 1u - d;
        let dim = p[6u + k];
        let n = i32(p[6u + r + k]);
        var c = i32(rem % dim) - bitcast<i32>(p[6u + 3u * r + k]);
        rem = rem / dim;
        if (c < 0 || c >= n) {{
            if (mode == 0u) {{
                return {constant};
            }} else if (mode == 1u) {{
                if (c < 0) {{ c = -c; }} else {{ c = 2 * (n - 1) - c; }}
            }} else if (mode == 2u) {{
                c = clamp(c, 0, n - 1);
            }} else {{
                c = ((c % n) + n) % n;
            }}
        }}
        at = at + u32(max(c, 0)) * p[6u + 2u * r + k];
    }}
    return ld0(at);
}}\n",
        ty = s.wgsl_type()
    );
    Ok(vec![typed::step(
        &[(Bind::Input(0), s)],
        (Bind::Output(0), s),
        product(out),
        &helpers,
        &params,
    )?])
}
