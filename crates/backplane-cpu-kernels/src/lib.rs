//! backplane's CPU kernel library: the vector code of the CpuAcc backend, and every
//! `unsafe` block it needs.
//!
//! One module per kernel family, one file per instruction set inside a family where there is
//! ISA-specific code (`avx512.rs`, `avx2.rs`, and the portable code in the family's `mod.rs`
//! or `portable.rs`). The instruction-set tier (portable, AVX2+FMA, AVX-512) is chosen once
//! per process ([`isa::kernels`]) and every entry point dispatches on it; nothing else asks
//! the CPU.
//!
//! * [`aligned`]: 64-byte aligned buffers for packed panels and scratch.
//! * [`gemm`]: the SGEMM micro-kernels (packed panels, A or B read in place) and the packed
//!   layout's addressing.
//! * [`gemv`]: a row times packed B panels.
//! * [`transpose`]: matrix tiles and the 16-lane channel blocks of channels-last paths.
//! * [`pool_rows`]: channels-last depthwise and max-pooling rows over channel blocks.
//! * [`depthwise_rows`]: 3×3 depthwise convolution and max pooling of a plane, a row at a
//!   time.
//! * [`nhwc_depthwise`]: channels-last depthwise convolution rows.
//! * [`channel_lanes`]: convolution rows with the output channels in vector lanes.
//! * [`winograd`]: the Winograd F(4×4, 3×3) transforms.
//! * [`qgemm`]: the integer GEMM of quantized layers (16-bit operands, int32 sums) and
//!   TFLite's requantization rule.
//! * [`elementwise`]: in-place activations as explicit vector code.
//! * [`act_vec`]: sigmoid, SiLU and the hard sigmoid and swish on vectors, for kernels that
//!   apply them in registers.
//! * [`byte_sums`]: exact f64 sums of dequantized bytes (the quantized mean), vectorized.
//! * [`byte_table`]: a 256-entry byte table over a run of bytes (quantized functions).
//! * [`multiversion`](mod@multiversion): safe bodies (of any crate) compiled per tier.
//! * [`threads`]: the intra-op thread pool the kernels are run on.
//!
//! The public API is safe. The rules that make the `unsafe` inside sound: vector code is
//! entered only when the tier says the CPU has its features; every entry point checks each
//! slice length a raw-pointer kernel relies on and returns `false` (computing nothing)
//! when a precondition does not hold; each block states its reasoning in a `// SAFETY:`
//! comment.
#![allow(unsafe_code)]

pub mod act;
pub mod act_vec;
pub mod aligned;
pub mod byte_sums;
pub mod byte_table;
pub mod channel_lanes;
pub mod depthwise_rows;
pub mod elementwise;
pub mod gemm;
pub mod gemv;
pub mod geo;
pub mod isa;
mod lanes;
pub mod multiversion;
pub mod nhwc_depthwise;
pub mod pool_rows;
pub mod qgemm;
pub mod threads;
pub mod transpose;
pub mod winograd;

pub use act::Activation;
pub use aligned::AlignedVec;
pub use isa::{Int8Isa, Isa};
