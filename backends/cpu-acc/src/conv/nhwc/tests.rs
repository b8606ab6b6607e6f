use super::*;
use backplane_core::ops::{AutoPad, Window as ConvWindow};
use backplane_core::{DataType, TensorInfo};

struct Rng(u64);
impl Rng {
    fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| {
                self.0 = self
                    .0
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }
}

/// A square convolution: batch, channels, input size, output channels, kernel, stride,
/// pad, group; input layout, residual, activation.
struct Case {
    n: usize,
    c: usize,
    h: usize,
    w: usize,
    m: usize,
    k: usize,
    s: usize,
    p: usize,
    group: usize,
    nchw_in: bool,
    residual: bool,
    act: Activation,
}

impl Case {
    fn out(&self) -> (usize, usize) {
        (
            (self.h + 2 * self.p - self.k) / self.s + 1,
            (self.w + 2 * self.p - self.k) / self.s + 1,
        )
    }
}

/// `act(conv(x) + b (+ r))` with NHWC output, by plain loops over the ONNX definition.
fn naive(t: &Case, x: &[f32], wt: &[f32], b: &[f32], r: Option<&[f32]>) -> Vec<f32> {
    let (oh, ow) = t.out();
    let (cg, mg) = (t.c / t.group, t.m / t.group);
    let mut y = vec![0f32; t.n * oh * ow * t.m];
    for bi in 0..t.n {
        for oy in 0..oh {
            for ox in 0..ow {
                for j in 0..t.m {
                    let g = j / mg;
                    let mut acc = b[j] as f64;
                    for ci in 0..cg {
                        let ch = g * cg + ci;
                        for ky in 0..t.k {
                            for kx in 0..t.k {
                                let (iy, ix) = (oy * t.s + ky, ox * t.s + kx);
                                if iy < t.p || ix < t.p || iy - t.p >= t.h || ix - t.p >= t.w {
                                    continue;
                                }
                                let (iy, ix) = (iy - t.p, ix - t.p);
                                let xv = if t.nchw_in {
                                    x[((bi * t.c + ch) * t.h + iy) * t.w + ix]
                                } else {
                                    x[((bi * t.h + iy) * t.w + ix) * t.c + ch]
                                };
                                let wv = wt[((j * cg + ci) * t.k + ky) * t.k + kx];
                                acc += xv as f64 * wv as f64;
                            }
                        }
                    }
                    let at = ((bi * oh + oy) * ow + ox) * t.m + j;
                    if let Some(r) = r {
                        acc += r[at] as f64;
                    }
                    y[at] = crate::math::apply(t.act, acc as f32);
                }
            }
        }
    }
    y
}

fn workload(t: &Case, wt: &[f32], b: &[f32], threads: usize) -> NhwcConvWorkload {
    let (oh, ow) = t.out();
    let xd = if t.nchw_in {
        vec![t.n, t.c, t.h, t.w]
    } else {
        vec![t.n, t.h, t.w, t.c]
    };
    let y = TensorInfo::new(DataType::F32, vec![t.n, oh, ow, t.m]);
    let mut inputs = vec![
        TensorInfo::new(DataType::F32, xd),
        TensorInfo::new(DataType::F32, vec![t.m, t.c / t.group, t.k, t.k]),
        TensorInfo::new(DataType::F32, vec![t.m]),
    ];
    if t.residual {
        inputs.push(y.clone());
    }
    let io = Io {
        layer: "test".into(),
        inputs,
        outputs: vec![y],
    };
    let desc = ConvDesc {
        window: ConvWindow {
            kernel: vec![t.k, t.k],
            strides: vec![t.s, t.s],
            dilations: vec![1, 1],
            pads: vec![t.p; 4],
            auto_pad: AutoPad::NotSet,
        },
        group: t.group,
    };
    let wt = std::sync::Arc::new(
        Tensor::from_vec(vec![t.m, t.c / t.group, t.k, t.k], wt.to_vec()).unwrap(),
    );
    let b = std::sync::Arc::new(Tensor::from_vec(vec![t.m], b.to_vec()).unwrap());
    let th = Threads::new(threads).unwrap();
    let w = NhwcConvWorkload::new(io, &desc, Some(&wt), Some(&b), t.act, t.nchw_in, th).unwrap();
    if t.residual {
        w.with_residual().unwrap()
    } else {
        w
    }
}

fn close(what: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-4 + 1e-4 * w.abs(),
            "{what}: element {i}: got {g}, expected {w}"
        );
    }
}

/// The pair of `first` and `second`, both on the in-place tiles or both not (`tiles`).
fn pair_of(first: NhwcConvWorkload, second: NhwcConvWorkload, tiles: bool) -> NhwcPairWorkload {
    let first = first.with_tiles(tiles);
    let second = second.with_tiles(tiles);
    let io = Io {
        layer: "pair".into(),
        inputs: Vec::new(),
        outputs: Vec::new(),
    };
    NhwcPairWorkload::new(io, first, second).unwrap()
}

/// A pointwise convolution and a depthwise one on its output, run as a pair (bands of
/// rows, shared rows moved between bands, several bands per image and images split
/// between threads), against the two convolutions' definitions one after the other:
/// strides 1 and 2, 3×3 and 5×5 windows, channel counts with tails, activations in and
/// out of the kernels, and both fallbacks (without the in-place tiles); then the other
/// order, a depthwise convolution and its projection, with and without a residual.
#[test]
fn pairs_match_the_two_convolutions() {
    let clip = Activation::Clip { min: 0.0, max: 6.0 };
    // n, c, h, w, expanded channels, window, stride, pads, activations.
    #[rustfmt::skip]
    let cases = [
        (1, 16, 90, 40, 37, 3, 1, 1, clip, clip),
        (2, 7, 61, 33, 48, 3, 2, 1, clip, Activation::Sigmoid),
        (1, 5, 23, 70, 9, 5, 2, 2, Activation::Sigmoid, Activation::Relu),
        (2, 3, 1, 1, 8, 3, 1, 1, Activation::Relu, clip),
        (1, 16, 29, 31, 96, 3, 2, 1, Activation::Silu, Activation::Silu),
    ];
    let mut rng = Rng(5);
    for (ci, &(n, c, h, w, m, k, s, p, act1, act2)) in cases.iter().enumerate() {
        let pw = Case {
            n,
            c,
            h,
            w,
            m,
            k: 1,
            s: 1,
            p: 0,
            group: 1,
            nchw_in: false,
            residual: false,
            act: act1,
        };
        let dw = Case {
            n,
            c: m,
            h,
            w,
            m,
            k,
            s,
            p,
            group: m,
            nchw_in: false,
            residual: false,
            act: act2,
        };
        let x = rng.vec(n * h * w * c);
        let (w1, b1) = (rng.vec(m * c), rng.vec(m));
        let (w2, b2) = (rng.vec(m * k * k), rng.vec(m));
        let want = naive(&dw, &naive(&pw, &x, &w1, &b1, None), &w2, &b2, None);
        for threads in [1, 2] {
            for tiles in [true, false] {
                let first = workload(&pw, &w1, &b1, threads);
                let pair = pair_of(first, workload(&dw, &w2, &b2, threads), tiles);
                let mut y = vec![f32::NAN; want.len()];
                pair.run(&x, None, &mut y).unwrap();
                close(
                    &format!("pair case {ci} threads {threads} tiles {tiles}"),
                    &y,
                    &want,
                );
            }
        }
    }
    // Projections: n, c, h, w, output channels, window, stride, pads, activations, residual.
    // 90 rows of 40×37 floats: six bands of 16 rows per image; 3×300 floats a row:
    // bands of one row (a row larger than the strip).
    #[rustfmt::skip]
    let cases = [
        (1, 37, 90, 40, 19, 3, 1, 1, clip, Activation::None, true),
        (2, 24, 61, 33, 8, 3, 2, 1, Activation::Sigmoid, clip, false),
        (1, 9, 1, 1, 5, 3, 1, 1, Activation::Relu, Activation::Sigmoid, true),
        (2, 300, 3, 100, 17, 5, 1, 2, clip, Activation::None, true),
        (1, 33, 13, 7, 24, 5, 1, 2, Activation::HardSwish, Activation::None, true),
    ];
    for (ci, &(n, c, h, w, m, k, s, p, act1, act2, residual)) in cases.iter().enumerate() {
        let dw = Case {
            n,
            c,
            h,
            w,
            m: c,
            k,
            s,
            p,
            group: c,
            nchw_in: false,
            residual: false,
            act: act1,
        };
        let (oh, ow) = dw.out();
        let pw = Case {
            n,
            c,
            h: oh,
            w: ow,
            m,
            k: 1,
            s: 1,
            p: 0,
            group: 1,
            nchw_in: false,
            residual,
            act: act2,
        };
        let x = rng.vec(n * h * w * c);
        let (w1, b1) = (rng.vec(c * k * k), rng.vec(c));
        let (w2, b2) = (rng.vec(m * c), rng.vec(m));
        let r = residual.then(|| rng.vec(n * oh * ow * m));
        let mid = naive(&dw, &x, &w1, &b1, None);
        let want = naive(&pw, &mid, &w2, &b2, r.as_deref());
        for threads in [1, 2] {
            for tiles in [true, false] {
                let first = workload(&dw, &w1, &b1, threads);
                let pair = pair_of(first, workload(&pw, &w2, &b2, threads), tiles);
                let mut y = vec![f32::NAN; want.len()];
                pair.run(&x, r.as_deref(), &mut y).unwrap();
                close(
                    &format!("projection case {ci} threads {threads} tiles {tiles}"),
                    &y,
                    &want,
                );
                // The residual is taken exactly when the projection has one.
                let other = if residual { None } else { Some(&y[..]) };
                let mut z = vec![0.0; want.len()];
                assert!(pair.run(&x, other, &mut z).is_err());
            }
        }
    }
    // Not a pointwise convolution and a depthwise one reading it: refused.
    let a = Case {
        n: 1,
        c: 4,
        h: 5,
        w: 5,
        m: 4,
        k: 3,
        s: 1,
        p: 1,
        group: 4,
        nchw_in: false,
        residual: false,
        act: clip,
    };
    let (wa, ba) = (rng.vec(4 * 9), rng.vec(4));
    let io = Io {
        layer: "pair".into(),
        inputs: Vec::new(),
        outputs: Vec::new(),
    };
    assert!(
        NhwcPairWorkload::new(io, workload(&a, &wa, &ba, 1), workload(&a, &wa, &ba, 1)).is_err()
    );
}

/// Every path of every kind (the AVX2 tiles where they run, the SGEMM and im2col
/// fallbacks, the depthwise kernel and its compiled portable body) against the ONNX
/// definition: odd channel counts (tails of 32, 8 and 1), sizes of 1, padding, strides,
/// batches, residuals, and activations computed outside the GEMM kernels (Sigmoid; SiLU,
/// hard swish and hard sigmoid in the depthwise rows' registers).
#[test]
fn every_path_matches_the_definition() {
    let clip = Activation::Clip { min: 0.0, max: 6.0 };
    #[rustfmt::skip]
    let cases = [
        // n, c, h, w, m, k, s, p, group, NCHW input, residual, activation
        Case { n: 2, c: 17, h: 5, w: 7, m: 24, k: 1, s: 1, p: 0, group: 1, nchw_in: false, residual: false, act: clip },
        Case { n: 1, c: 33, h: 1, w: 1, m: 7, k: 1, s: 1, p: 0, group: 1, nchw_in: false, residual: true, act: Activation::Relu },
        Case { n: 1, c: 300, h: 7, w: 7, m: 40, k: 1, s: 1, p: 0, group: 1, nchw_in: false, residual: false, act: Activation::Sigmoid },
        // Pointwise on the AVX-512 tiles: one channel in or out, 16 ± 1 and 32 ± 1 (one or
        // two 16-lane columns, masked tails), 113 pixels (tiles of twelve rows and fewer),
        // a K over one block, a single pixel.
        Case { n: 1, c: 1, h: 1, w: 7, m: 3, k: 1, s: 1, p: 0, group: 1, nchw_in: false, residual: false, act: clip },
        Case { n: 1, c: 32, h: 1, w: 113, m: 16, k: 1, s: 1, p: 0, group: 1, nchw_in: false, residual: true, act: clip },
        Case { n: 1, c: 16, h: 13, w: 1, m: 33, k: 1, s: 1, p: 0, group: 1, nchw_in: false, residual: false, act: Activation::Relu },
        Case { n: 2, c: 31, h: 3, w: 5, m: 17, k: 1, s: 1, p: 0, group: 1, nchw_in: false, residual: false, act: Activation::None },
        Case { n: 1, c: 17, h: 7, w: 7, m: 1, k: 1, s: 1, p: 0, group: 1, nchw_in: false, residual: true, act: Activation::Sigmoid },
        Case { n: 1, c: 3, h: 11, w: 9, m: 31, k: 1, s: 1, p: 0, group: 1, nchw_in: false, residual: false, act: clip },
        Case { n: 1, c: 33, h: 1, w: 1, m: 32, k: 1, s: 1, p: 0, group: 1, nchw_in: false, residual: false, act: clip },
        Case { n: 1, c: 263, h: 4, w: 5, m: 97, k: 1, s: 1, p: 0, group: 1, nchw_in: false, residual: true, act: Activation::Relu },
        // Weights past WIDE_TILES_MAX_WEIGHTS: the SGEMM.
        Case { n: 1, c: 300, h: 2, w: 3, m: 260, k: 1, s: 1, p: 0, group: 1, nchw_in: false, residual: false, act: clip },
        // Deep enough for split halves, 24 columns: the 3×24 tile reads the upper half.
        Case { n: 1, c: 130, h: 5, w: 4, m: 24, k: 1, s: 1, p: 0, group: 1, nchw_in: false, residual: true, act: clip },
        Case { n: 1, c: 3, h: 9, w: 11, m: 19, k: 3, s: 2, p: 1, group: 1, nchw_in: true, residual: false, act: clip },
        Case { n: 2, c: 3, h: 1, w: 1, m: 8, k: 3, s: 2, p: 1, group: 1, nchw_in: true, residual: true, act: Activation::None },
        Case { n: 1, c: 2, h: 6, w: 5, m: 33, k: 5, s: 1, p: 2, group: 1, nchw_in: true, residual: false, act: Activation::Sigmoid },
        // A MobileNet's and a ResNet's first layers (blocks of 32 and 16 output channels).
        Case { n: 1, c: 3, h: 32, w: 29, m: 32, k: 3, s: 2, p: 1, group: 1, nchw_in: true, residual: false, act: clip },
        Case { n: 2, c: 3, h: 17, w: 40, m: 16, k: 7, s: 2, p: 3, group: 1, nchw_in: true, residual: true, act: Activation::Relu },
        Case { n: 1, c: 4, h: 10, w: 33, m: 48, k: 3, s: 1, p: 1, group: 1, nchw_in: true, residual: false, act: Activation::Sigmoid },
        Case { n: 1, c: 1, h: 3, w: 70, m: 1, k: 3, s: 1, p: 0, group: 1, nchw_in: true, residual: true, act: clip },
        Case { n: 1, c: 37, h: 6, w: 40, m: 37, k: 3, s: 1, p: 1, group: 37, nchw_in: false, residual: true, act: clip },
        Case { n: 2, c: 12, h: 9, w: 9, m: 12, k: 3, s: 2, p: 1, group: 12, nchw_in: false, residual: false, act: Activation::Sigmoid },
        Case { n: 1, c: 5, h: 1, w: 1, m: 5, k: 3, s: 1, p: 1, group: 5, nchw_in: false, residual: false, act: Activation::Relu },
        Case { n: 1, c: 48, h: 4, w: 33, m: 48, k: 5, s: 1, p: 2, group: 48, nchw_in: false, residual: false, act: clip },
        // Depthwise with the activations applied in registers (SiLU, hard swish, hard
        // sigmoid): EfficientNet's 112×112 plane, MobileNetV3's 5×5 stride 2, one pixel,
        // one channel, channel tails of 16 and 8.
        Case { n: 1, c: 33, h: 112, w: 112, m: 33, k: 3, s: 1, p: 1, group: 33, nchw_in: false, residual: false, act: Activation::Silu },
        Case { n: 2, c: 17, h: 7, w: 13, m: 17, k: 5, s: 2, p: 2, group: 17, nchw_in: false, residual: true, act: Activation::HardSwish },
        Case { n: 1, c: 16, h: 1, w: 1, m: 16, k: 3, s: 1, p: 1, group: 16, nchw_in: false, residual: false, act: Activation::Silu },
        Case { n: 1, c: 3, h: 7, w: 13, m: 3, k: 3, s: 2, p: 1, group: 3, nchw_in: false, residual: false, act: Activation::HardSwish },
        Case { n: 1, c: 72, h: 28, w: 29, m: 72, k: 5, s: 1, p: 2, group: 72, nchw_in: false, residual: false, act: Activation::HardSigmoid { alpha: 0.2, beta: 0.5 } },
        // Taps of at least 4096 floats: each block of channels along the row first,
        // the last channels (an 8-block and 7 single ones, or one 8-block) pixel by pixel.
        Case { n: 2, c: 463, h: 5, w: 6, m: 463, k: 3, s: 1, p: 1, group: 463, nchw_in: false, residual: true, act: clip },
        Case { n: 1, c: 520, h: 7, w: 7, m: 520, k: 3, s: 2, p: 1, group: 520, nchw_in: false, residual: false, act: Activation::Relu },
        // A ResNet's last stage: windows and strides over channels-last 7×7 planes (the
        // column split on two threads), with a residual, and a 1×1 stride-2 shortcut.
        Case { n: 1, c: 20, h: 7, w: 7, m: 70, k: 3, s: 1, p: 1, group: 1, nchw_in: false, residual: true, act: Activation::Relu },
        Case { n: 2, c: 9, h: 13, w: 14, m: 33, k: 3, s: 2, p: 1, group: 1, nchw_in: false, residual: false, act: Activation::Sigmoid },
        Case { n: 1, c: 24, h: 13, w: 13, m: 40, k: 1, s: 2, p: 0, group: 1, nchw_in: false, residual: false, act: Activation::None },
        // Winograd F(2×2, 3×3) on small planes (with the AVX2 tiles): odd sides (partial
        // tiles), a batch, a last panel of one column, K over one block, 1×1.
        Case { n: 2, c: 70, h: 7, w: 7, m: 65, k: 3, s: 1, p: 1, group: 1, nchw_in: false, residual: true, act: Activation::Relu },
        Case { n: 1, c: 300, h: 5, w: 3, m: 64, k: 3, s: 1, p: 1, group: 1, nchw_in: false, residual: false, act: Activation::Sigmoid },
        Case { n: 1, c: 64, h: 1, w: 1, m: 96, k: 3, s: 1, p: 1, group: 1, nchw_in: false, residual: true, act: clip },
        Case { n: 1, c: 64, h: 8, w: 8, m: 64, k: 3, s: 1, p: 1, group: 1, nchw_in: false, residual: false, act: Activation::None },
    ];
    let mut rng = Rng(11);
    for (ci, t) in cases.iter().enumerate() {
        let winograd = |threads: usize| {
            (t.k, t.s, t.p, t.group) == (3, 1, 1, 1)
                && t.c >= 64
                && t.m >= 64
                && t.h * t.w <= 64
                && threads == 1
                && simd::strided_tiles()
        };
        let x = rng.vec(t.n * t.c * t.h * t.w);
        let wt = rng.vec(t.m * (t.c / t.group) * t.k * t.k);
        let b = rng.vec(t.m);
        let (oh, ow) = t.out();
        let r = rng.vec(t.n * oh * ow * t.m);
        let r = t.residual.then_some(&r[..]);
        let want = naive(t, &x, &wt, &b, r);
        for threads in [1, 2] {
            let mut wl = workload(t, &wt, &b, threads);
            let want_kind = winograd(threads);
            assert_eq!(
                matches!(*wl.kind, Kind::Winograd(_)),
                want_kind,
                "case {ci}"
            );
            // A region's first layer: output channels in lanes, with AVX-512.
            let lanes = t.nchw_in && t.c <= 4 && simd::has_avx512();
            assert_eq!(matches!(*wl.kind, Kind::Lanes(_)), lanes, "case {ci}");
            // A pointwise convolution on AVX-512 takes the AVX-512 in-place tiles.
            let pointwise = (t.k, t.s, t.p, t.group, t.nchw_in) == (1, 1, 0, 1, false);
            let wide = pointwise && simd::has_avx512() && t.c * t.m <= WIDE_TILES_MAX_WEIGHTS;
            assert_eq!(wl.wide_tiles, wide, "case {ci}");
            assert_eq!(
                wl.in_place_tiles,
                wide || simd::strided_tiles(),
                "case {ci}"
            );
            for tiles in [wl.in_place_tiles, false] {
                wl = wl.with_tiles(tiles);
                let mut y = vec![f32::NAN; want.len()];
                wl.compute(&x, r, &mut y).unwrap();
                close(
                    &format!("case {ci} threads {threads} tiles {tiles}"),
                    &y,
                    &want,
                );
            }
            if let Kind::Winograd(plan) = &*wl.kind {
                // Its steps split between two threads (taken on one thread only).
                let th = Threads::new(2).unwrap();
                let mut y = vec![f32::NAN; want.len()];
                plan.run(&th, &wl.geo, t.n, &x, &wl.bias, t.act, r, &mut y)
                    .unwrap();
                close(&format!("case {ci} Winograd on two threads"), &y, &want);
            }
            if let Kind::Depthwise(taps) = &*wl.kind {
                // The compiled body, whatever the CPU.
                let g = &wl.geo;
                let (row, img) = (g.ow * t.c, g.h * g.w * t.c);
                let mut y = vec![f32::NAN; want.len()];
                for (i, out) in y.chunks_exact_mut(row).enumerate() {
                    let bi = i / g.oh;
                    let job = DwRow {
                        geo: g,
                        c: t.c,
                        x: &x[bi * img..(bi + 1) * img],
                        taps,
                        bias: &b,
                        act: t.act.kernel_part(),
                    };
                    let res = r.map(|r| &r[i * row..(i + 1) * row]);
                    assert!(dw_row_body(&job, i % g.oh, res, out));
                }
                if !t.act.in_kernel() {
                    y.iter_mut()
                        .for_each(|v| *v = crate::math::apply(t.act, *v));
                }
                close(&format!("case {ci} compiled depthwise body"), &y, &want);
            }
        }
    }
}

/// Pointwise convolutions whose sigmoid or swish the tiles apply as they store (AVX-512;
/// elsewhere the pass after the tiles still runs): bit-equal to the tiles without the
/// activation followed by the compiled pass (the path before), and close to the
/// definition, for channel counts 1 to 96 in and out, 1 to 12544 pixels, with and without
/// a residual, on one and two threads.
#[test]
fn pointwise_activations_in_the_tiles_match_the_pass() {
    let acts = [
        Activation::Silu,
        Activation::HardSwish,
        Activation::Sigmoid,
        Activation::HardSigmoid {
            alpha: 0.2,
            beta: 0.5,
        },
    ];
    // (input channels, output channels, plane height, width)
    let shapes = [
        (1, 3, 1, 1),
        (3, 16, 1, 7),
        (16, 17, 1, 113),
        (17, 33, 7, 1),
        (33, 96, 1, 113),
        (96, 1, 1, 7),
        (16, 96, 112, 112),
        (96, 16, 1, 1),
    ];
    let mut rng = Rng(5);
    for (si, &(c, m, h, w)) in shapes.iter().enumerate() {
        for (ai, residual) in [(si % 4, false), ((si + 1) % 4, true)] {
            let act = acts[ai];
            let t = Case {
                n: 1,
                c,
                h,
                w,
                m,
                k: 1,
                s: 1,
                p: 0,
                group: 1,
                nchw_in: false,
                residual,
                act,
            };
            let x = rng.vec(c * h * w);
            let wt: Vec<f32> = rng.vec(m * c).iter().map(|v| v * 4.0).collect();
            let b = rng.vec(m);
            let r = rng.vec(h * w * m);
            let r = residual.then_some(&r[..]);
            let want = naive(&t, &x, &wt, &b, r);
            let plain_case = Case {
                act: Activation::None,
                ..t
            };
            for threads in [1, 2] {
                let wl = workload(&t, &wt, &b, threads);
                let plain = workload(&plain_case, &wt, &b, threads);
                assert_eq!(wl.wide_tiles, simd::has_avx512(), "shape {si}");
                let mut y = vec![f32::NAN; want.len()];
                wl.compute(&x, r, &mut y).unwrap();
                let mut before = vec![f32::NAN; want.len()];
                plain.compute(&x, r, &mut before).unwrap();
                simd::unary_in_place(act, &mut before);
                let what = format!("shape {si} {act:?} residual {residual} threads {threads}");
                for (i, (g, p)) in y.iter().zip(&before).enumerate() {
                    assert_eq!(g.to_bits(), p.to_bits(), "{what}: element {i}: {g} vs {p}");
                }
                close(&what, &y, &want);
            }
        }
    }
}

/// Pointwise convolutions whose weights the AVX-512 tiles take two packed panels at a time
/// (33 or more output channels, at most `PAIRS_MAX_DEPTH` input channels), against the
/// definition and against the SGEMM path: one to 80 input channels and one past the limit,
/// 33 to 120 outputs (a last panel alone, or a pair with a masked third or fourth vector),
/// one pixel, 13, a plane of 61 (a row block and one more), MobileNetV3's 112×112 16→64
/// layer; with a residual and every kind of fused activation, on one, two and three
/// threads.
#[test]
fn pointwise_panel_pairs_match_the_definition() {
    let acts = [
        Activation::Relu,
        Activation::Clip { min: 0.0, max: 6.0 },
        Activation::None,
        Activation::HardSwish,
        Activation::Silu,
        Activation::LeakyRelu { alpha: 0.1 },
        Activation::Sigmoid,
    ];
    // (input channels, output channels, plane height, width, residual)
    let shapes = [
        (16, 64, 112, 112, false),
        (16, 16, 13, 1, true),
        (1, 33, 1, 1, false),
        (3, 40, 1, 13, true),
        (17, 49, 61, 1, false),
        (24, 72, 7, 9, true),
        (40, 120, 5, 13, false),
        (64, 97, 3, 5, true),
        (80, 200, 2, 7, false),
        (81, 64, 2, 7, false),
        (16, 96, 1, 61, true),
    ];
    let mut rng = Rng(23);
    for (si, &(c, m, h, w, residual)) in shapes.iter().enumerate() {
        let act = acts[si % acts.len()];
        let t = Case {
            n: 1,
            c,
            h,
            w,
            m,
            k: 1,
            s: 1,
            p: 0,
            group: 1,
            nchw_in: false,
            residual,
            act,
        };
        let x = rng.vec(c * h * w);
        let wt = rng.vec(m * c);
        let b = rng.vec(m);
        let r = rng.vec(h * w * m);
        let r = residual.then_some(&r[..]);
        let want = naive(&t, &x, &wt, &b, r);
        for threads in [1, 2, 3] {
            let wl = workload(&t, &wt, &b, threads);
            assert_eq!(wl.wide_tiles, simd::has_avx512(), "shape {si}");
            let mut y = vec![f32::NAN; want.len()];
            wl.compute(&x, r, &mut y).unwrap();
            let what = format!("shape {si} {act:?} residual {residual} threads {threads}");
            close(&what, &y, &want);
            let wl = wl.with_tiles(false);
            let mut sgemm = vec![f32::NAN; want.len()];
            wl.compute(&x, r, &mut sgemm).unwrap();
            close(&format!("{what} (the SGEMM)"), &y, &sgemm);
        }
    }
}
