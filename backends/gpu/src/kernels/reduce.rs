//! Reductions over any set of axes (ReduceMean, ReduceSum, ReduceMax, ... ), one thread per
//! output element walking the reduced elements of its input. Output order is the kept axes'
//! order, the same whether or not the reduced axes are kept as size 1.

use super::{linear_shader, linear_step, lit, p32, p32s, product, strides, Bind, Step};
use backplane_core::ops::ReduceKind;

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
    // p: [n, count, nk, nr, kept dims, kept strides, reduced dims, reduced strides]
    let walk = |body: &str| {
        format!(
            "    for (var j = 0u; j < c; j = j + 1u) {{
        var rem = j;
        var at = base;
        for (var d = 0u; d < nr; d = d + 1u) {{
            let k = nr - 1u - d;
            let dim = p[4u + 2u * nk + k];
            at = at + (rem % dim) * p[4u + 2u * nk + nr + k];
            rem = rem / dim;
        }}
        let v = x0[at];
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
    let nk = p[2];
    let nr = p[3];
    var rem = i;
    var base = 0u;
    for (var d = 0u; d < nk; d = d + 1u) {{
        let k = nk - 1u - d;
        let dim = p[4u + k];
        base = base + (rem % dim) * p[4u + nk + k];
        rem = rem / dim;
    }}
{first}    var acc = {init};
{}    y[i] = {result};",
        walk(join)
    );
    let source = linear_shader(1, "", &body);
    Ok(vec![linear_step(
        source,
        params,
        vec![Bind::Input(0), Bind::Output(0)],
        product(&kept),
    )?])
}
