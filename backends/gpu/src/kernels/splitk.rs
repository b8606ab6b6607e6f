//! Split-K's second pass. A product with few output tiles and a long K runs its tiled
//! kernel over slices of K (workgroup z covers batch × slice), each slice writing its raw
//! partial sums into a scratch buffer the workload owns, slice-major: slice `s`'s value of
//! output `i` at `s·out + i`. This pass adds the slices up, one thread per output, and
//! applies what the single-pass kernels do in their epilogue (Gemm's alpha and scaled C, or
//! a convolution's bias, then the fused activation), so both layouts give one result.

use super::elementwise::Act;
use super::{linear_shader, linear_step, p32s, Bind, Step};

/// What the reduction applies after summing the slices.
#[derive(Debug, Clone, Copy)]
pub enum Epilogue {
    /// A product's: `alpha · sum`, plus `beta · C` (C read through its (row, column) strides
    /// in an `m`×`n` result) when there is a C.
    Product {
        /// Rows of each result.
        m: usize,
        /// Columns of each result.
        n: usize,
        /// Scale of the product.
        alpha: f32,
        /// beta and C's strides.
        c: Option<(f32, (usize, usize))>,
    },
    /// A convolution's: plus the bias of output channel `(i / positions) % channels` when
    /// `bias`.
    Bias {
        /// Output positions per channel (OH·OW).
        positions: usize,
        /// Output channels.
        channels: usize,
        /// Whether there is a bias (bound as the layer's input 2).
        bias: bool,
    },
}

/// The scratch binding of `splits` slices of `out` partial sums, or why it cannot be bound.
pub fn scratch(splits: usize, out: usize) -> Result<Bind, String> {
    let bytes = splits
        .checked_mul(out)
        .and_then(|v| v.checked_mul(4))
        .ok_or("split-K's partial sums exceed the address space")?;
    Ok(Bind::Scratch { slot: 0, bytes })
}

/// The reduction step over `splits` slices of `out` outputs.
pub fn reduce(splits: usize, out: usize, epilogue: &Epilogue, act: Act) -> Result<Step, String> {
    let mut params = p32s(&[splits, out], "a split-K parameter")?;
    let scratch = scratch(splits, out)?;
    let (extra, finish) = match *epilogue {
        Epilogue::Product { m, n, alpha, c } => {
            params.extend(p32s(&[m, n], "a product parameter")?);
            params.push(alpha.to_bits());
            match c {
                Some((beta, (rs, cs))) => {
                    params.push(beta.to_bits());
                    params.extend(p32s(&[rs, cs], "a C stride")?);
                    (
                        true,
                        "let row = (i / p[4]) % p[3];
    let col = i % p[4];
    v = bitcast<f32>(p[5]) * v + bitcast<f32>(p[6]) * x1[row * p[7] + col * p[8]];",
                    )
                }
                None => (false, "v = bitcast<f32>(p[5]) * v;"),
            }
        }
        Epilogue::Bias {
            positions,
            channels,
            bias,
        } => {
            params.extend(p32s(&[positions, channels], "a Conv parameter")?);
            if bias {
                (true, "v = v + x1[(i / p[3]) % p[4]];")
            } else {
                (false, "")
            }
        }
    };
    let body = format!(
        "    var v = 0.0;
    for (var s = 0u; s < p[1]; s = s + 1u) {{
        v = v + x0[s * p[2] + i];
    }}
    {finish}
    y[i] = act(v);"
    );
    let inputs = if extra { 2 } else { 1 };
    let mut binds = vec![scratch];
    if extra {
        binds.push(Bind::Input(2));
    }
    binds.push(Bind::Output(0));
    linear_step(
        linear_shader(inputs, &act.wgsl(), &body),
        params,
        binds,
        out,
    )
}
