//! Every convolution path of CpuAcc against CpuRef: geometries, groups, depthwise, Winograd,
//! strided phases, first layers, channel lanes and pointwise direct paths.

use super::*;

pub(super) fn conv_op(
    k: &[usize],
    s: &[usize],
    d: &[usize],
    p: &[usize],
    group: usize,
    auto_pad: AutoPad,
) -> Op {
    Op::Conv(ConvDesc {
        window: Window {
            kernel: k.to_vec(),
            strides: s.to_vec(),
            dilations: d.to_vec(),
            pads: p.to_vec(),
            auto_pad,
        },
        group,
    })
}

#[test]
fn conv_geometries_groups_and_depthwise() {
    let mut r = Rng(3);
    let mut tested = 0;
    while tested < 60 {
        let n = r.pick(&[1, 2]);
        let c = r.pick(&[1, 3, 7, 17]);
        let group = r.pick(&[1, 1, c, if c == 3 { 3 } else { 1 }]);
        let mult = r.pick(&[1, 1, 2]);
        let m = if group == c {
            c * mult
        } else {
            r.pick(&[1, 3, 17, 63]) * group
        };
        let (h, w) = (r.pick(&[1, 3, 7, 17]), r.pick(&[1, 3, 7, 17, 63]));
        let (kh, kw) = (r.pick(&[1, 3, 5]), r.pick(&[1, 3]));
        let (sh, sw) = (r.pick(&[1, 2, 3]), r.pick(&[1, 2, 3]));
        let (dh, dw) = (r.pick(&[1, 1, 2]), r.pick(&[1, 2]));
        let pads = [
            r.pick(&[0, 1, 2]),
            r.pick(&[0, 1]),
            r.pick(&[0, 1, 2]),
            r.pick(&[0, 1]),
        ];
        let auto = r.pick(&[
            AutoPad::NotSet,
            AutoPad::NotSet,
            AutoPad::SameUpper,
            AutoPad::Valid,
        ]);
        let op = conv_op(&[kh, kw], &[sh, sw], &[dh, dw], &pads, group, auto);
        let x = r.tensor(&[n, c, h, w], 1.0);
        let wt = r.tensor(&[m, c / group, kh, kw], 1.0);
        let b = r.tensor(&[m], 1.0);
        let infos = [x.info(), wt.info()];
        if op.infer(&infos).is_err() {
            continue;
        }
        tested += 1;
        let what = format!("conv x{:?} w{:?} {op:?}", x.shape(), wt.shape());
        let k = (c / group * kh * kw) as f64;
        check(
            &what,
            &op,
            &[&x, &wt, &b],
            &[&[false, true, true], &[false, false, false]],
            1e-4,
            1e-4 * k.sqrt(),
        );
        check(
            &what,
            &op,
            &[&x, &wt],
            &[&[false, true]],
            1e-4,
            1e-4 * k.sqrt(),
        );
    }
    // 1-D convolution and a larger image with 257 output columns.
    let op = conv_op(&[3], &[2], &[1], &[1, 1], 1, AutoPad::NotSet);
    let (x, w) = (r.tensor(&[2, 7, 63], 1.0), r.tensor(&[17, 7, 3], 1.0));
    check("conv1d", &op, &[&x, &w], &[&[false, true]], 1e-4, 1e-3);
    let op = conv_op(&[3, 3], &[1, 1], &[1, 1], &[1, 1, 1, 1], 1, AutoPad::NotSet);
    let (x, w) = (
        r.tensor(&[1, 17, 5, 257], 1.0),
        r.tensor(&[63, 17, 3, 3], 1.0),
    );
    check("conv 5x257", &op, &[&x, &w], &[&[false, true]], 1e-4, 2e-3);
    let op = conv_op(&[1, 1], &[1, 1], &[1, 1], &[0, 0, 0, 0], 1, AutoPad::NotSet);
    let (x, w) = (
        r.tensor(&[1, 257, 7, 9], 1.0),
        r.tensor(&[63, 257, 1, 1], 1.0),
    );
    check("pointwise", &op, &[&x, &w], &[&[false, true]], 1e-4, 2e-3);
}

/// 3×3 stride-1 convolutions large enough for CpuAcc's Winograd F(4×4, 3×3) path (at least
/// 128 channels each way, output at least 8×8): odd sizes (partial border tiles), batches of 1
/// and 2, symmetric and asymmetric pads, with and without bias, 1 and 2 threads. Weights must
/// be constant for the path (they are transformed at load); with run-time weights the same
/// convolutions take the im2col path. Tolerance: |acc − ref| <= 2e-3 + 1e-4·|ref| (outputs
/// reach ~±40 here; the Winograd path's measured error is below 1e-5 × (1 + max |ref|), see
/// `winograd.rs`).
#[test]
fn winograd_sized_convolutions_against_ref() {
    let mut r = Rng(29);
    for (n, c, m, h, w, pads, bias) in [
        (1, 128, 128, 17, 17, [1, 1, 1, 1], true),
        (2, 128, 136, 9, 11, [0, 1, 2, 1], false),
        (1, 130, 128, 10, 21, [0, 0, 0, 0], true),
        (1, 128, 128, 63, 8, [2, 0, 1, 2], true),
    ] {
        let op = conv_op(&[3, 3], &[1, 1], &[1, 1], &pads, 1, AutoPad::NotSet);
        let x = r.tensor(&[n, c, h, w], 1.0);
        let wt = r.tensor(&[m, c, 3, 3], 0.3);
        let b = r.tensor(&[m], 1.0);
        let what = format!("winograd-sized conv n{n} c{c} m{m} {h}x{w} pads {pads:?}");
        if bias {
            let consts: &[&[bool]] = &[&[false, true, true], &[false, false, false]];
            check(&what, &op, &[&x, &wt, &b], consts, 1e-4, 2e-3);
        } else {
            let consts: &[&[bool]] = &[&[false, true], &[false, false]];
            check(&what, &op, &[&x, &wt], consts, 1e-4, 2e-3);
        }
    }
}

/// Strided windows that read only some of their input's stride phases (a 1×1 stride-2
/// shortcut reads one of four; 3×1 stride 3 dilation 2 reads every row phase but one column
/// phase), some with the phases as wide as the output (the product written straight into
/// it), against CpuRef.
#[test]
fn strided_windows_reading_some_phases_against_ref() {
    let mut r = Rng(31);
    // (c, m, h, w, kernel, stride, dilation, pads)
    for (c, m, h, w, k, s, d, pads) in [
        (17, 63, 28, 28, [1, 1], [2, 2], [1, 1], [0, 0, 0, 0]),
        (7, 17, 15, 13, [1, 1], [2, 2], [1, 1], [0, 0, 0, 0]),
        (7, 17, 15, 13, [1, 1], [2, 2], [1, 1], [1, 0, 1, 0]),
        (3, 17, 17, 9, [1, 1], [3, 2], [1, 1], [0, 1, 0, 1]),
        (5, 7, 23, 17, [3, 1], [3, 2], [2, 1], [1, 0, 2, 0]),
        (5, 7, 11, 19, [1, 3], [2, 3], [1, 2], [0, 2, 0, 1]),
    ] {
        let op = conv_op(&k, &s, &d, &pads, 1, AutoPad::NotSet);
        let x = r.tensor(&[1, c, h, w], 1.0);
        let wt = r.tensor(&[m, c, k[0], k[1]], 1.0);
        let b = r.tensor(&[m], 1.0);
        let atol = 1e-4 * ((c * k[0] * k[1]) as f64).sqrt();
        check(
            &format!("conv c{c} m{m} {h}x{w} k{k:?} s{s:?} d{d:?} pads {pads:?}"),
            &op,
            &[&x, &wt, &b],
            &[&[false, true, true]],
            1e-4,
            atol,
        );
    }
}

/// Windowed convolutions from at most 4 channels with an im2col depth of at most 160 (a
/// network's first layer), which with AVX-512 take the channel-lanes path (one thread,
/// constant weights, horizontal stride 1 or 2; blocks of 32 output channels, or 16 when there
/// are at most 16) or the direct path (tiles reading the input's phases in place: 2 threads,
/// other strides, and weights given at run time): 7×7, 5×5, 3×3 and strided 1×1 windows, strides,
/// dilation, asymmetric pads, output channels that are not a multiple of 12 or 16, batches,
/// with and without bias; and two just past the limits.
#[test]
fn first_layer_convolutions_against_ref() {
    let mut r = Rng(31);
    for (n, c, m, h, w, k, s, d, pads, bias) in [
        (1, 3, 64, 37, 41, 7, 2, 1, [3, 3, 3, 3], true),
        (1, 3, 33, 23, 47, 7, 3, 1, [3, 2, 1, 3], true),
        (1, 3, 12, 20, 50, 3, 2, 1, [1, 1, 1, 1], true),
        (2, 3, 32, 29, 30, 3, 2, 1, [1, 1, 1, 1], true),
        (1, 3, 20, 17, 63, 3, 1, 2, [2, 1, 0, 2], false),
        (1, 4, 24, 13, 11, 5, 1, 1, [2, 2, 2, 2], true),
        (1, 1, 80, 9, 5, 5, 3, 1, [0, 2, 1, 0], true),
        (1, 3, 17, 1, 1, 3, 1, 1, [1, 1, 1, 1], false),
        (1, 2, 40, 19, 19, 1, 2, 1, [0, 0, 0, 0], true),
        // Past the limits: 5 channels; 4 channels under a 7×7 window (K = 196).
        (1, 5, 16, 9, 9, 3, 1, 1, [1, 1, 1, 1], true),
        (1, 4, 16, 15, 15, 7, 2, 1, [3, 3, 3, 3], true),
    ] {
        let op = conv_op(&[k, k], &[s, s], &[d, d], &pads, 1, AutoPad::NotSet);
        let x = r.tensor(&[n, c, h, w], 1.0);
        let wt = r.tensor(&[m, c, k, k], 0.3);
        let b = r.tensor(&[m], 1.0);
        let what = format!("first-layer conv n{n} c{c} m{m} {h}x{w} k{k} s{s} d{d} pads {pads:?}");
        if bias {
            let consts: &[&[bool]] = &[&[false, true, true], &[false, false, false]];
            check(&what, &op, &[&x, &wt, &b], consts, 1e-4, 1e-4);
        } else {
            let consts: &[&[bool]] = &[&[false, true], &[false, false]];
            check(&what, &op, &[&x, &wt], consts, 1e-4, 1e-4);
        }
    }
}

/// Windowed stride-2 convolutions from more than 4 channels whose output rows fill 14-pixel
/// tiles, which take the channel-lanes path with AVX-512: windows deeper than one pass (the
/// passes add up), bands of output rows (56 rows), 3×3 and 5×5 windows, output channels
/// that are not a multiple of 32, with and without bias, on 1 and 2 threads (32 or 16
/// channels per block), constant weights (the lanes) and run-time ones (the GEMM).
#[test]
fn strided_convolutions_against_ref() {
    let mut r = Rng(43);
    // (c, m, input side, kernel, bias)
    for (c, m, hw, k, bias) in [
        (8, 40, 112, 3, true),
        (20, 33, 28, 3, false),
        (40, 64, 56, 3, true),
        (6, 48, 28, 5, true),
    ] {
        let p = k / 2;
        let op = conv_op(&[k, k], &[2, 2], &[1, 1], &[p, p, p, p], 1, AutoPad::NotSet);
        let x = r.tensor(&[1, c, hw, hw], 1.0);
        let wt = r.tensor(&[m, c, k, k], 0.3);
        let b = r.tensor(&[m], 1.0);
        let what = format!("strided conv c{c} m{m} {hw}x{hw} k{k}");
        let tol = 1e-4 * ((c * k * k) as f64).sqrt();
        if bias {
            let consts: &[&[bool]] = &[&[false, true, true], &[false, false, false]];
            check(&what, &op, &[&x, &wt, &b], consts, 1e-4, tol);
        } else {
            let consts: &[&[bool]] = &[&[false, true], &[false, false]];
            check(&what, &op, &[&x, &wt], consts, 1e-4, tol);
        }
    }
}

/// Pointwise convolutions with at most 32 output channels and at most 256 input channels,
/// which take the direct path with AVX-512 (B read in place, threads splitting a weights
/// panel's rows): output channels around the panel height (1, 5, 12, 13, 16, 24, 32),
/// planes of 1 pixel to more than a tile, batches, with and without bias; and two just
/// past the limits (33 outputs, 257 inputs).
#[test]
fn pointwise_few_output_channels_against_ref() {
    let mut r = Rng(41);
    // (n, c, m, h, w, bias)
    for (n, c, m, h, w, bias) in [
        (1, 32, 16, 17, 19, true),
        (1, 144, 24, 9, 9, true),
        (2, 7, 13, 5, 11, false),
        (1, 256, 32, 3, 37, true),
        (1, 1, 1, 1, 1, true),
        (1, 3, 5, 1, 33, false),
        (1, 96, 12, 8, 8, true),
        // Past the limits.
        (1, 16, 33, 7, 7, true),
        (1, 257, 8, 5, 5, true),
    ] {
        let op = conv_op(&[1, 1], &[1, 1], &[1, 1], &[0, 0, 0, 0], 1, AutoPad::NotSet);
        let x = r.tensor(&[n, c, h, w], 1.0);
        let wt = r.tensor(&[m, c, 1, 1], 0.3);
        let b = r.tensor(&[m], 1.0);
        let what = format!("pointwise conv n{n} c{c} m{m} {h}x{w}");
        let atol = 1e-4 * (c as f64).sqrt();
        if bias {
            let consts: &[&[bool]] = &[&[false, true, true], &[false, false, false]];
            check(&what, &op, &[&x, &wt, &b], consts, 1e-4, atol);
        } else {
            let consts: &[&[bool]] = &[&[false, true], &[false, false]];
            check(&what, &op, &[&x, &wt], consts, 1e-4, atol);
        }
    }
}

/// Depthwise convolutions (group = channels) over the plane sizes that take different paths:
/// one-run stride-1 planes (narrower than 64), row-by-row planes, 1-wide and 1-high planes,
/// every stride, dilation, kernel size and asymmetric padding.
#[test]
fn depthwise_geometries_against_ref() {
    let mut r = Rng(11);
    let mut tested = 0;
    while tested < 80 {
        let n = r.pick(&[1, 2]);
        let c = r.pick(&[2, 3, 17]);
        let h = r.pick(&[1, 2, 7, 14, 17]);
        let w = r.pick(&[1, 3, 7, 14, 63, 64, 65, 113]);
        let k = r.pick(&[1, 3, 3, 5, 7]);
        let kh = r.pick(&[k, 1, 3]);
        let (sh, sw) = (r.pick(&[1, 1, 2, 3]), r.pick(&[1, 1, 2, 3]));
        let (dh, dw) = (r.pick(&[1, 1, 2]), r.pick(&[1, 1, 2]));
        let pads = [
            r.pick(&[0, 1, 2, 3]),
            r.pick(&[0, 1, 3]),
            r.pick(&[0, 1, 2]),
            r.pick(&[0, 1, 2, 4]),
        ];
        let op = conv_op(&[kh, k], &[sh, sw], &[dh, dw], &pads, c, AutoPad::NotSet);
        let x = r.tensor(&[n, c, h, w], 1.0);
        let wt = r.tensor(&[c, 1, kh, k], 1.0);
        let b = r.tensor(&[c], 1.0);
        if op.infer(&[x.info(), wt.info()]).is_err() {
            continue;
        }
        tested += 1;
        let what = format!("depthwise x{:?} w{:?} {op:?}", x.shape(), wt.shape());
        let tol = 1e-4 * ((kh * k) as f64).sqrt();
        check(
            &what,
            &op,
            &[&x, &wt, &b],
            &[&[false, true, true], &[false, false, false]],
            1e-4,
            tol,
        );
        check(&what, &op, &[&x, &wt], &[&[false, true]], 1e-4, tol);
    }
    // MobileNetV2's shapes: stride 1 and 2 on 112-wide planes, 7×7 planes, many channels.
    for (c, hw, s) in [(32, 112, 1), (24, 112, 2), (96, 7, 1), (40, 14, 2)] {
        let op = conv_op(&[3, 3], &[s, s], &[1, 1], &[1, 1, 1, 1], c, AutoPad::NotSet);
        let x = r.tensor(&[1, c, hw, hw], 1.0);
        let wt = r.tensor(&[c, 1, 3, 3], 1.0);
        let b = r.tensor(&[c], 1.0);
        check(
            &format!("depthwise c{c} {hw}x{hw} s{s}"),
            &op,
            &[&x, &wt, &b],
            &[&[false, true, true]],
            1e-4,
            3e-4,
        );
    }
}
