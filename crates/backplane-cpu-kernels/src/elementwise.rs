//! Elementwise activation bodies with explicit vector code: the in-place Relu, Clip and
//! LeakyRelu. Compiled from plain loops, a select that keeps some values (`if v < 0 { 0 }
//! else { v }`) becomes a masked store of only the changed lanes (`vmaskmovps`), which AMD's
//! CPUs run at a fraction of a plain store's speed; the other activations are compiled
//! bodies of the caller, multiversioned ([`crate::multiversion!`]).

use crate::act::Activation;

/// `y[i] = act(y[i])` in place for an in-kernel activation ([`Activation::in_kernel`]) with
/// AVX2. False, doing nothing, for another activation or without AVX2.
pub fn act_in_place(act: Activation, y: &mut [f32]) -> bool {
    #[cfg(target_arch = "x86_64")]
    if act.in_kernel() && crate::isa::avx2_in_use() {
        // SAFETY: AVX2 and FMA are present (checked); the kernel loads and stores only whole
        // eight-float chunks of `y` and does the rest with plain Rust.
        unsafe { crate::gemm::avx2::act_in_place(act, y) };
        return true;
    }
    let _ = (act, y);
    false
}
