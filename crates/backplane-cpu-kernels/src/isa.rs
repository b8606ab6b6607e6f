//! Which instruction-set tier the kernels run: detected once, in one place.
//!
//! Every kernel family dispatches on [`kernels`], a [`Tier`] filled on first use from the
//! CPU's features (the only `is_x86_feature_detected!` calls of the crate), capped by
//! [`limit_isa`] when an embedder asked for a lesser tier before that. The vector code of
//! every family is only entered when the tier says its features are present: that is the
//! first rule the crate's `unsafe` blocks rely on.

use std::sync::OnceLock;

/// Which micro-kernel family runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isa {
    /// 12×32 tiles in AVX-512F registers.
    Avx512,
    /// 6×16 tiles in AVX2+FMA registers.
    Avx2,
    /// Plain Rust.
    Portable,
}

impl Isa {
    /// The name shown by benchmarks and `backplane inspect`.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Avx512 => "avx512f",
            Isa::Avx2 => "avx2+fma",
            Isa::Portable => "portable",
        }
    }

    /// The tier a user names: `avx512`, `avx2` or `portable` (as option values spell them).
    pub fn parse(name: &str) -> Option<Isa> {
        match name {
            "avx512" | "avx512f" => Some(Isa::Avx512),
            "avx2" | "avx2+fma" => Some(Isa::Avx2),
            "portable" => Some(Isa::Portable),
            _ => None,
        }
    }

    /// True when this CPU can run the family.
    pub fn available(self) -> bool {
        let f = features();
        match self {
            Isa::Avx512 => f.avx512f && f.avx2_fma,
            Isa::Avx2 => f.avx2_fma,
            Isa::Portable => true,
        }
    }
}

/// The CPU features the kernels use, as detected.
#[derive(Debug, Clone, Copy, Default)]
struct Features {
    avx2_fma: bool,
    avx512f: bool,
    avx512vl: bool,
}

/// The kernel tier of this process: the family every entry point dispatches on, and the
/// CPU features behind it. Filled once by [`kernels`].
#[derive(Debug, Clone, Copy)]
pub struct Tier {
    /// The micro-kernel family in use (the best the CPU runs, or a lesser one asked for).
    pub isa: Isa,
    /// AVX2 and FMA code may run: the CPU has them and the tier is not portable.
    pub avx2: bool,
    /// The AVX-512VL builds of the Winograd transforms may run.
    pub avx512vl: bool,
}

fn features() -> Features {
    static FEATURES: OnceLock<Features> = OnceLock::new();
    *FEATURES.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            let avx2_fma = std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma");
            Features {
                avx2_fma,
                avx512f: std::arch::is_x86_feature_detected!("avx512f"),
                avx512vl: std::arch::is_x86_feature_detected!("avx512vl"),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            Features::default()
        }
    })
}

static LIMIT: OnceLock<Isa> = OnceLock::new();
static TIER: OnceLock<Tier> = OnceLock::new();

/// Ask for a lesser tier than the CPU's best (for A/B measurements): `Avx2` or `Portable`.
/// Takes effect only before the first kernel runs and only once per process (the tier is
/// chosen once); returns whether the tier in use is now at most `isa`'s.
pub fn limit_isa(isa: Isa) -> bool {
    let _ = LIMIT.set(isa);
    let used = kernels().isa;
    rank(used) <= rank(isa)
}

fn rank(isa: Isa) -> u8 {
    match isa {
        Isa::Portable => 0,
        Isa::Avx2 => 1,
        Isa::Avx512 => 2,
    }
}

/// The tier of this process, chosen on first use.
#[inline]
pub fn kernels() -> &'static Tier {
    TIER.get_or_init(|| {
        let f = features();
        let best = [Isa::Avx512, Isa::Avx2, Isa::Portable]
            .into_iter()
            .find(|i| i.available())
            .unwrap_or(Isa::Portable);
        let isa = match LIMIT.get() {
            Some(&i) if i.available() && rank(i) < rank(best) => i,
            _ => best,
        };
        Tier {
            isa,
            avx2: isa != Isa::Portable && f.avx2_fma,
            avx512vl: isa == Isa::Avx512 && f.avx512vl,
        }
    })
}

/// The micro-kernel family in use.
#[inline]
pub fn isa_in_use() -> Isa {
    kernels().isa
}

/// True when the AVX-512 micro-kernel runs (AVX-512F present and not switched off).
#[inline]
pub fn has_avx512() -> bool {
    isa_in_use() == Isa::Avx512
}

/// True when AVX2+FMA code may run: the CPU has it (AVX-512 implies it) and the tier is not
/// the portable one.
#[inline]
pub fn avx2_in_use() -> bool {
    kernels().avx2
}

/// Which micro-kernel runs, for display.
pub fn isa() -> &'static str {
    isa_in_use().name()
}

/// True when this CPU has AVX2 and FMA, whatever tier is in use.
#[inline]
pub fn has_avx2_fma() -> bool {
    features().avx2_fma
}
