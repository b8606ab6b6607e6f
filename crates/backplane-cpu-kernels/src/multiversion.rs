//! Multiversioning: a safe, autovectorizable kernel body compiled for AVX-512F, for AVX2+FMA
//! and for the baseline, and the build the tier allows picked at each call.
//!
//! The bodies may live in any crate: [`multiversion!`](crate::multiversion!) defines a safe
//! function that hands its arguments to a runner (`run1` .. `run7`, by argument count), which
//! calls the body through a `#[target_feature]` function of this crate. The body must be
//! `#[inline(always)]`, so that it is compiled inside that function with its features; the
//! caller writes no `unsafe`.
//!
//! A pitfall of compiled bodies: a select that keeps the value it read (`*o = if v < 0 { 0 }
//! else { *o }`, in place) compiles to a masked store of the changed lanes (`vmaskmovps`),
//! which AMD's CPUs run at a fraction of a plain store's speed; such loops are written as
//! explicit vector code or through `f32::max`/`min` instead.

use crate::isa::{avx2_in_use, has_avx512};

/// Define, for one argument count, the trait a kernel body of that many arguments
/// implements and the function that runs it compiled for the best tier in use. The
/// arguments stay separate parameters all the way to the body (not one tuple), so that
/// references keep their `noalias` facts and the bodies vectorize as if called directly.
macro_rules! arity {
    ($trait:ident, $run:ident; $($A:ident $a:ident),+) => {
        /// A kernel body, for the function of the same argument count that runs it. Implemented
        /// by the functions [`multiversion!`](crate::multiversion!) defines; `call` must be
        /// `#[inline(always)]` and call an `#[inline(always)]` body.
        pub trait $trait<$($A),+> {
            /// What the body returns.
            type Out;
            /// Run the body.
            #[allow(clippy::too_many_arguments)]
            fn call($($a: $A),+) -> Self::Out;
        }

        /// Run `K`'s body compiled for the best tier in use: AVX-512F (16-lane vectors),
        /// AVX2+FMA, or the baseline.
        #[inline]
        #[allow(clippy::too_many_arguments)]
        pub fn $run<K: $trait<$($A),+>, $($A),+>($($a: $A),+) -> K::Out {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx2,fma")]
                #[allow(clippy::too_many_arguments)]
                fn wide<K: $trait<$($A),+>, $($A),+>($($a: $A),+) -> K::Out {
                    K::call($($a),+)
                }
                #[target_feature(enable = "avx2,fma")]
                #[allow(clippy::too_many_arguments)]
                fn fast<K: $trait<$($A),+>, $($A),+>($($a: $A),+) -> K::Out {
                    K::call($($a),+)
                }
                if has_avx512() {
                    // SAFETY: the CPU supports AVX-512F, AVX2 and FMA (the tier is AVX-512
                    // only when it does); `wide` only forwards its safe arguments to a safe
                    // body.
                    return unsafe { wide::<K, $($A),+>($($a),+) };
                }
                if avx2_in_use() {
                    // SAFETY: the CPU supports AVX2 and FMA (checked by the tier); `fast`
                    // only forwards its safe arguments to a safe body.
                    return unsafe { fast::<K, $($A),+>($($a),+) };
                }
            }
            K::call($($a),+)
        }
    };
}

arity!(Kernel1, run1; A a);
arity!(Kernel2, run2; A a, B b);
arity!(Kernel3, run3; A a, B b, C c);
arity!(Kernel4, run4; A a, B b, C c, D d);
arity!(Kernel5, run5; A a, B b, C c, D d, E e);
arity!(Kernel6, run6; A a, B b, C c, D d, E e, F f);
arity!(Kernel7, run7; A a, B b, C c, D d, E e, F f, G g);

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
    ($(#[$meta:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),+ $(,)?) $(-> $ret:ty)? => $body:path;) => {
        $(#[$meta])*
        #[inline]
        #[allow(clippy::too_many_arguments)]
        $vis fn $name($($arg: $ty),+) $(-> $ret)? {
            $crate::__multiversion_arity!(($($ret)?) $body; $($arg: $ty),+)
        }
    };
    (@ret) => { () };
    (@ret $ret:ty) => { $ret };
}

/// [`multiversion!`]'s body: the trait and runner of the argument count (one to seven).
#[doc(hidden)]
#[macro_export]
macro_rules! __multiversion_arity {
    ($r:tt $body:path; $a:ident: $ta:ty) => {
        $crate::__multiversion_run!(Kernel1, run1; $r $body; $a: $ta)
    };
    ($r:tt $body:path; $a:ident: $ta:ty, $b:ident: $tb:ty) => {
        $crate::__multiversion_run!(Kernel2, run2; $r $body; $a: $ta, $b: $tb)
    };
    ($r:tt $body:path; $a:ident: $ta:ty, $b:ident: $tb:ty, $c:ident: $tc:ty) => {
        $crate::__multiversion_run!(Kernel3, run3; $r $body; $a: $ta, $b: $tb, $c: $tc)
    };
    ($r:tt $body:path; $a:ident: $ta:ty, $b:ident: $tb:ty, $c:ident: $tc:ty, $d:ident: $td:ty) => {
        $crate::__multiversion_run!(Kernel4, run4; $r $body; $a: $ta, $b: $tb, $c: $tc, $d: $td)
    };
    ($r:tt $body:path; $a:ident: $ta:ty, $b:ident: $tb:ty, $c:ident: $tc:ty, $d:ident: $td:ty, $e:ident: $te:ty) => {
        $crate::__multiversion_run!(Kernel5, run5; $r $body; $a: $ta, $b: $tb, $c: $tc, $d: $td, $e: $te)
    };
    ($r:tt $body:path; $a:ident: $ta:ty, $b:ident: $tb:ty, $c:ident: $tc:ty, $d:ident: $td:ty, $e:ident: $te:ty, $f:ident: $tf:ty) => {
        $crate::__multiversion_run!(Kernel6, run6; $r $body; $a: $ta, $b: $tb, $c: $tc, $d: $td, $e: $te, $f: $tf)
    };
    ($r:tt $body:path; $a:ident: $ta:ty, $b:ident: $tb:ty, $c:ident: $tc:ty, $d:ident: $td:ty, $e:ident: $te:ty, $f:ident: $tf:ty, $g:ident: $tg:ty) => {
        $crate::__multiversion_run!(Kernel7, run7; $r $body; $a: $ta, $b: $tb, $c: $tc, $d: $td, $e: $te, $f: $tf, $g: $tg)
    };
}

/// [`multiversion!`]'s body for one argument count: a local type whose trait impl calls the
/// body, run by the runner of that count.
#[doc(hidden)]
#[macro_export]
macro_rules! __multiversion_run {
    ($tr:ident, $run:ident; ($($ret:ty)?) $body:path; $($arg:ident: $ty:ty),+) => {{
        struct Body;
        impl $crate::multiversion::$tr<$($ty),+> for Body {
            type Out = $crate::multiversion!(@ret $($ret)?);
            #[inline(always)]
            #[allow(clippy::too_many_arguments)]
            fn call($($arg: $ty),+) -> Self::Out {
                $body($($arg),+)
            }
        }
        $crate::multiversion::$run::<Body, $($ty),+>($($arg),+)
    }};
}
