//! Reductions over any set of axes (ReduceMean, ReduceSum, ReduceMax, ... ). Few values per
//! output: one thread per output element walks them. Many ([`WIDE`] or more): one workgroup
//! per output, its threads striding over them and meeting in a workgroup-memory reduction
//! (a single thread walking tens of thousands of values is slow, and lavapipe stops such a
//! loop early). Output order is the kept axes' order, the same whether or not the reduced
//! axes are kept as size 1.

use super::norm::{meet_fn, row_step, ROW_GROUP};
use super::{bindings, linear_shader, linear_step, lit, p32, p32s, product, strides, Bind, Step};
use backplane_core::ops::ReduceKind;

/// The WGSL functions both reduction kernels index their input with; the parameters are
/// `p = [outputs, count, nk, nr, kept dims, kept strides, reduced dims, reduced strides]`.
const INDEXING: &str = "// The input offset of output o's first value (from its kept coordinates).
fn base_of(o: u32) -> u32 {
    let nk = p[2];
    var rem = o;
    var b = 0u;
    for (var d = 0u; d < nk; d = d + 1u) {
        let k = nk - 1u - d;
        let dim = p[4u + k];
        b = b + (rem % dim) * p[4u + nk + k];
        rem = rem / dim;
    }
    return b;
}
// The input offset of reduced value j of the output at `base`.
fn at(base: u32, j: u32) -> u32 {
    let nk = p[2];
    let nr = p[3];
    var rem = j;
    var a = base;
    for (var d = 0u; d < nr; d = d + 1u) {
        let k = nr - 1u - d;
        let dim = p[4u + 2u * nk + k];
        a = a + (rem % dim) * p[4u + 2u * nk + nr + k];
        rem = rem / dim;
    }
    return a;
}
";

/// Reduced values per output from which a workgroup reduces each output.
pub const WIDE: usize = 256;

/// The per-kind pieces of the shader: the start value, how a value `v` joins the
/// accumulator `acc`, and the result from `acc` and the count `c`.
fn parts(kind: ReduceKind) -> (String, &'static str, &'static str) {
    let (init, join, result) = match kind {
        ReduceKind::Mean => ("0.0", "acc = acc + v;", "acc / f32(c)"),
        ReduceKind::Sum => ("0.0", "acc = acc + v;", "acc"),
        ReduceKind::Max => ("-inf", "acc = max(acc, v);", "acc"),
        ReduceKind::Min => ("inf", "acc = min(acc, v);", "acc"),
        ReduceKind::Prod => ("1.0", "acc = acc * v;", "acc"),
        ReduceKind::L1 => ("0.0", "acc = acc + abs(v);", "acc"),
        ReduceKind::L2 => ("0.0", "acc = acc + v * v;", "sqrt(acc)"),
        ReduceKind::LogSum => ("0.0", "acc = acc + v;", "log(acc)"),
        // After a first pass finding the maximum `m`: the sum of exp(v - m).
        ReduceKind::LogSumExp => ("0.0", "acc = acc + exp(v - m);", "m + log(acc)"),
        ReduceKind::SumSquare => ("0.0", "acc = acc + v * v;", "acc"),
    };
    let init = match init {
        "-inf" => lit(f32::NEG_INFINITY),
        "inf" => lit(f32::INFINITY),
        other => other.to_string(),
    };
    (init, join, result)
}

/// Reduce `x` over the axes where `mask` is true with `kind`.
pub fn reduce(kind: ReduceKind, x: &[usize], mask: &[bool]) -> Result<Vec<Step>, String> {
    if mask.len() != x.len() {
        return Err("the reduced axes do not fit the input's rank".into());
    }
    let s = strides(x);
    let (mut kept, mut kept_s, mut red, mut red_s) = (vec![], vec![], vec![], vec![]);
    for (k, &reduced) in mask.iter().enumerate() {
        if reduced {
            red.push(x[k]);
            red_s.push(s[k]);
        } else {
            kept.push(x[k]);
            kept_s.push(s[k]);
        }
    }
    let count = product(&red);
    if count == 0 {
        return Err("GpuAcc does not reduce over empty axes".into());
    }
    let (nk, nr) = (kept.len(), red.len());
    let mut params = vec![p32(count, "the reduced count")?, p32(nk, "the rank")?];
    params.push(p32(nr, "the rank")?);
    for v in [&kept, &kept_s, &red, &red_s] {
        params.extend(p32s(v, "a dimension or stride")?);
    }
    let (init, join, result) = parts(kind);
    if count >= WIDE {
        return Ok(vec![wide(kind, params, product(&kept))?]);
    }
    let walk = |body: &str| {
        format!(
            "    for (var j = 0u; j < c; j = j + 1u) {{
        let v = x0[at(base, j)];
        {body}
    }}
"
        )
    };
    let first = if kind == ReduceKind::LogSumExp {
        format!(
            "    var m = {};\n{}",
            lit(f32::NEG_INFINITY),
            walk("m = max(m, v);")
        )
    } else {
        String::new()
    };
    let body = format!(
        "    let c = p[1];
    let base = base_of(i);
{first}    var acc = {init};
{}    y[i] = {result};",
        walk(join)
    );
    let source = linear_shader(1, INDEXING, &body);
    Ok(vec![linear_step(
        source,
        params,
        vec![Bind::Input(0), Bind::Output(0)],
        product(&kept),
    )?])
}

/// How two partial results of `kind` combine.
fn combine(kind: ReduceKind) -> &'static str {
    match kind {
        ReduceKind::Max => "max(a, b)",
        ReduceKind::Min => "min(a, b)",
        ReduceKind::Prod => "a * b",
        ReduceKind::Mean
        | ReduceKind::Sum
        | ReduceKind::L1
        | ReduceKind::L2
        | ReduceKind::LogSum
        | ReduceKind::LogSumExp
        | ReduceKind::SumSquare => "a + b",
    }
}

/// One workgroup per output element (`params` as the one-thread kernel's, after the count of
/// outputs): each thread joins every `ROW_GROUP`-th reduced value, then the partial results
/// meet in workgroup memory (LogSumExp first meets on the maximum).
fn wide(kind: ReduceKind, params: Vec<u32>, outputs: usize) -> Result<Step, String> {
    let (init, join, result) = parts(kind);
    let neg_inf = lit(f32::NEG_INFINITY);
    let first = if kind == ReduceKind::LogSumExp {
        format!(
            "    var m = {neg_inf};
    if (live) {{
        for (var j = t; j < c; j = j + {ROW_GROUP}u) {{
            let v = x0[at(base, j)];
            m = max(m, v);
        }}
    }}
    m = meet_max(m, t);
"
        )
    } else {
        String::new()
    };
    let source = format!(
        "{bindings}var<workgroup> part: array<f32, {ROW_GROUP}>;
{meet}{meet_max}{INDEXING}
@compute @workgroup_size({ROW_GROUP})
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {{
    let row = wg.x + wg.y * nwg.x;
    let live = row < p[0];
    let c = p[1];
    let base = base_of(row);
{first}    var acc = {init};
    if (live) {{
        for (var j = t; j < c; j = j + {ROW_GROUP}u) {{
            let v = x0[at(base, j)];
            {join}
        }}
    }}
    acc = meet(acc, t);
    if (live && t == 0u) {{
        y[row] = {result};
    }}
}}
",
        bindings = bindings(1, 1),
        meet = meet_fn("meet", combine(kind)),
        meet_max = meet_fn("meet_max", "max(a, b)"),
    );
    row_step(
        source,
        params,
        vec![Bind::Input(0), Bind::Output(0)],
        outputs,
    )
}
