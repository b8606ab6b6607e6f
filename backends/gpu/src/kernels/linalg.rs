//! Products: MatMul (batched, broadcasting) and Gemm, one tiled kernel in two tile sizes.
//! Each workgroup computes a 16×16 output tile, staging 16×16 tiles of A and B in workgroup
//! memory, or a 64×64 tile with a 4×4 block of outputs per thread (each staged value used
//! four times from registers); the 16×16 kernel also runs split-K's partial sums. The layout
//! is chosen per layer by workgroup count ([`super::tiles`]).
//! Operands are read through (row, column) strides, so transposed operands need no copy. The
//! epilogue adds Gemm's scaled C (broadcast through strides) and applies an activation.

use super::elementwise::Act;
use super::tiles::{self, Layout, Shape, Tiles};
use super::{
    bindings, p32, p32s, product, splitk, Bind, Step, BLOCK_4X4_INIT, BLOCK_4X4_ROW,
    BLOCK_4X4_STEP, MAX_GROUPS,
};
use backplane_core::ops::GemmDesc;

/// Tile edge (threads per workgroup side).
const TILE: u32 = 16;

/// How one product is laid out.
#[derive(Debug, Clone, Default)]
pub struct Product {
    /// Rows of the result.
    pub m: usize,
    /// Columns of the result.
    pub n: usize,
    /// The shared dimension.
    pub k: usize,
    /// A's (row, column) strides.
    pub a: (usize, usize),
    /// B's (row, column) strides.
    pub b: (usize, usize),
    /// Batch dimensions of the result.
    pub batch: Vec<usize>,
    /// A's and B's strides along them (0: broadcast).
    pub a_batch: Vec<usize>,
    /// B's strides along the batch dimensions.
    pub b_batch: Vec<usize>,
    /// alpha, beta and C's (row, column) strides, when there is a C.
    pub c: Option<(f32, f32, (usize, usize))>,
    /// Scale of the product.
    pub alpha: f32,
}

/// The 16×16 tiled shader. With an epilogue (`Some((has_c, act))`) it writes the finished
/// result; without (`None`), it is split-K's partial pass: workgroup z runs over batch ×
/// slice (`p[13 + 3·nb]` slices of `p[14 + 3·nb]` along K) and writes each slice's raw sum
/// into the scratch buffer bound as `y`, slice-major (see [`super::splitk`]).
fn shader(epilogue: Option<(bool, Act)>) -> String {
    let (inputs, act) = match epilogue {
        Some((has_c, act)) => (if has_c { 3 } else { 2 }, act),
        None => (2, Act::None),
    };
    let (split, finish) = match epilogue {
        None => (
            "let S = p[13u + 3u * nb];
    let SL = p[14u + 3u * nb];
    let batch = wg.z / S;
    let ks = wg.z % S;
    let k0 = ks * SL;
    let k1 = min(K, k0 + SL);"
                .to_string(),
            "y[((ks * (nwg.z / S) + batch) * M + row) * N + col] = acc;".to_string(),
        ),
        Some((has_c, _)) => {
            let c_term = if has_c {
                "v = v + bitcast<f32>(p[12]) * x2[row * p[9] + col * p[10]];"
            } else {
                ""
            };
            (
                "let batch = wg.z;
    let k0 = 0u;
    let k1 = K;"
                    .to_string(),
                format!(
                    "var v = bitcast<f32>(p[11]) * acc;
        {c_term}
        y[(batch * M + row) * N + col] = act(v);"
                ),
            )
        }
    };
    format!(
        "{}{}
var<workgroup> ta: array<array<f32, {TILE}>, {TILE}>;
var<workgroup> tb: array<array<f32, {TILE}>, {TILE}>;
@compute @workgroup_size({TILE}, {TILE}, 1)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {{
    let M = p[0];
    let N = p[1];
    let K = p[2];
    let row = wg.y * {TILE}u + lid.y;
    let col = wg.x * {TILE}u + lid.x;
    let nb = p[7];
    {split}
    var rem = batch;
    var aoff = 0u;
    var boff = 0u;
    for (var d = 0u; d < nb; d = d + 1u) {{
        let k = nb - 1u - d;
        let dim = p[13u + k];
        let c = rem % dim;
        rem = rem / dim;
        aoff = aoff + c * p[13u + nb + k];
        boff = boff + c * p[13u + 2u * nb + k];
    }}
    var acc = 0.0;
    for (var t = k0; t < k1; t = t + {TILE}u) {{
        let ak = t + lid.x;
        if (row < M && ak < k1) {{
            ta[lid.y][lid.x] = x0[aoff + row * p[3] + ak * p[4]];
        }} else {{
            ta[lid.y][lid.x] = 0.0;
        }}
        let bk = t + lid.y;
        if (bk < k1 && col < N) {{
            tb[lid.y][lid.x] = x1[boff + bk * p[5] + col * p[6]];
        }} else {{
            tb[lid.y][lid.x] = 0.0;
        }}
        workgroupBarrier();
        for (var kk = 0u; kk < {TILE}u; kk = kk + 1u) {{
            acc = acc + ta[lid.y][kk] * tb[kk][lid.x];
        }}
        workgroupBarrier();
    }}
    if (row < M && col < N) {{
        {finish}
    }}
}}
",
        bindings(inputs, 1),
        act.wgsl()
    )
}

/// The register-blocked variant of [`shader`] (same parameters): 16×16 threads, each a 4×4
/// block of a 64×64 output tile; per step of 16 along K the workgroup stages 64×16 of A and
/// 16×64 of B (four loads per thread each).
fn blocked_shader(has_c: bool, act: Act) -> String {
    let inputs = if has_c { 3 } else { 2 };
    let c_term = if has_c {
        "v = v + bitcast<f32>(p[12]) * x2[row * p[9] + col * p[10]];"
    } else {
        ""
    };
    format!(
        "{}{}
var<workgroup> ta: array<f32, 1024>;
var<workgroup> tb: array<f32, 1024>;
@compute @workgroup_size(16, 16, 1)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {{
    let M = p[0];
    let N = p[1];
    let K = p[2];
    let batch = wg.z;
    let nb = p[7];
    var rem = batch;
    var aoff = 0u;
    var boff = 0u;
    for (var d = 0u; d < nb; d = d + 1u) {{
        let k = nb - 1u - d;
        let dim = p[13u + k];
        let c = rem % dim;
        rem = rem / dim;
        aoff = aoff + c * p[13u + nb + k];
        boff = boff + c * p[13u + 2u * nb + k];
    }}
    let row0 = wg.y * 64u;
    let col0 = wg.x * 64u;
    let tid = lid.y * 16u + lid.x;
{BLOCK_4X4_INIT}
    for (var t = 0u; t < K; t = t + 16u) {{
        for (var j = 0u; j < 4u; j = j + 1u) {{
            let idx = tid + j * 256u;
            let am = idx / 16u;
            let ak = t + idx % 16u;
            var a = 0.0;
            if (row0 + am < M && ak < K) {{ a = x0[aoff + (row0 + am) * p[3] + ak * p[4]]; }}
            ta[idx] = a;
            let bkl = idx / 64u;
            let bn = idx % 64u;
            let bk = t + bkl;
            var b = 0.0;
            if (bk < K && col0 + bn < N) {{ b = x1[boff + bk * p[5] + (col0 + bn) * p[6]]; }}
            tb[bkl * 64u + bn] = b;
        }}
        workgroupBarrier();
{BLOCK_4X4_STEP}
        workgroupBarrier();
    }}
    for (var i = 0u; i < 4u; i = i + 1u) {{
        let row = row0 + lid.y * 4u + i;
        if (row >= M) {{ continue; }}
        {BLOCK_4X4_ROW}
        for (var j = 0u; j < 4u; j = j + 1u) {{
            let col = col0 + lid.x * 4u + j;
            if (col < N) {{
                var v = bitcast<f32>(p[11]) * accs[j];
                {c_term}
                y[(batch * M + row) * N + col] = act(v);
            }}
        }}
    }}
}}
",
        bindings(inputs, 1),
        act.wgsl()
    )
}

/// The steps computing `product` in the layout `tiles` asks for (see [`super::tiles`]): one
/// tiled dispatch, or split-K's partial pass and its reduction.
pub fn step(product_: &Product, act: Act, tiles: Tiles) -> Result<Vec<Step>, String> {
    let batches = product(&product_.batch);
    let shape = Shape {
        m: product_.m,
        n: product_.n,
        k: product_.k,
        batches,
    };
    let layout = tiles::choose(tiles, shape, false, false);
    let (tile, splits, slice) = match layout {
        Layout::Blocked64 => (64, 1, product_.k),
        Layout::SplitK { splits, slice } => (TILE as usize, splits, slice),
        Layout::Direct | Layout::Tiled16 => (TILE as usize, 1, product_.k),
    };
    let split = matches!(layout, Layout::SplitK { .. });
    let gx = p32(product_.n.div_ceil(tile), "the columns")?;
    let gy = p32(product_.m.div_ceil(tile), "the rows")?;
    let gz = p32(batches.saturating_mul(splits), "the batch")?;
    if gx > MAX_GROUPS || gy > MAX_GROUPS || gz > MAX_GROUPS {
        return Err("the product is too large for one dispatch".into());
    }
    let (alpha, beta, (c_rs, c_cs)) = product_.c.unwrap_or((product_.alpha, 0.0, (0, 0)));
    let mut params = p32s(
        &[
            product_.m,
            product_.n,
            product_.k,
            product_.a.0,
            product_.a.1,
            product_.b.0,
            product_.b.1,
            product_.batch.len(),
            usize::from(product_.c.is_some()),
            c_rs,
            c_cs,
        ],
        "a product parameter",
    )?;
    params.push(alpha.to_bits());
    params.push(beta.to_bits());
    params.extend(p32s(&product_.batch, "a batch dimension")?);
    params.extend(p32s(&product_.a_batch, "a batch stride")?);
    params.extend(p32s(&product_.b_batch, "a batch stride")?);
    params.extend(p32s(&[splits, slice], "a K slice")?);
    let groups = [gx.max(1), gy.max(1), gz.max(1)];
    let has_c = product_.c.is_some();
    if split {
        let out = batches * product_.m * product_.n;
        let scratch = splitk::scratch(splits, out)?;
        let partial = Step {
            source: shader(None),
            params,
            binds: vec![Bind::Input(0), Bind::Input(1), scratch],
            groups,
        };
        let epilogue = splitk::Epilogue::Product {
            m: product_.m,
            n: product_.n,
            alpha,
            c: product_.c.map(|(_, beta, strides)| (beta, strides)),
        };
        return Ok(vec![partial, splitk::reduce(splits, out, &epilogue, act)?]);
    }
    let mut binds = vec![Bind::Input(0), Bind::Input(1)];
    if has_c {
        binds.push(Bind::Input(2));
    }
    binds.push(Bind::Output(0));
    Ok(vec![Step {
        source: if layout == Layout::Blocked64 {
            blocked_shader(has_c, act)
        } else {
            shader(Some((has_c, act)))
        },
        params,
        binds,
        groups,
    }])
}

/// MatMul of A `a` and B `b` (numpy semantics: 1-D operands promoted, batch dims broadcast);
/// with `bias`, input 2 (one value per column) is added before `act`.
pub fn matmul(
    a: &[usize],
    b: &[usize],
    bias: bool,
    act: Act,
    tiles: Tiles,
) -> Result<Vec<Step>, String> {
    if a.is_empty() || b.is_empty() {
        return Err("MatMul of a scalar".into());
    }
    let (m, k) = if a.len() == 1 {
        (1, a[0])
    } else {
        (a[a.len() - 2], a[a.len() - 1])
    };
    let n = if b.len() == 1 { 1 } else { b[b.len() - 1] };
    let a_batch_dims = &a[..a.len().saturating_sub(2)];
    let b_batch_dims = &b[..b.len().saturating_sub(2)];
    let batch = backplane_core::shape::broadcast_shapes(a_batch_dims, b_batch_dims)
        .map_err(|e| e.to_string())?;
    let batch_strides = |dims: &[usize], mat: usize| -> Vec<usize> {
        super::elementwise::broadcast_strides(dims, &batch)
            .into_iter()
            .map(|s| s.saturating_mul(mat))
            .collect()
    };
    let c = bias.then_some((1.0, 1.0, (0, 1)));
    // One B for every batch, and A holding every batch: the batches are consecutive rows of
    // one [batches·m, k] × [k, n] product, whose tiles fill where batches of few rows (a
    // sequence-first [L, 1, E] activation: one row per batch) would leave them mostly empty.
    if a.len() > 2 && product(b_batch_dims) == 1 && product(a_batch_dims) == product(&batch) {
        let rows = product(&batch).saturating_mul(m);
        let p = Product {
            m: rows,
            n,
            k,
            a: (k, 1),
            b: (n, 1),
            c,
            alpha: 1.0,
            ..Product::default()
        };
        return step(&p, act, tiles);
    }
    let p = Product {
        m,
        n,
        k,
        a: (k, 1),
        b: (n, 1),
        a_batch: batch_strides(a_batch_dims, m * k),
        b_batch: batch_strides(b_batch_dims, k * n),
        batch,
        c,
        alpha: 1.0,
    };
    step(&p, act, tiles)
}

/// Gemm: `alpha * op(A) * op(B) + beta * C`, then `act`.
pub fn gemm(
    desc: &GemmDesc,
    a: &[usize],
    b: &[usize],
    c: Option<&[usize]>,
    act: Act,
    tiles: Tiles,
) -> Result<Vec<Step>, String> {
    let ([ar, ac], [br, bc]) = (two(a)?, two(b)?);
    let (m, k) = if desc.trans_a { (ac, ar) } else { (ar, ac) };
    let n = if desc.trans_b { br } else { bc };
    let a_str = if desc.trans_a { (1, ac) } else { (ac, 1) };
    let b_str = if desc.trans_b { (1, bc) } else { (bc, 1) };
    let c = match c {
        None => None,
        Some(dims) => {
            let s = super::elementwise::broadcast_strides(dims, &[m, n]);
            Some((desc.alpha, desc.beta, (s[0], s[1])))
        }
    };
    let p = Product {
        m,
        n,
        k,
        a: a_str,
        b: b_str,
        c,
        alpha: desc.alpha,
        ..Product::default()
    };
    step(&p, act, tiles)
}

fn two(d: &[usize]) -> Result<[usize; 2], String> {
    match d {
        [r, c] => Ok([*r, *c]),
        _ => Err(format!("Gemm operands must be 2-D, got {d:?}")),
    }
}
