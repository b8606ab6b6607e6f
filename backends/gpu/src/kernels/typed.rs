//! Kernels over tensors of any element type, as raw bits: Gather, Split, Where, the
//! comparisons, Cast and the copies (Reshape and kin). Device buffers hold a tensor's bytes
//! exactly as host memory does, so these shaders bind every tensor as `array<u32>` and read
//! an element by its size: a byte (bool, i8, u8), a half word (f16, i16, u16, bf16), a word
//! (f32, i32, u32) or two words (i64, u64, f64, low word first).
//!
//! One template ([`step`]) serves them all: the op supplies `fn val(e: u32)`, the bits of
//! output element `e`; each thread writes one output word (so sub-word outputs, such as the
//! bools of a comparison, are written whole, never shared between threads) or, for 8-byte
//! elements, one element's two words. Parameters: `p[0]` threads, `p[1]` output elements,
//! the op's own from `p[2]`.

use super::{linear_groups, p32, p32s, product, Bind, Step, LINEAR_GROUP};
use backplane_core::ops::{BinaryExtOp, MathOp};
use backplane_core::DataType;

/// How an element is stored, by its size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Storage {
    /// One byte: four per word.
    Byte,
    /// Two bytes: two per word.
    Half,
    /// One word.
    Word,
    /// Two words, low first.
    DWord,
}

impl Storage {
    /// The storage of `dtype`.
    pub fn of(dtype: DataType) -> Storage {
        match dtype.size() {
            1 => Storage::Byte,
            2 => Storage::Half,
            8 => Storage::DWord,
            _ => Storage::Word,
        }
    }

    /// Elements per word (0 for two-word elements).
    fn per_word(self) -> u32 {
        match self {
            Storage::Byte => 4,
            Storage::Half => 2,
            Storage::Word => 1,
            Storage::DWord => 0,
        }
    }

    /// The WGSL type of an element's bits.
    pub fn wgsl_type(self) -> &'static str {
        match self {
            Storage::DWord => "vec2<u32>",
            _ => "u32",
        }
    }
}

/// Marks "no source element" (an index out of range): the output element is zero.
pub const NONE: u32 = u32::MAX;

/// `fn ld{k}(e: u32)`: the bits of element `e` of input `k`, stored as `s`.
fn loader(k: usize, s: Storage) -> String {
    match s {
        Storage::Word => format!("fn ld{k}(e: u32) -> u32 {{ return x{k}[e]; }}\n"),
        Storage::DWord => format!(
            "fn ld{k}(e: u32) -> vec2<u32> {{ return vec2<u32>(x{k}[2u * e], x{k}[2u * e + 1u]); }}\n"
        ),
        Storage::Byte | Storage::Half => {
            let per = s.per_word();
            let bits = 32 / per;
            let mask = if bits == 8 { "0xffu" } else { "0xffffu" };
            format!(
                "fn ld{k}(e: u32) -> u32 {{ return (x{k}[e / {per}u] >> ((e % {per}u) * {bits}u)) & {mask}; }}\n"
            )
        }
    }
}

/// The bindings: parameters, `inputs` read-only `array<u32>` tensors `x0..`, one output `y`.
fn bindings(inputs: usize) -> String {
    let mut s = String::from("@group(0) @binding(0) var<storage, read> p: array<u32>;\n");
    for k in 0..inputs {
        s.push_str(&format!(
            "@group(0) @binding({}) var<storage, read> x{k}: array<u32>;\n",
            k + 1
        ));
    }
    s.push_str(&format!(
        "@group(0) @binding({}) var<storage, read_write> y: array<u32>;\n",
        inputs + 1
    ));
    s
}

/// A step writing `n` elements stored as `out` from `inputs` (their storages, bound in this
/// order after the parameters), where `helpers` define `fn val(e: u32)` returning the bits of
/// output element `e`. `params` follow `p[0]` (threads) and `p[1]` (`n`).
pub fn step(
    inputs: &[(Bind, Storage)],
    out: (Bind, Storage),
    n: usize,
    helpers: &str,
    params: &[u32],
) -> Result<Step, String> {
    let threads = match out.1 {
        Storage::DWord | Storage::Word => n,
        s => n.div_ceil(s.per_word() as usize),
    };
    let mut source = bindings(inputs.len());
    for (k, (_, s)) in inputs.iter().enumerate() {
        source.push_str(&loader(k, *s));
    }
    source.push_str(helpers);
    let write = match out.1 {
        Storage::Word => "    y[t] = val(t);".to_string(),
        Storage::DWord => {
            "    let v = val(t);\n    y[2u * t] = v.x;\n    y[2u * t + 1u] = v.y;".to_string()
        }
        s => {
            let per = s.per_word();
            let bits = 32 / per;
            let mask = if bits == 8 { "0xffu" } else { "0xffffu" };
            format!(
                "    var w = 0u;
    for (var b = 0u; b < {per}u; b = b + 1u) {{
        let e = t * {per}u + b;
        if (e < p[1]) {{ w = w | ((val(e) & {mask}) << (b * {bits}u)); }}
    }}
    y[t] = w;"
            )
        }
    };
    source.push_str(&format!(
        "\n@compute @workgroup_size({LINEAR_GROUP})\nfn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {{\n    let t = gid.x + gid.y * nwg.x * {LINEAR_GROUP}u;\n    if (t >= p[0]) {{ return; }}\n{write}\n}}\n"
    ));
    let mut all = vec![
        p32(threads, "the thread count")?,
        p32(n, "the element count")?,
    ];
    all.extend_from_slice(params);
    let mut binds: Vec<Bind> = inputs.iter().map(|(b, _)| *b).collect();
    binds.push(out.0);
    Ok(Step {
        source,
        params: all,
        binds,
        groups: linear_groups(threads)?,
    })
}

/// The zero bits of storage `s`, as WGSL.
fn zero(s: Storage) -> &'static str {
    match s {
        Storage::DWord => "vec2<u32>(0u, 0u)",
        _ => "0u",
    }
}

/// The bytes of a tensor copied unchanged (Identity, Reshape, Flatten, Squeeze, Unsqueeze of
/// any type): one thread per word.
pub fn copy(bytes: usize) -> Result<Vec<Step>, String> {
    let words = bytes.div_ceil(4);
    let helpers = "fn val(e: u32) -> u32 { return ld0(e); }\n";
    Ok(vec![step(
        &[(Bind::Input(0), Storage::Word)],
        (Bind::Output(0), Storage::Word),
        words,
        helpers,
        &[],
    )?])
}

/// Gather along an axis: `data` dims split at the axis into (outer, axis length, inner),
/// `count` indices (i32 or i64; negative ones count from the end). An index outside the axis
/// yields zeros and sets the layer's status word ([`Bind::Status`]), which the workload
/// reports as an error, as CpuRef reports such an index.
pub fn gather(
    data: Storage,
    outer: usize,
    axis_len: usize,
    inner: usize,
    count: usize,
    index: DataType,
) -> Result<Vec<Step>, String> {
    let load_index = match index {
        DataType::I32 => "fn index(q: u32) -> i32 { return bitcast<i32>(ld1(q)); }\n",
        DataType::I64 => {
            // An i64 that is no i32 is outside any axis GpuAcc indexes.
            "fn index(q: u32) -> i32 {
    let v = ld1(q);
    let fits = (v.y == 0u && v.x < 0x80000000u) || (v.y == 0xffffffffu && v.x >= 0x80000000u);
    if (!fits) { return -2147483647 - 1; }
    return bitcast<i32>(v.x);
}\n"
        }
        other => {
            return Err(format!(
                "Gather indices of type {other}: GpuAcc takes i32 or i64"
            ))
        }
    };
    let ty = data.wgsl_type();
    let z = zero(data);
    let helpers = format!(
        "{load_index}fn val(e: u32) -> {ty} {{
    let A = p[2];
    let I = p[3];
    let Q = p[4];
    let inner = e % I;
    let q = (e / I) % Q;
    let o = e / (I * Q);
    var k = index(q);
    if (k < 0) {{ k = k + i32(A); }}
    if (k < 0 || k >= i32(A)) {{
        status[0] = 1u;
        return {z};
    }}
    return ld0((o * A + u32(k)) * I + inner);
}}\n"
    );
    if axis_len > i32::MAX as usize {
        return Err("the gathered axis exceeds GpuAcc's 32-bit indexing".into());
    }
    let idx_storage = Storage::of(index);
    let n = outer * count * inner;
    let mut s = step(
        &[(Bind::Input(0), data), (Bind::Input(1), idx_storage)],
        (Bind::Output(0), data),
        n,
        &helpers,
        &p32s(&[axis_len, inner, count], "a Gather parameter")?,
    )?;
    // After the parameters, the two inputs and the output.
    s.source
        .push_str("@group(0) @binding(4) var<storage, read_write> status: array<u32>;\n");
    s.binds.push(Bind::Status);
    Ok(vec![s])
}

/// Split of `x` (dims `dims`) along `axis` into pieces of `sizes`: one step per non-empty
/// output.
pub fn split(
    s: Storage,
    dims: &[usize],
    axis: usize,
    sizes: &[usize],
) -> Result<Vec<Step>, String> {
    let outer = product(&dims[..axis]);
    let inner = product(&dims[axis + 1..]);
    let total = dims[axis];
    let ty = s.wgsl_type();
    let helpers = format!(
        "fn val(e: u32) -> {ty} {{
    let L = p[2];
    let I = p[3];
    let a = (e / I) % L;
    let o = e / (I * L);
    return ld0((o * p[4] + p[5] + a) * I + e % I);
}}\n"
    );
    let mut steps = Vec::new();
    let mut offset = 0usize;
    for (k, &len) in sizes.iter().enumerate() {
        let n = outer * len * inner;
        if n > 0 {
            steps.push(step(
                &[(Bind::Input(0), s)],
                (Bind::Output(k), s),
                n,
                &helpers,
                &p32s(&[len, inner, total, offset], "a Split parameter")?,
            )?);
        }
        offset += len;
    }
    Ok(steps)
}

/// Output coordinate `c` along an axis of input size `d` reads input coordinate `c % d`:
/// Tile (the input repeated) and Expand (an input axis of 1 broadcast) are both this map,
/// `x` right-aligned to `out`'s rank.
pub fn repeat(s: Storage, x: &[usize], out: &[usize]) -> Result<Vec<Step>, String> {
    if x.len() > out.len() {
        return Err("the input has a higher rank than the output".into());
    }
    let mut aligned = vec![1usize; out.len() - x.len()];
    aligned.extend_from_slice(x);
    if aligned.contains(&0) {
        return Err("GpuAcc does not repeat empty inputs".into());
    }
    let mut params = vec![p32(out.len(), "the rank")?];
    params.extend(p32s(out, "a dimension")?);
    params.extend(p32s(&aligned, "a dimension")?);
    params.extend(p32s(&super::strides(&aligned), "a stride")?);
    let ty = s.wgsl_type();
    // p: [threads, n, rank, out dims, input dims, input strides]
    let helpers = format!(
        "fn val(e: u32) -> {ty} {{
    let r = p[2];
    var rem = e;
    var at = 0u;
    for (var d = 0u; d < r; d = d + 1u) {{
        let k = r - 1u - d;
        let dim = p[3u + k];
        at = at + ((rem % dim) % p[3u + r + k]) * p[3u + 2u * r + k];
        rem = rem / dim;
    }}
    return ld0(at);
}}\n"
    );
    Ok(vec![step(
        &[(Bind::Input(0), s)],
        (Bind::Output(0), s),
        product(out),
        &helpers,
        &params,
    )?])
}

/// IsNaN and IsInf of f32 (by their bits, which drivers cannot fold away) and Not of bools:
/// `n` bools out.
pub fn predicate(op: MathOp, dtype: DataType, n: usize) -> Result<Vec<Step>, String> {
    let (test, input) = match (op, dtype) {
        (MathOp::IsNaN, DataType::F32) => {
            ("(v & 0x7fffffffu) > 0x7f800000u".to_string(), Storage::Word)
        }
        (
            MathOp::IsInf {
                detect_negative,
                detect_positive,
            },
            DataType::F32,
        ) => (
            format!(
                "({detect_positive} && v == 0x7f800000u) || ({detect_negative} && v == 0xff800000u)"
            ),
            Storage::Word,
        ),
        (MathOp::Not, DataType::Bool) => ("v == 0u".to_string(), Storage::Byte),
        (other, t) => return Err(format!("GpuAcc does not run {} on {t}", other.name())),
    };
    let helpers =
        format!("fn val(e: u32) -> u32 {{ let v = ld0(e); return select(0u, 1u, {test}); }}\n");
    Ok(vec![step(
        &[(Bind::Input(0), input)],
        (Bind::Output(0), Storage::Byte),
        n,
        &helpers,
        &[],
    )?])
}

/// Broadcasting parameters of `inputs` read at the coordinates of `out`: rank, out dims, then
/// each input's strides; and `fn at(e: u32, k: u32) -> u32`, input `k`'s element of output
/// element `e` (reading them from `p[2]`).
fn broadcast(inputs: &[&[usize]], out: &[usize]) -> Result<(Vec<u32>, &'static str), String> {
    let mut params = vec![p32(out.len(), "the rank")?];
    params.extend(p32s(out, "a dimension")?);
    for dims in inputs {
        params.extend(p32s(
            &super::elementwise::broadcast_strides(dims, out),
            "a stride",
        )?);
    }
    let at = "fn at(e: u32, k: u32) -> u32 {
    let r = p[2];
    var rem = e;
    var idx = 0u;
    for (var d = 0u; d < r; d = d + 1u) {
        let j = r - 1u - d;
        let dim = p[3u + j];
        idx = idx + (rem % dim) * p[3u + (k + 1u) * r + j];
        rem = rem / dim;
    }
    return idx;
}\n";
    Ok((params, at))
}

/// Where(condition, x, y) with broadcasting, for x and y of any type stored as `s`.
pub fn select(
    s: Storage,
    cond: &[usize],
    x: &[usize],
    y: &[usize],
    out: &[usize],
) -> Result<Vec<Step>, String> {
    let (params, at) = broadcast(&[cond, x, y], out)?;
    let ty = s.wgsl_type();
    let helpers = format!(
        "{at}fn val(e: u32) -> {ty} {{
    return select(ld2(at(e, 2u)), ld1(at(e, 1u)), ld0(at(e, 0u)) != 0u);
}}\n"
    );
    Ok(vec![step(
        &[
            (Bind::Input(0), Storage::Byte),
            (Bind::Input(1), s),
            (Bind::Input(2), s),
        ],
        (Bind::Output(0), s),
        product(out),
        &helpers,
        &params,
    )?])
}

/// The comparison or logical op `op` on `dtype` as WGSL over `a` and `b` (their bits), or
/// why GpuAcc does not run it.
fn compare_expr(op: BinaryExtOp, dtype: DataType) -> Result<String, String> {
    use BinaryExtOp as B;
    let logical = matches!(op, B::And | B::Or | B::Xor);
    if logical {
        if dtype != DataType::Bool {
            return Err(format!(
                "{op:?} of {dtype}: GpuAcc runs logical ops on bool"
            ));
        }
        return Ok(match op {
            B::And => "(a != 0u) && (b != 0u)",
            B::Or => "(a != 0u) || (b != 0u)",
            _ => "(a != 0u) != (b != 0u)",
        }
        .to_string());
    }
    let sym = match op {
        B::Equal => "==",
        B::Less => "<",
        B::LessOrEqual => "<=",
        B::Greater => ">",
        B::GreaterOrEqual => ">=",
        other => return Err(format!("GpuAcc does not implement {other:?}")),
    };
    Ok(match dtype {
        DataType::F32 => format!("bitcast<f32>(a) {sym} bitcast<f32>(b)"),
        DataType::I32 => format!("bitcast<i32>(a) {sym} bitcast<i32>(b)"),
        DataType::U32 | DataType::U8 | DataType::U16 | DataType::Bool => format!("a {sym} b"),
        // Two's complement over two words: the signed high words decide, then the low ones.
        DataType::I64 => {
            if op == B::Equal {
                "all(a == b)".to_string()
            } else {
                format!(
                    "select(bitcast<i32>(a.y) {sym} bitcast<i32>(b.y), a.x {sym} b.x, a.y == b.y)"
                )
            }
        }
        other => return Err(format!("GpuAcc does not compare {other} tensors")),
    })
}

/// A comparison or logical op with broadcasting: bool out.
pub fn compare(
    op: BinaryExtOp,
    dtype: DataType,
    a: &[usize],
    b: &[usize],
    out: &[usize],
) -> Result<Vec<Step>, String> {
    let expr = compare_expr(op, dtype)?;
    let s = Storage::of(dtype);
    let ty = s.wgsl_type();
    let (params, at) = broadcast(&[a, b], out)?;
    let helpers = format!(
        "{at}fn test(a: {ty}, b: {ty}) -> bool {{ return {expr}; }}
fn val(e: u32) -> u32 {{ return select(0u, 1u, test(ld0(at(e, 0u)), ld1(at(e, 1u)))); }}\n"
    );
    Ok(vec![step(
        &[(Bind::Input(0), s), (Bind::Input(1), s)],
        (Bind::Output(0), Storage::Byte),
        product(out),
        &helpers,
        &params,
    )?])
}

/// WGSL conversions Cast uses: f32 to i32 and i64 (truncating, saturating, NaN to 0, as
/// core's `scalar` rules say), i32 and i64 to f32 rounded once to nearest even, and f16 to
/// and from f32 on the bits (exact widening; narrowing rounded to nearest even, overflow to
/// infinity, NaN kept quiet with its top payload bits, as the host's `half` conversion
/// does), so no device feature is needed and no driver flushes subnormals. NaN is found by
/// its bits: drivers may fold `x != x` to false.
const CONVERSIONS: &str = "fn f16_to_f32(h: u32) -> u32 {
    let sign = (h & 0x8000u) << 16u;
    let e = (h >> 10u) & 0x1fu;
    let m = h & 0x3ffu;
    if (e == 31u) {
        if (m == 0u) { return sign | 0x7f800000u; }
        return sign | 0x7fc00000u | (m << 13u);
    }
    if (e == 0u) {
        if (m == 0u) { return sign; }
        let z = countLeadingZeros(m) - 21u;
        return sign | ((113u - z) << 23u) | (((m << z) & 0x3ffu) << 13u);
    }
    return sign | ((e + 112u) << 23u) | (m << 13u);
}
fn f32_to_f16(u: u32) -> u32 {
    let sign = (u >> 16u) & 0x8000u;
    let a = u & 0x7fffffffu;
    if (a > 0x7f800000u) { return sign | 0x7e00u | ((a >> 13u) & 0x3ffu); }
    if (a >= 0x477ff000u) { return sign | 0x7c00u; }
    var h = 0u;
    var rest = 0u;
    var half = 0u;
    if (a >= 0x38800000u) {
        h = (a - 0x38000000u) >> 13u;
        rest = a & 0x1fffu;
        half = 0x1000u;
    } else {
        if (a < 0x33000000u) { return sign; }
        let shift = 126u - (a >> 23u);
        let m = (a & 0x7fffffu) | 0x800000u;
        h = m >> shift;
        rest = m & ((1u << shift) - 1u);
        half = 1u << (shift - 1u);
    }
    if (rest > half || (rest == half && (h & 1u) == 1u)) { h = h + 1u; }
    return sign | h;
}
fn is_nan(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }
fn f_to_i32(x: f32) -> u32 {
    if (is_nan(x)) { return 0u; }
    if (x >= 2147483648.0) { return 0x7fffffffu; }
    if (x < -2147483648.0) { return 0x80000000u; }
    return bitcast<u32>(i32(trunc(x)));
}
fn f_to_i64(x: f32) -> vec2<u32> {
    if (is_nan(x)) { return vec2<u32>(0u, 0u); }
    if (x >= 9223372036854775808.0) { return vec2<u32>(0xffffffffu, 0x7fffffffu); }
    if (x < -9223372036854775808.0) { return vec2<u32>(0u, 0x80000000u); }
    let a = abs(trunc(x));
    let hi = floor(a / 4294967296.0);
    let lo = a - hi * 4294967296.0;
    var v = vec2<u32>(u32(lo), u32(hi));
    if (x < 0.0) {
        let l = ~v.x + 1u;
        v = vec2<u32>(l, ~v.y + select(0u, 1u, l == 0u));
    }
    return v;
}
fn u_to_f(v: u32) -> f32 {
    // Both halves are exact in f32; their sum rounds once.
    return f32(v >> 16u) * 65536.0 + f32(v & 0xffffu);
}
fn i32_to_f(v: u32) -> f32 {
    let i = bitcast<i32>(v);
    if (i < 0) {
        if (v == 0x80000000u) { return -2147483648.0; }
        return -u_to_f(u32(-i));
    }
    return u_to_f(v);
}
fn i64_to_f(v: vec2<u32>) -> f32 {
    let neg = (v.y & 0x80000000u) != 0u;
    var lo = v.x;
    var hi = v.y;
    if (neg) {
        lo = ~v.x + 1u;
        hi = ~v.y + select(0u, 1u, lo == 0u);
    }
    var m = 0.0;
    if (hi == 0u) {
        m = u_to_f(lo);
    } else {
        // The top 32 significant bits, the lowest one set when any bit below them is
        // (sticky), so that rounding them to 24 bits rounds the whole value once.
        let s = countLeadingZeros(hi);
        var top = hi;
        var rest = lo;
        if (s > 0u) {
            top = (hi << s) | (lo >> (32u - s));
            rest = lo << s;
        }
        if (rest != 0u) { top = top | 1u; }
        m = ldexp(u_to_f(top), i32(32u - s));
    }
    if (neg) { return -m; }
    return m;
}
";

/// The WGSL expression converting `v` (the bits of a `from` element) into a `to` element's
/// bits, or why GpuAcc does not.
fn cast_expr(from: DataType, to: DataType) -> Result<String, String> {
    use DataType as D;
    let as_f32 = match from {
        D::F32 => "bitcast<f32>(v)",
        D::I32 => "i32_to_f(v)",
        D::I64 => "i64_to_f(v)",
        D::Bool => "f32(v)",
        D::F16 => "bitcast<f32>(f16_to_f32(v))",
        _ => "",
    };
    Ok(match (from, to) {
        _ if from == to => "v".to_string(),
        (_, D::F32) if !as_f32.is_empty() => format!("bitcast<u32>({as_f32})"),
        (D::F32, D::F16) => "f32_to_f16(v)".into(),
        (D::F32 | D::F16, D::I32) => format!("f_to_i32({as_f32})"),
        (D::F32 | D::F16, D::I64) => format!("f_to_i64({as_f32})"),
        // Any bits but a zero's: NaN is true.
        (D::F32, D::Bool) => "select(0u, 1u, (v & 0x7fffffffu) != 0u)".into(),
        (D::F16, D::Bool) => "select(0u, 1u, (v & 0x7fffu) != 0u)".into(),
        (D::I32, D::I64) => "vec2<u32>(v, select(0u, 0xffffffffu, bitcast<i32>(v) < 0))".into(),
        (D::I32, D::Bool) => "select(0u, 1u, v != 0u)".into(),
        // Narrowing integers wraps: the low word.
        (D::I64, D::I32) => "v.x".into(),
        (D::I64, D::Bool) => "select(0u, 1u, any(v != vec2<u32>(0u, 0u)))".into(),
        (D::Bool, D::I32) => "v".into(),
        (D::Bool, D::I64) => "vec2<u32>(v, 0u)".into(),
        _ => {
            return Err(format!(
                "GpuAcc casts between f32, i32, i64 and bool, f16 to those and f32 to f16 only, not {from} to {to}"
            ))
        }
    })
}

/// Cast of `n` elements from `from` to `to`.
pub fn cast(from: DataType, to: DataType, n: usize) -> Result<Vec<Step>, String> {
    let expr = cast_expr(from, to)?;
    let (si, so) = (Storage::of(from), Storage::of(to));
    let helpers = format!(
        "{CONVERSIONS}fn val(e: u32) -> {} {{ let v = ld0(e); return {expr}; }}\n",
        so.wgsl_type()
    );
    Ok(vec![step(
        &[(Bind::Input(0), si)],
        (Bind::Output(0), so),
        n,
        &helpers,
        &[],
    )?])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storages_follow_element_sizes() {
        assert_eq!(Storage::of(DataType::Bool), Storage::Byte);
        assert_eq!(Storage::of(DataType::F16), Storage::Half);
        assert_eq!(Storage::of(DataType::I32), Storage::Word);
        assert_eq!(Storage::of(DataType::I64), Storage::DWord);
        assert!(cast_expr(DataType::F64, DataType::F32).is_err());
        assert!(compare_expr(BinaryExtOp::BitwiseAnd, DataType::I32).is_err());
        // Four bools per thread.
        let s = compare(BinaryExtOp::Less, DataType::F32, &[9], &[9], &[9]);
        assert_eq!(s.map(|s| s[0].params[0]), Ok(3));
    }
}
