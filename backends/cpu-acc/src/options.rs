//! CpuAcc's backend options: typed, parsed from the runtime's per-backend string options
//! ([`BackendOptions`]), settable from the API ([`CpuAccBackend::with_options`]) and the
//! CLI (`--backend-option CpuAcc:KEY=VALUE`).
//!
//! Most options switch one convolution path or layout off, for A/B measurements; they are
//! read while workloads are created and subgraphs optimized, so a backend's options apply to
//! the networks loaded through it. Planning code reads them with [`current`]: the backend
//! installs its options for the duration of each such call ([`scoped`]).
//!
//! [`CpuAccBackend::with_options`]: crate::CpuAccBackend::with_options

use backplane_backend_api::{BackendError, BackendOptions, Result};
use backplane_cpu_kernels::isa::Isa;
use std::cell::Cell;

/// CpuAcc's options. The default is what CpuAcc runs without any option: every path on,
/// the machine's threads, the CPU's best instruction set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuAccOptions {
    /// `threads`: threads per operator (`None`: the machine's hardware threads).
    pub threads: Option<usize>,
    /// `isa`: cap the kernels' instruction set (`avx2` or `portable`; `avx2` also keeps
    /// the int8 GEMM off its AVX-512 tiles). Process-wide: the tier is chosen once, before
    /// the first kernel runs.
    pub isa: Option<Isa>,
    /// `spin_us`: how long pool helpers spin between parallel steps before parking.
    /// Process-wide, like the pools.
    pub spin_us: Option<u64>,
    /// `thread_choice`: each layer of a network loaded with several threads times its
    /// steps shared with the helpers and on the calling thread alone, and keeps the faster
    /// way. Off by default: measured level on a quiet machine, and mixed where the cores
    /// are far apart (docs/perf.md, session 51), as layers chosen one by one move data
    /// away from the helpers that read it next.
    pub thread_choice: bool,
    /// `winograd`: Winograd convolutions (F(4×4, 3×3), and channels-last F(2×2, 3×3)).
    pub winograd: bool,
    /// `direct`: first-layer and small pointwise convolutions by tiles on the phases.
    pub direct: bool,
    /// `channel_lanes`: convolutions with the output channels in vector lanes.
    pub channel_lanes: bool,
    /// `dw_rows`: 3×3 depthwise planes and max pooling read a row segment at a time.
    pub dw_rows: bool,
    /// `dw_channels_last`: depthwise convolution and max pooling in channels-last blocks.
    pub dw_channels_last: bool,
    /// `split_halves`: deep packed weights with their 16-column halves one after the other.
    pub split_halves: bool,
    /// `nhwc`: channels-last regions.
    pub nhwc: bool,
    /// `conv_pairs`: an expansion and its depthwise convolution (or a depthwise convolution
    /// and its projection) run together a band of rows at a time.
    pub conv_pairs: bool,
    /// `conv_gather`: convolutions whose padded rows are much wider than their output rows
    /// (dilated ones) pack only the real output columns instead of computing the padded width.
    pub conv_gather: bool,
}

impl Default for CpuAccOptions {
    fn default() -> Self {
        CpuAccOptions {
            threads: None,
            isa: None,
            spin_us: None,
            thread_choice: false,
            winograd: true,
            direct: true,
            channel_lanes: true,
            dw_rows: true,
            dw_channels_last: true,
            split_halves: true,
            nhwc: true,
            conv_pairs: true,
            conv_gather: true,
        }
    }
}

/// The option names, for help texts and error messages.
pub const OPTION_NAMES: &[&str] = &[
    "threads",
    "isa",
    "spin_us",
    "thread_choice",
    "winograd",
    "direct",
    "channel_lanes",
    "dw_rows",
    "dw_channels_last",
    "split_halves",
    "nhwc",
    "conv_pairs",
    "conv_gather",
];

impl CpuAccOptions {
    /// These options with those `options` sets applied (unknown names are refused, so a
    /// misspelt switch is not silently ignored).
    pub fn merged(mut self, options: &BackendOptions) -> Result<Self> {
        let mut keys: Vec<&String> = options.values.keys().collect();
        keys.sort();
        for key in keys {
            let value = options.values.get(key).map_or("", String::as_str);
            self.set(key, value)?;
        }
        Ok(self)
    }

    /// Set option `key` to `value` (`on`/`off`, `true`/`false`, `1`/`0` for switches).
    pub fn set(&mut self, key: &str, value: &str) -> Result<()> {
        let v = value.trim();
        let bad = |want: &str| {
            BackendError::Other(format!("CpuAcc option {key}={value}: expected {want}"))
        };
        let switch = || match v {
            "on" | "true" | "1" | "yes" => Ok(true),
            "off" | "false" | "0" | "no" => Ok(false),
            _ => Err(bad("on or off")),
        };
        match key {
            "threads" => match v.parse::<usize>() {
                Ok(n) if n > 0 => self.threads = Some(n),
                _ => return Err(bad("a positive integer")),
            },
            "isa" => self.isa = Some(Isa::parse(v).ok_or_else(|| bad("avx512, avx2 or portable"))?),
            "spin_us" => self.spin_us = Some(v.parse().map_err(|_| bad("microseconds"))?),
            "thread_choice" => self.thread_choice = switch()?,
            "winograd" => self.winograd = switch()?,
            "direct" => self.direct = switch()?,
            "channel_lanes" => self.channel_lanes = switch()?,
            "dw_rows" => self.dw_rows = switch()?,
            "dw_channels_last" => self.dw_channels_last = switch()?,
            "split_halves" => self.split_halves = switch()?,
            "nhwc" => self.nhwc = switch()?,
            "conv_pairs" => self.conv_pairs = switch()?,
            "conv_gather" => self.conv_gather = switch()?,
            _ => {
                return Err(BackendError::Other(format!(
                    "unknown CpuAcc option {key} (known: {})",
                    OPTION_NAMES.join(", ")
                )))
            }
        }
        Ok(())
    }
}

thread_local! {
    static CURRENT: Cell<Option<CpuAccOptions>> = const { Cell::new(None) };
}

/// The options of the backend whose call (workload creation, subgraph optimization) is
/// running on this thread; the defaults outside such a call.
pub fn current() -> CpuAccOptions {
    CURRENT.with(Cell::get).unwrap_or_default()
}

/// Run `f` with `options` as [`current`] on this thread (restored afterwards, also when
/// calls nest).
pub fn scoped<R>(options: CpuAccOptions, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<CpuAccOptions>);
    impl Drop for Restore {
        fn drop(&mut self) {
            CURRENT.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(CURRENT.with(|c| c.replace(Some(options))));
    f()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(pairs: &[(&str, &str)]) -> BackendOptions {
        let mut o = BackendOptions::default();
        for (k, v) in pairs {
            o.values.insert((*k).into(), (*v).into());
        }
        o
    }

    /// Switches and values parse; unknown names and bad values are refused with the name.
    #[test]
    fn options_parse_and_refuse() {
        let o = CpuAccOptions::default()
            .merged(&opts(&[
                ("winograd", "off"),
                ("threads", "3"),
                ("isa", "avx2"),
            ]))
            .unwrap();
        assert!(!o.winograd && o.direct);
        assert_eq!((o.threads, o.isa), (Some(3), Some(Isa::Avx2)));
        for bad in [("winograd", "maybe"), ("threads", "0"), ("no_such", "1")] {
            let e = CpuAccOptions::default().merged(&opts(&[bad])).unwrap_err();
            assert!(e.to_string().contains(bad.0), "{e}");
        }
    }

    /// `current` sees the scoped options inside, the defaults outside and after.
    #[test]
    fn scoped_options_are_seen_and_restored() {
        let off = CpuAccOptions {
            nhwc: false,
            ..CpuAccOptions::default()
        };
        assert!(current().nhwc);
        scoped(off, || {
            assert!(!current().nhwc);
            scoped(CpuAccOptions::default(), || assert!(current().nhwc));
            assert!(!current().nhwc);
        });
        assert!(current().nhwc);
    }
}
