//! WGSL compute kernels, one module per op family. A planned layer is a list of [`Step`]s:
//! a shader, the `u32` parameters it reads (shapes, strides, float bits), which of the
//! layer's tensors it binds, and how many workgroups to launch. Every shader follows one
//! binding convention: binding 0 is the parameter array, then the bound tensors in order
//! (inputs `read`, outputs `read_write`), entry point `main`; f32 kernels bind
//! `array<f32>`, the kernels of [`typed`] (any element type, read by its size) `array<u32>`.
//! The f16 variant of an f32 kernel is generated from its source by [`half`].

pub mod conv;
pub mod elementwise;
pub mod half;
pub mod linalg;
pub mod movement;
pub mod norm;
pub mod pool;
pub mod reduce;
pub mod resize;
pub mod splitk;
pub mod tiles;
pub mod typed;

/// A tensor a step binds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bind {
    /// The layer's input at this slot.
    Input(usize),
    /// The layer's output at this slot.
    Output(usize),
    /// A device buffer the workload owns for intermediate values between its steps (split-K's
    /// partial sums), of at least `bytes`; steps naming the same slot share it.
    Scratch {
        /// Which scratch buffer.
        slot: usize,
        /// Its size in bytes.
        bytes: usize,
    },
    /// The layer's status word (`array<u32>`, read-write): zero before the layer runs; a
    /// kernel that meets an input it cannot compute with (a Gather index outside its axis)
    /// sets word 0, and the workload turns that into an error naming the layer once the
    /// word is read back.
    Status,
}

/// One compute dispatch of a layer.
#[derive(Debug, Clone)]
pub struct Step {
    /// The WGSL source.
    pub source: String,
    /// Its parameter array.
    pub params: Vec<u32>,
    /// The tensors it binds after the parameters, in binding order.
    pub binds: Vec<Bind>,
    /// Workgroups per dimension.
    pub groups: [u32; 3],
}

/// Threads per workgroup of the one-thread-per-element kernels.
pub const LINEAR_GROUP: u32 = 64;

/// The inner step of the 64×64 register-blocked tiles (MatMul's and the implicit-GEMM
/// convolution's): 16 depth steps over the workgroup's tiles, `ta` row-major by output row
/// (64 rows of 16 depths, so the threads' stores are consecutive) and `tb` by depth (16 rows
/// of 64 columns), each invocation adding a 4×4 block of products into four `vec4`
/// accumulators (`acc0..acc3`, one per row of its block: held in registers, where a
/// dynamically indexed array may not be).
pub(crate) const BLOCK_4X4_STEP: &str = "        for (var q = 0u; q < 16u; q = q + 1u) {
            let r = lid.y * 64u + q;
            let a = vec4<f32>(ta[r], ta[r + 16u], ta[r + 32u], ta[r + 48u]);
            let c = q * 64u + lid.x * 4u;
            let b = vec4<f32>(tb[c], tb[c + 1u], tb[c + 2u], tb[c + 3u]);
            acc0 = acc0 + a.x * b;
            acc1 = acc1 + a.y * b;
            acc2 = acc2 + a.z * b;
            acc3 = acc3 + a.w * b;
        }";

/// The 4×4 block's accumulators, zeroed.
pub(crate) const BLOCK_4X4_INIT: &str = "    var acc0 = vec4<f32>(0.0);
    var acc1 = vec4<f32>(0.0);
    var acc2 = vec4<f32>(0.0);
    var acc3 = vec4<f32>(0.0);";

/// Row `i` of the 4×4 block (as `accs`), picked without indexing an array.
pub(crate) const BLOCK_4X4_ROW: &str =
    "let accs = select(select(acc0, acc1, i == 1u), select(acc2, acc3, i == 3u), i >= 2u);";

/// Most workgroups along one dispatch dimension (WebGPU's default limit).
pub const MAX_GROUPS: u32 = 65_535;

/// A kernel's parameter as a `u32`, or the reason it does not fit.
pub fn p32(v: usize, what: &str) -> Result<u32, String> {
    u32::try_from(v).map_err(|_| format!("{what} ({v}) exceeds GpuAcc's 32-bit indexing"))
}

/// An f32 as WGSL source, exactly (its bit pattern; also for infinities).
pub fn lit(v: f32) -> String {
    format!("bitcast<f32>({}u)", v.to_bits())
}

/// Workgroups for `n` threads of a one-thread-per-element kernel: x up to the limit, the
/// rest along y (the shader recombines them, see [`linear_shader`]).
pub fn linear_groups(n: usize) -> Result<[u32; 3], String> {
    let groups = p32(n.div_ceil(LINEAR_GROUP as usize), "the element count")?;
    let x = groups.clamp(1, MAX_GROUPS);
    let y = groups.div_ceil(x).max(1);
    if y > MAX_GROUPS {
        return Err(format!("{n} elements exceed one dispatch"));
    }
    Ok([x, y, 1])
}

/// The bindings of a shader with `inputs` read-only tensors `x0..` and `outputs` written
/// tensors (`y` when one, else `y0..`).
pub fn bindings(inputs: usize, outputs: usize) -> String {
    let mut s = String::from("@group(0) @binding(0) var<storage, read> p: array<u32>;\n");
    for k in 0..inputs {
        s.push_str(&format!(
            "@group(0) @binding({}) var<storage, read> x{k}: array<f32>;\n",
            k + 1
        ));
    }
    for k in 0..outputs {
        let name = if outputs == 1 {
            "y".to_string()
        } else {
            format!("y{k}")
        };
        s.push_str(&format!(
            "@group(0) @binding({}) var<storage, read_write> {name}: array<f32>;\n",
            inputs + k + 1
        ));
    }
    s
}

/// A one-thread-per-element shader: `i` is the element index, below `p[0]`; `body` must use
/// every binding. `helpers` are extra functions.
pub fn linear_shader(inputs: usize, helpers: &str, body: &str) -> String {
    format!(
        "{}{helpers}\n@compute @workgroup_size({LINEAR_GROUP})\nfn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {{\n    let i = gid.x + gid.y * nwg.x * {LINEAR_GROUP}u;\n    if (i >= p[0]) {{ return; }}\n{body}\n}}\n",
        bindings(inputs, 1)
    )
}

/// A step of a one-thread-per-element kernel over `n` elements.
pub fn linear_step(
    source: String,
    mut params: Vec<u32>,
    binds: Vec<Bind>,
    n: usize,
) -> Result<Step, String> {
    params.insert(0, p32(n, "the element count")?);
    Ok(Step {
        source,
        params,
        binds,
        groups: linear_groups(n)?,
    })
}

/// Row-major strides of `dims`.
pub fn strides(dims: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; dims.len()];
    for k in (0..dims.len().saturating_sub(1)).rev() {
        s[k] = s[k + 1].saturating_mul(dims[k + 1]);
    }
    s
}

/// Product of `dims` (1 when empty).
pub fn product(dims: &[usize]) -> usize {
    dims.iter().product()
}

/// A list of `usize` as kernel parameters.
pub fn p32s(v: &[usize], what: &str) -> Result<Vec<u32>, String> {
    v.iter().map(|&x| p32(x, what)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linear_groups_split_past_the_dimension_limit() {
        assert_eq!(linear_groups(1).unwrap(), [1, 1, 1]);
        assert_eq!(linear_groups(64).unwrap(), [1, 1, 1]);
        assert_eq!(linear_groups(65).unwrap(), [2, 1, 1]);
        let big = 64 * 65_535 + 1;
        assert_eq!(linear_groups(big).unwrap(), [65_535, 2, 1]);
        assert_eq!(strides(&[2, 3, 4]), vec![12, 4, 1]);
        assert_eq!(lit(f32::NEG_INFINITY), "bitcast<f32>(4286578688u)");
    }
}
