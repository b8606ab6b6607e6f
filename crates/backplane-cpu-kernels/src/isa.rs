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

/// Which micro-tile family the integer GEMM of quantized layers runs ([`crate::qgemm`]):
/// all sum 16-bit pairs into 32-bit lanes over the same packed panels, so their sums are
/// equal on every tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Int8Isa {
    /// 12×16 tiles, `vpdpwssd` (AVX-512 VNNI: pair products and the add in one
    /// instruction); tiles of fewer than five rows run the BW ones. Layers whose weights fit
    /// i8 run the byte GEMM's `vpdpbusd` tiles instead ([`crate::qgemm::quads`]).
    Avx512Vnni,
    /// 12×16 tiles, `vpmaddwd` then `vpaddd` on 512-bit registers (AVX-512BW).
    Avx512Bw,
    /// 4×16 tiles, `vpmaddwd` then `vpaddd` on 256-bit registers (AVX2).
    Avx2,
    /// Plain Rust.
    Portable,
}

impl Int8Isa {
    /// Every tier, best first.
    pub const ALL: [Int8Isa; 4] = [
        Int8Isa::Avx512Vnni,
        Int8Isa::Avx512Bw,
        Int8Isa::Avx2,
        Int8Isa::Portable,
    ];

    /// The name shown next to the f32 tier (CpuAcc's `Int8Isa` capability, benchmarks).
    pub fn name(self) -> &'static str {
        match self {
            Int8Isa::Avx512Vnni => "avx512-vnni",
            Int8Isa::Avx512Bw => "avx512bw",
            Int8Isa::Avx2 => "avx2",
            Int8Isa::Portable => "portable",
        }
    }

    /// True when this CPU can run the tier (whatever tier the process uses).
    pub fn available(self) -> bool {
        let f = features();
        match self {
            Int8Isa::Avx512Vnni => f.avx512f && f.avx512bw && f.avx512vnni && f.avx2_fma,
            Int8Isa::Avx512Bw => f.avx512f && f.avx512bw && f.avx2_fma,
            Int8Isa::Avx2 => f.avx2_fma,
            Int8Isa::Portable => true,
        }
    }

    /// The best integer tier under the f32 family `isa`: the AVX-512 ones only with
    /// [`Isa::Avx512`], so `limit_isa(Isa::Avx2)` (CpuAcc's `isa=avx2`) turns them off too.
    fn best_under(isa: Isa) -> Int8Isa {
        let allowed = |t: Int8Isa| match isa {
            Isa::Avx512 => true,
            Isa::Avx2 => matches!(t, Int8Isa::Avx2 | Int8Isa::Portable),
            Isa::Portable => t == Int8Isa::Portable,
        };
        Int8Isa::ALL
            .into_iter()
            .find(|&t| allowed(t) && t.available())
            .unwrap_or(Int8Isa::Portable)
    }
}

/// The CPU features the kernels use, as detected.
#[derive(Debug, Clone, Copy, Default)]
struct Features {
    avx2_fma: bool,
    avx512f: bool,
    avx512vl: bool,
    avx512bw: bool,
    avx512vnni: bool,
    avx512vbmi: bool,
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
    /// The integer GEMM's family: the best the CPU runs within `isa`'s.
    pub int8: Int8Isa,
    /// AVX-512 VBMI's byte permutes may run (the AVX-512 tier, on a CPU with VBMI and BW).
    pub avx512vbmi: bool,
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
                avx512bw: std::arch::is_x86_feature_detected!("avx512bw"),
                avx512vnni: std::arch::is_x86_feature_detected!("avx512vnni"),
                avx512vbmi: std::arch::is_x86_feature_detected!("avx512vbmi"),
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
            int8: Int8Isa::best_under(isa),
            avx512vbmi: isa == Isa::Avx512 && f.avx512bw && f.avx512vbmi,
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

/// The integer GEMM's family in use.
#[inline]
pub fn int8_in_use() -> Int8Isa {
    kernels().int8
}

/// Which integer GEMM family runs, for display: the tier's name, with `/vpdpbusd` where
/// the layers whose weights fit i8 run the byte GEMM ([`crate::qgemm::quads`]).
pub fn int8_isa() -> &'static str {
    match int8_in_use() {
        Int8Isa::Avx512Vnni if crate::qgemm::has_quad_tile(Int8Isa::Avx512Vnni) => {
            "avx512-vnni/vpdpbusd"
        }
        t => t.name(),
    }
}

/// True when this CPU has AVX2 and FMA, whatever tier is in use.
#[inline]
pub fn has_avx2_fma() -> bool {
    features().avx2_fma
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cap on the f32 family caps the integer tier: no AVX-512 integer tile under `avx2`
    /// (CpuAcc's `isa=avx2`, an A/B on one machine), only the portable one under
    /// `portable`; without a cap, the best tier the CPU has.
    #[test]
    fn the_int8_tier_follows_the_f32_cap() {
        let best = Int8Isa::ALL
            .into_iter()
            .find(|t| t.available())
            .unwrap_or(Int8Isa::Portable);
        assert_eq!(Int8Isa::best_under(Isa::Avx512), best);
        let under_avx2 = Int8Isa::best_under(Isa::Avx2);
        let want = if Int8Isa::Avx2.available() {
            Int8Isa::Avx2
        } else {
            Int8Isa::Portable
        };
        assert_eq!(under_avx2, want);
        assert_eq!(Int8Isa::best_under(Isa::Portable), Int8Isa::Portable);
        // The AVX-512 tiers imply the AVX2 one (and so the f32 AVX-512 family's features).
        if Int8Isa::Avx512Bw.available() {
            assert!(Int8Isa::Avx2.available() && Isa::Avx512.available());
        }
        if Int8Isa::Avx512Vnni.available() {
            assert!(Int8Isa::Avx512Bw.available());
        }
    }
}
