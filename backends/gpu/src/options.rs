//! GpuAcc's backend options, parsed from the runtime's `BackendOptions`
//! (`--backend-option GpuAcc:KEY=VALUE` on the command line).

use crate::kernels::tiles::Tiles;
use backplane_backend_api::BackendOptions;

/// How GpuAcc chooses its adapter.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GpuAccOptions {
    /// Accept a software (CPU) Vulkan adapter such as Mesa's lavapipe when no GPU is present
    /// (`allow_software=true`). Off by default: a software adapter is slower than CpuAcc, so
    /// it is only wanted for tests.
    pub allow_software: bool,
    /// Use only the adapter whose name contains this text (`adapter=NAME`, case-insensitive).
    pub adapter: Option<String>,
    /// Time each layer on its own (`profile=true`, set by the CLI's `--profile`): every GPU
    /// layer is submitted and waited for, so per-layer host timings cover its GPU work.
    /// Off by default: a run of consecutive GPU layers is then one submit. Where the adapter
    /// has timestamp queries, profiling times each layer on the device instead (see
    /// `timestamps`), without waiting per layer.
    pub profile: bool,
    /// When profiling, time layers with timestamp queries where the adapter has them
    /// (`timestamps=false`: host timing of a submit and wait per layer instead).
    pub no_timestamps: bool,
    /// The layout of products and convolutions (`tiles=auto|direct|16|64|splitk`): chosen
    /// per layer by workgroup count (`auto`, the default) or forced, to test or measure
    /// each path (see [`crate::kernels::tiles`]).
    pub tiles: Tiles,
    /// Submit the recorded work after this many layers even when nothing leaves the device
    /// (`submit_every=N`; 0: one submit per run of consecutive GPU layers), so the GPU starts
    /// on a long run's first layers while the host records the rest. `None`: the default,
    /// [`DEFAULT_SUBMIT_EVERY`].
    pub submit_every: Option<u32>,
    /// Refuse f16 compute layers as an adapter without `SHADER_F16` does (`f16=off`; default
    /// `on`: f16 kernels wherever the adapter offers them), to test that path or compare.
    pub no_f16: bool,
}

/// Layers recorded per submit by default: long enough that the submits' own cost stays small
/// against the layers' work, short enough that the GPU does not wait for a whole network's
/// recording.
pub const DEFAULT_SUBMIT_EVERY: u32 = 32;

impl GpuAccOptions {
    /// These options with `options` applied on top; an unknown key or a bad value is an error
    /// naming it.
    pub fn merged(&self, options: &BackendOptions) -> Result<GpuAccOptions, String> {
        let mut out = self.clone();
        for (key, value) in &options.values {
            match key.as_str() {
                "allow_software" => out.allow_software = flag(key, value)?,
                "profile" => out.profile = flag(key, value)?,
                "timestamps" => out.no_timestamps = !flag(key, value)?,
                "tiles" => out.tiles = Tiles::parse(value)?,
                "submit_every" => {
                    out.submit_every = Some(value.parse().map_err(|_| {
                        format!("GpuAcc option submit_every={value}: expected a count of layers (0: one submit per run)")
                    })?)
                }
                "f16" => {
                    out.no_f16 = match value.as_str() {
                        "on" => false,
                        "off" => true,
                        other => {
                            return Err(format!("GpuAcc option f16={other}: expected on or off"))
                        }
                    }
                }
                "adapter" => {
                    out.adapter = (!value.is_empty()).then(|| value.clone());
                }
                other => {
                    return Err(format!(
                        "unknown GpuAcc option '{other}' (known: allow_software, adapter, profile, submit_every, timestamps, tiles, f16)"
                    ))
                }
            }
        }
        Ok(out)
    }
}

/// A yes/no option's value.
fn flag(key: &str, value: &str) -> Result<bool, String> {
    match value {
        "true" | "1" | "yes" => Ok(true),
        "false" | "0" | "no" => Ok(false),
        other => Err(format!(
            "GpuAcc option {key}={other}: expected true or false"
        )),
    }
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

    #[test]
    fn parses_known_options_and_rejects_others() {
        let base = GpuAccOptions::default();
        let m = base
            .merged(&opts(&[("allow_software", "true"), ("adapter", "llvm")]))
            .unwrap_or_default();
        assert!(m.allow_software);
        assert_eq!(m.adapter.as_deref(), Some("llvm"));
        assert!(base.merged(&opts(&[("allow_software", "maybe")])).is_err());
        assert!(
            base.merged(&opts(&[("profile", "yes")]))
                .unwrap_or_default()
                .profile
        );
        assert!(base.merged(&opts(&[("profile", "often")])).is_err());
        assert!(
            base.merged(&opts(&[("timestamps", "false")]))
                .unwrap_or_default()
                .no_timestamps
        );
        assert!(base.merged(&opts(&[("threads", "2")])).is_err());
        assert_eq!(
            base.merged(&opts(&[("tiles", "64")]))
                .unwrap_or_default()
                .tiles,
            Tiles::T64
        );
        assert!(base.merged(&opts(&[("tiles", "8")])).is_err());
        assert_eq!(
            base.merged(&opts(&[("submit_every", "0")]))
                .unwrap_or_default()
                .submit_every,
            Some(0)
        );
        assert!(base.merged(&opts(&[("submit_every", "-1")])).is_err());
    }
}
