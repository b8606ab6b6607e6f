//! Multiversioning: a safe, autovectorizable kernel body compiled for AVX-512F, for AVX2+FMA
//! and for the baseline, and the build the tier allows picked at each call.
//!
//! The bodies may live in any crate: [`multiversion!`](crate::multiversion!) defines a safe
//! function that hands its arguments to [`run`], which calls the body through a
//! `#[target_feature]` function of this crate. The body must be `#[inline(always)]`, so that it
//! is compiled inside that function with its features; the caller writes no `unsafe`.
//!
//! A pitfall of compiled bodies: a select that keeps the value it read (`*o = if v < 0 { 0 }
//! else { *o }`, in place) compiles to a masked store of the changed lanes (`vmaskmovps`),
//! which AMD's CPUs run at a fraction of a plain store's speed; such loops are written as
//! explicit vector code or through `f32::max`/`min` instead.

use crate::isa::{avx2_in_use, has_avx512};

/// A kernel body taking its arguments as one tuple, for [`run`]. Implemented by the
/// functions [`multiversion!`](crate::multiversion!) defines; `call` must be
/// `#[inline(always)]` and call an `#[inline(always)]` body.
pub trait Kernel<Args> {
    /// What the body returns.
    type Out;
    /// Run the body.
    fn call(args: Args) -> Self::Out;
}

/// Run `K`'s body compiled for the best tier in use: AVX-512F (16-lane vectors), AVX2+FMA,
/// or the baseline.
#[inline]
pub fn run<K: Kernel<A>, A>(args: A) -> K::Out {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f,avx2,fma")]
        fn wide<K: Kernel<A>, A>(args: A) -> K::Out {
            K::call(args)
        }
        #[target_feature(enable = "avx2,fma")]
        fn fast<K: Kernel<A>, A>(args: A) -> K::Out {
            K::call(args)
        }
        if has_avx512() {
            // SAFETY: the CPU supports AVX-512F, AVX2 and FMA (the tier is AVX-512 only when
            // it does); `wide` only forwards its safe arguments to a safe body.
            return unsafe { wide::<K, A>(args) };
        }
        if avx2_in_use() {
            // SAFETY: the CPU supports AVX2 and FMA (checked by the tier); `fast` only
            // forwards its safe arguments to a safe body.
            return unsafe { fast::<K, A>(args) };
        }
    }
    K::call(args)
}

/// Define a safe function that runs an `#[inline(always)]` safe body compiled with AVX-512F,
/// or AVX2+FMA when the CPU has them, and the same body compiled for the baseline otherwise:
///
/// ```
/// #[inline(always)]
/// fn double_body(x: &mut [f32]) {
///     x.iter_mut().for_each(|v| *v *= 2.0);
/// }
/// backplane_cpu_kernels::multiversion! {
///     /// Double every value.
///     pub fn double(x: &mut [f32]) => double_body;
/// }
/// let mut v = [1.0, 2.0];
/// double(&mut v);
/// assert_eq!(v, [2.0, 4.0]);
/// ```
#[macro_export]
macro_rules! multiversion {
    ($(#[$meta:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? => $body:path;) => {
        $(#[$meta])*
        #[inline]
        #[allow(clippy::too_many_arguments)]
        $vis fn $name($($arg: $ty),*) $(-> $ret)? {
            struct Body;
            impl $crate::multiversion::Kernel<($($ty,)*)> for Body {
                type Out = $crate::multiversion!(@ret $($ret)?);
                #[inline(always)]
                #[allow(clippy::too_many_arguments)]
                fn call(($($arg,)*): ($($ty,)*)) -> Self::Out {
                    $body($($arg),*)
                }
            }
            $crate::multiversion::run::<Body, _>(($($arg,)*))
        }
    };
    (@ret) => { () };
    (@ret $ret:ty) => { $ret };
}
