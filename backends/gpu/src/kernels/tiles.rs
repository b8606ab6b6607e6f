//! How a product (MatMul, Gemm, the implicit-GEMM convolution) is tiled. [`choose`] takes
//! 16×16 tiles, and splits a long K into slices (each a partial sum, added up by a second
//! pass that also applies the bias and activation) when the tiles are too few to fill a
//! large GPU. The 64×64 register-blocked tiles are never chosen automatically: on an NVIDIA
//! H200 they were slower than 16×16 tiles at the level of whole models, also where they
//! launched many workgroups (docs/gpu.md has the A/B). The backend option
//! `tiles=auto|direct|16|64|splitk` ([`Tiles`]) forces one layout, so every path can be
//! tested and measured.

/// Workgroups that fill a large GPU: two per compute unit of a 132-SM NVIDIA H100/H200.
/// A layer launching fewer 16×16 tiles than this, with a long K, splits K so that slices
/// times tiles reach it.
pub const FILL_WORKGROUPS: usize = 264;

/// Shortest K worth splitting: shorter products have little work per tile to share out.
pub const SPLIT_MIN_K: usize = 512;

/// Shortest K slice of an automatic split (enough work per workgroup to repay its launch and
/// the extra pass).
pub const SPLIT_MIN_SLICE: usize = 256;

/// Most K slices (bounds the partial-sum scratch buffer and the reduction's reads).
pub const MAX_SPLITS: usize = 32;

/// Largest partial-sum scratch buffer a split may use, in bytes; a split that would need
/// more takes fewer slices.
pub const MAX_SPLIT_BYTES: usize = 64 << 20;

/// The `tiles` backend option: which layout products and convolutions take.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Tiles {
    /// Chosen per layer by [`choose`] (the default).
    #[default]
    Auto,
    /// Convolutions one thread per output (products, which have no direct path, 16×16).
    Direct,
    /// 16×16 tiles, one output per thread.
    T16,
    /// 64×64 register-blocked tiles.
    T64,
    /// 16×16 tiles with K split into slices and a reduction pass.
    SplitK,
}

impl Tiles {
    /// The option's value (`auto`, `direct`, `16`, `64`, `splitk`), or why it is not one.
    pub fn parse(value: &str) -> Result<Tiles, String> {
        Ok(match value {
            "auto" => Tiles::Auto,
            "direct" => Tiles::Direct,
            "16" => Tiles::T16,
            "64" => Tiles::T64,
            "splitk" => Tiles::SplitK,
            other => {
                return Err(format!(
                    "GpuAcc option tiles={other}: expected auto, direct, 16, 64 or splitk"
                ))
            }
        })
    }
}

/// The layout a product takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// One thread per output (convolutions only).
    Direct,
    /// 16×16 output tiles.
    Tiled16,
    /// 64×64 register-blocked output tiles.
    Blocked64,
    /// 16×16 tiles over `splits` slices of K, each `slice` long, then a reduction.
    SplitK {
        /// Slices of K.
        splits: usize,
        /// Length of each slice (the last may be shorter).
        slice: usize,
    },
}

/// The shape of a product as the chooser sees it: `batches` independent `m`×`n` results
/// (for a convolution, channels per group × output positions, times batch × groups), each
/// summing over `k`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Rows of each result.
    pub m: usize,
    /// Columns of each result.
    pub n: usize,
    /// The summed dimension.
    pub k: usize,
    /// Independent results.
    pub batches: usize,
}

impl Shape {
    /// Workgroups a layout of `tile`×`tile` output tiles launches.
    pub fn groups(&self, tile: usize) -> usize {
        self.m
            .div_ceil(tile)
            .saturating_mul(self.n.div_ceil(tile))
            .saturating_mul(self.batches.max(1))
    }
}

/// The layout `tiles` asks for, for a product of `shape`; `direct_ok` says whether a
/// one-thread-per-output path exists (convolutions), `narrow` whether the automatic choice
/// would take it (too few output channels per group for tiles to pay).
pub fn choose(tiles: Tiles, shape: Shape, direct_ok: bool, narrow: bool) -> Layout {
    match tiles {
        Tiles::Direct if direct_ok => Layout::Direct,
        Tiles::Direct | Tiles::T16 => Layout::Tiled16,
        Tiles::T64 => Layout::Blocked64,
        Tiles::SplitK => split(shape, 2),
        Tiles::Auto => {
            if direct_ok && narrow {
                Layout::Direct
            } else if shape.groups(16) >= FILL_WORKGROUPS || shape.k < SPLIT_MIN_K {
                Layout::Tiled16
            } else {
                let want = FILL_WORKGROUPS.div_ceil(shape.groups(16).max(1));
                let most = shape.k / SPLIT_MIN_SLICE;
                match split(shape, want.min(most)) {
                    Layout::SplitK { splits, .. } if splits < 2 => Layout::Tiled16,
                    layout => layout,
                }
            }
        }
    }
}

/// K in about `splits` slices (at least 2, at most [`MAX_SPLITS`], within
/// [`MAX_SPLIT_BYTES`] of partial sums); slices longer than a tile are whole tiles, and no
/// slice is empty, so the count may come out lower (1 when K is 1).
fn split(shape: Shape, splits: usize) -> Layout {
    let out = shape
        .m
        .saturating_mul(shape.n)
        .saturating_mul(shape.batches.max(1))
        .saturating_mul(4)
        .max(1);
    let by_bytes = (MAX_SPLIT_BYTES / out).max(1);
    let k = shape.k.max(1);
    let splits = splits.clamp(2, MAX_SPLITS).min(by_bytes).min(k);
    let mut slice = k.div_ceil(splits.max(1));
    if slice > 16 {
        slice = slice.next_multiple_of(16);
    }
    Layout::SplitK {
        splits: k.div_ceil(slice),
        slice,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(m: usize, n: usize, k: usize, batches: usize) -> Shape {
        Shape { m, n, k, batches }
    }

    #[test]
    fn few_wide_tiles_take_small_tiles_or_split_k() {
        // ResNet-50's last 3x3 convolution: 512 channels x 49 positions, K = 512*9.
        let r50 = shape(512, 49, 4608, 1);
        assert_eq!(r50.groups(64), 8);
        match choose(Tiles::Auto, r50, true, false) {
            Layout::SplitK { splits, slice } => {
                assert!(splits >= 2 && splits * slice >= 4608 && (splits - 1) * slice < 4608);
                assert!(r50.groups(16) * splits >= FILL_WORKGROUPS);
            }
            other => panic!("expected split-K, got {other:?}"),
        }
        // BERT-base's output projection (128 x 768, K = 3072): 384 16x16 tiles fill the GPU.
        assert_eq!(
            choose(Tiles::Auto, shape(128, 768, 3072, 1), false, false),
            Layout::Tiled16
        );
        // BERT-base's intermediate projection (128 x 3072): 16x16 tiles, never 64x64 ones.
        assert_eq!(
            choose(Tiles::Auto, shape(128, 3072, 768, 1), false, false),
            Layout::Tiled16
        );
        // The shapes tests/tiles.rs runs on the automatic choice: K split in 3 and in 2.
        assert_eq!(
            choose(Tiles::Auto, shape(5, 7, 1000, 1), false, false),
            Layout::SplitK {
                splits: 3,
                slice: 336
            }
        );
        assert_eq!(
            choose(Tiles::Auto, shape(8, 12, 576, 1), true, false),
            Layout::SplitK {
                splits: 2,
                slice: 288
            }
        );
        // Short K is never split; narrow convolutions walk directly.
        assert_eq!(
            choose(Tiles::Auto, shape(8, 8, 100, 1), false, false),
            Layout::Tiled16
        );
        assert_eq!(
            choose(Tiles::Auto, shape(4, 100, 9, 1), true, true),
            Layout::Direct
        );
    }

    #[test]
    fn forced_layouts_are_taken_and_splits_cover_k() {
        let s = shape(3, 5, 37, 2);
        assert_eq!(choose(Tiles::T64, s, true, true), Layout::Blocked64);
        assert_eq!(choose(Tiles::T16, s, true, true), Layout::Tiled16);
        assert_eq!(choose(Tiles::Direct, s, true, false), Layout::Direct);
        assert_eq!(choose(Tiles::Direct, s, false, false), Layout::Tiled16);
        assert_eq!(
            choose(Tiles::SplitK, s, true, false),
            Layout::SplitK {
                splits: 2,
                slice: 32
            }
        );
        assert_eq!(
            choose(Tiles::SplitK, shape(3, 5, 5, 1), false, false),
            Layout::SplitK {
                splits: 2,
                slice: 3
            }
        );
        assert_eq!(
            choose(Tiles::SplitK, shape(3, 5, 1, 1), false, false),
            Layout::SplitK {
                splits: 1,
                slice: 1
            }
        );
        assert!(Tiles::parse("32").is_err());
        assert_eq!(Tiles::parse("splitk"), Ok(Tiles::SplitK));
    }
}
