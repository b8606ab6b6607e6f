//! CpuAcc's ConvTranspose and Resize against CpuRef (the oracle) on random inputs: odd
//! channel and spatial sizes, strides, pads, dilations, groups, output_padding, output_shape
//! and auto_pad, 1-D and 2-D; Resize up and down by integer and fractional scales and by
//! sizes, every nearest mode and coordinate transformation; and the refusals, with their
//! reasons. 1 and 2 threads, constant and run-time weights.
//!
//! Tolerances (|acc - ref| <= atol + rtol·|ref|): ConvTranspose rtol 1e-4, atol 1e-4·sqrt(K)
//! (K the products summed into an output), Resize nearest exact, linear rtol 1e-5, atol 1e-6.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use support::{check, Rng};

use backplane_backend_api::{Backend, LayerDesc, Support};
use backplane_core::ops::{
    AutoPad, ConvTransposeDesc, CoordinateTransform, NearestMode, ResizeDesc, ResizeMode, Window,
};
use backplane_core::{Op, Tensor, TensorInfo};
use backplane_cpu_acc::CpuAccBackend;

/// A ConvTranspose desc.
fn ct(k: &[usize], s: &[usize], d: &[usize], p: &[usize], group: usize) -> ConvTransposeDesc {
    ConvTransposeDesc {
        window: Window {
            kernel: k.to_vec(),
            strides: s.to_vec(),
            dilations: d.to_vec(),
            pads: p.to_vec(),
            auto_pad: AutoPad::NotSet,
        },
        group,
        output_padding: vec![],
        output_shape: vec![],
    }
}

/// Check one ConvTranspose: input `x` dims, `m` output channels, with or without a bias,
/// weights and bias constant or run-time.
fn check_ct(what: &str, r: &mut Rng, desc: &ConvTransposeDesc, x: &[usize], m: usize, bias: bool) {
    let group = desc.group.max(1);
    let c = x[1];
    let mut wd = vec![c, m / group];
    wd.extend(&desc.window.kernel);
    let xt = r.tensor(x, 1.0);
    let wt = r.tensor(&wd, 1.0);
    let bt = r.tensor(&[m], 1.0);
    let taps: usize = desc.window.kernel.iter().product();
    let atol = 1e-4 * ((c / group * taps) as f64).sqrt();
    let op = Op::ConvTranspose(desc.clone());
    let what = format!("{what} x={x:?} w={wd:?} bias={bias} desc={desc:?}");
    if bias {
        check(
            &what,
            &op,
            &[&xt, &wt, &bt],
            &[&[false, true, true], &[false, false, false]],
            1e-4,
            atol,
        );
    } else {
        check(
            &what,
            &op,
            &[&xt, &wt],
            &[&[false, true], &[false, false]],
            1e-4,
            atol,
        );
    }
}

#[test]
fn conv_transpose_2d_strides_pads_dilations() {
    let mut r = Rng(11);
    for &(c, m, h, w) in &[(1, 1, 1, 1), (3, 7, 7, 3), (17, 3, 3, 7), (7, 17, 17, 17)] {
        for &s in &[1, 2, 3] {
            for &(k, d, p) in &[
                (1, 1, [0, 0, 0, 0]),
                (2, 1, [0, 0, 0, 0]),
                (3, 1, [1, 1, 1, 1]),
                (3, 2, [1, 0, 2, 1]),
                (4, 1, [1, 2, 1, 0]),
            ] {
                let desc = ct(&[k, k], &[s, s], &[d, d], &p, 1);
                // Pads larger than the full output are an error, not a case.
                let full = |n: usize| s * (n - 1) + (k - 1) * d + 1;
                if full(h) < p[0] + p[2] + 1 || full(w) < p[1] + p[3] + 1 {
                    continue;
                }
                check_ct("2-D", &mut r, &desc, &[1, c, h, w], m, s != 2);
            }
        }
    }
}

#[test]
fn conv_transpose_uneven_strides_and_dilations_batch_2() {
    let mut r = Rng(12);
    let desc = ct(&[3, 2], &[2, 3], &[2, 1], &[1, 0, 0, 1], 1);
    check_ct("uneven", &mut r, &desc, &[2, 3, 7, 5], 7, true);
    let desc = ct(&[4, 4], &[2, 2], &[1, 1], &[1, 1, 1, 1], 1);
    check_ct("k4s2p1", &mut r, &desc, &[2, 63, 7, 7], 17, true);
    check_ct("k4s2p1", &mut r, &desc, &[2, 17, 9, 11], 63, false);
}

#[test]
fn conv_transpose_groups_and_depthwise() {
    let mut r = Rng(13);
    // Grouped: 6 -> 9 channels in 3 groups; depthwise-style: group = channels.
    for &(c, m, g) in &[(6, 9, 3), (4, 2, 2), (7, 7, 7), (17, 17, 17), (3, 6, 3)] {
        for &s in &[1, 2, 3] {
            let desc = ct(&[3, 3], &[s, s], &[1, 1], &[1, 1, 1, 1], g);
            check_ct("grouped", &mut r, &desc, &[2, c, 7, 5], m, true);
            let desc = ct(&[2, 3], &[s, s], &[2, 1], &[0, 1, 0, 0], g);
            check_ct("grouped", &mut r, &desc, &[1, c, 3, 7], m, false);
        }
    }
}

#[test]
fn conv_transpose_output_padding_output_shape_and_auto_pad() {
    let mut r = Rng(14);
    // output_padding (must be smaller than stride or dilation).
    for &(s, op) in &[(2, [1, 1]), (3, [2, 1]), (3, [0, 2])] {
        let mut desc = ct(&[3, 3], &[s, s], &[1, 1], &[1, 1, 1, 1], 1);
        desc.output_padding = op.to_vec();
        check_ct("output_padding", &mut r, &desc, &[2, 3, 7, 5], 7, true);
    }
    // output_shape: smaller than the full output, equal, and larger (negative pads).
    for &shape in &[[13, 9], [15, 11], [16, 12], [17, 14]] {
        for auto_pad in [AutoPad::NotSet, AutoPad::SameUpper, AutoPad::SameLower] {
            let mut desc = ct(&[3, 3], &[2, 2], &[1, 1], &[], 1);
            desc.output_shape = shape.to_vec();
            desc.window.auto_pad = auto_pad;
            check_ct("output_shape", &mut r, &desc, &[1, 3, 7, 5], 3, true);
        }
    }
    // auto_pad alone: the output is input · stride.
    for auto_pad in [AutoPad::SameUpper, AutoPad::SameLower, AutoPad::Valid] {
        for &s in &[1, 2, 3] {
            let mut desc = ct(&[3, 4], &[s, s], &[1, 1], &[], 1);
            desc.window.auto_pad = auto_pad;
            check_ct("auto_pad", &mut r, &desc, &[1, 7, 5, 3], 3, false);
        }
    }
}

#[test]
fn conv_transpose_1d() {
    let mut r = Rng(15);
    for &(c, m, w) in &[(1, 1, 1), (3, 7, 17), (17, 3, 63), (63, 17, 7)] {
        for &s in &[1, 2, 3] {
            for &(k, d, p) in &[
                (1, 1, [0, 0]),
                (3, 1, [1, 1]),
                (4, 2, [2, 1]),
                (5, 1, [0, 3]),
            ] {
                let desc = ct(&[k], &[s], &[d], &p, 1);
                if s * (w - 1) + (k - 1) * d + 1 < p[0] + p[1] + 1 {
                    continue;
                }
                check_ct("1-D", &mut r, &desc, &[2, c, w], m, k != 3);
            }
        }
    }
    let mut desc = ct(&[3], &[2], &[1], &[1, 1], 3);
    desc.output_padding = vec![1];
    check_ct("1-D grouped", &mut r, &desc, &[1, 6, 17], 9, true);
}

/// The reason CpuAcc refuses `op` on inputs of `dims` (f32), or None when it claims it.
fn refusal(op: &Op, dims: &[&[usize]]) -> Option<String> {
    let inputs: Vec<TensorInfo> = dims
        .iter()
        .map(|d| Tensor::from_vec(d.to_vec(), vec![0.0f32; d.iter().product()]))
        .map(|t| t.unwrap().info().clone())
        .collect();
    let refs: Vec<&TensorInfo> = inputs.iter().collect();
    let outputs = op.infer(&refs).unwrap();
    let layer = LayerDesc {
        name: "refused".into(),
        op: op.clone(),
        constants: vec![None; inputs.len()],
        inputs,
        outputs,
    };
    match CpuAccBackend::with_threads(1)
        .layer_support()
        .is_layer_supported(&layer)
    {
        Support::Supported => None,
        other => Some(format!("{other:?}")),
    }
}

#[test]
fn conv_transpose_refuses_3d() {
    let op = Op::ConvTranspose(ct(&[2, 2, 2], &[], &[], &[], 1));
    let why = refusal(&op, &[&[1, 2, 3, 3, 3], &[2, 2, 2, 2, 2]]).unwrap();
    assert!(why.contains("not 3-D"), "{why}");
    // 2-D with a bias is claimed.
    let op = Op::ConvTranspose(ct(&[2, 2], &[], &[], &[], 1));
    assert_eq!(refusal(&op, &[&[1, 2, 3, 3], &[2, 2, 2, 2], &[2]]), None);
}

/// A Resize desc scaling `x` by `scales` (output floor(x·scale), as the importer does).
fn rs(mode: ResizeMode, t: CoordinateTransform, x: &[usize], scales: &[f32]) -> ResizeDesc {
    ResizeDesc {
        mode,
        coordinate_transform: t,
        nearest_mode: NearestMode::RoundPreferFloor,
        cubic_coeff_a: -0.75,
        exclude_outside: false,
        output_shape: x
            .iter()
            .zip(scales)
            .map(|(&d, &s)| (d as f32 * s).floor() as usize)
            .collect(),
        scales: scales.to_vec(),
        antialias: false,
        roi: vec![],
        extrapolation_value: 0.0,
    }
}

/// The same, to `sizes` (scales size / input, as the importer derives them).
fn rs_sizes(mode: ResizeMode, t: CoordinateTransform, x: &[usize], sizes: &[usize]) -> ResizeDesc {
    let mut d = rs(mode, t, x, &vec![1.0; x.len()]);
    d.output_shape = sizes.to_vec();
    d.scales = x
        .iter()
        .zip(sizes)
        .map(|(&i, &o)| o as f32 / i as f32)
        .collect();
    d
}

const TRANSFORMS: [CoordinateTransform; 5] = [
    CoordinateTransform::HalfPixel,
    CoordinateTransform::PytorchHalfPixel,
    CoordinateTransform::AlignCorners,
    CoordinateTransform::Asymmetric,
    CoordinateTransform::HalfPixelSymmetric,
];

const NEAREST: [NearestMode; 4] = [
    NearestMode::RoundPreferFloor,
    NearestMode::RoundPreferCeil,
    NearestMode::Floor,
    NearestMode::Ceil,
];

fn check_resize(what: &str, r: &mut Rng, desc: &ResizeDesc, x: &[usize]) {
    let xt = r.tensor(x, 1.0);
    let (rtol, atol) = match desc.mode {
        ResizeMode::Nearest => (0.0, 0.0),
        _ => (1e-5, 1e-6),
    };
    let what = format!("{what} x={x:?} desc={desc:?}");
    check(
        &what,
        &Op::Resize(desc.clone()),
        &[&xt],
        &[&[false]],
        rtol,
        atol,
    );
}

/// Scale pairs (height, width): integer and fractional, up and down.
const SCALES: [[f32; 2]; 8] = [
    [2.0, 2.0],
    [3.0, 1.0],
    [0.5, 0.5],
    [1.5, 2.5],
    [0.6, 1.7],
    [1.0, 0.33],
    [2.9, 0.75],
    [1.0, 1.0],
];

#[test]
fn resize_nearest_every_mode_and_transform_by_scales() {
    let mut r = Rng(21);
    for &(n, c, h, w) in &[(1, 1, 1, 1), (2, 3, 7, 17), (1, 7, 17, 3), (1, 1, 63, 7)] {
        for s in SCALES {
            for t in TRANSFORMS {
                for mode in NEAREST {
                    let mut desc = rs(
                        ResizeMode::Nearest,
                        t,
                        &[n, c, h, w],
                        &[1.0, 1.0, s[0], s[1]],
                    );
                    desc.nearest_mode = mode;
                    check_resize("nearest", &mut r, &desc, &[n, c, h, w]);
                }
            }
        }
    }
}

#[test]
fn resize_linear_every_transform_by_scales() {
    let mut r = Rng(22);
    for &(n, c, h, w) in &[(1, 1, 1, 1), (2, 3, 7, 17), (1, 7, 17, 3), (1, 1, 63, 7)] {
        for s in SCALES {
            for t in TRANSFORMS {
                let desc = rs(
                    ResizeMode::Linear,
                    t,
                    &[n, c, h, w],
                    &[1.0, 1.0, s[0], s[1]],
                );
                check_resize("linear", &mut r, &desc, &[n, c, h, w]);
            }
        }
    }
}

#[test]
fn resize_by_sizes_and_other_ranks() {
    let mut r = Rng(23);
    let x = [2, 3, 7, 17];
    for sizes in [
        [2, 3, 14, 34],
        [2, 3, 3, 5],
        [2, 3, 10, 9],
        [2, 3, 1, 1],
        [2, 3, 63, 1],
    ] {
        for t in TRANSFORMS {
            for mode in NEAREST {
                let mut desc = rs_sizes(ResizeMode::Nearest, t, &x, &sizes);
                desc.nearest_mode = mode;
                check_resize("nearest sizes", &mut r, &desc, &x);
            }
            let desc = rs_sizes(ResizeMode::Linear, t, &x, &sizes);
            check_resize("linear sizes", &mut r, &desc, &x);
        }
    }
    // Ranks 1, 2, 3 and 5 (only the last two axes scaled).
    for (x, s) in [
        (vec![17], vec![2.5]),
        (vec![7, 3], vec![0.5, 3.0]),
        (vec![3, 7, 17], vec![1.0, 2.0, 0.6]),
        (vec![2, 1, 3, 7, 3], vec![1.0, 1.0, 1.0, 1.5, 2.0]),
    ] {
        for t in TRANSFORMS {
            for mode in [ResizeMode::Nearest, ResizeMode::Linear] {
                let desc = rs(mode, t, &x, &s);
                check_resize("rank", &mut r, &desc, &x);
            }
        }
    }
    // Antialias is a no-op for nearest and for linear upsampling: claimed.
    let x = [1, 3, 7, 17];
    for mode in [ResizeMode::Nearest, ResizeMode::Linear] {
        let mut desc = rs(
            mode,
            CoordinateTransform::HalfPixel,
            &x,
            &[1.0, 1.0, 2.0, 1.5],
        );
        desc.antialias = true;
        check_resize("antialias up", &mut r, &desc, &x);
    }
}

#[test]
fn resize_refusals_name_their_reason() {
    let x: &[usize] = &[1, 3, 8, 8];
    let hp = CoordinateTransform::HalfPixel;
    let refused = |d: ResizeDesc| refusal(&Op::Resize(d), &[x]).unwrap_or_default();
    let cubic = rs(ResizeMode::Cubic, hp, x, &[1.0, 1.0, 2.0, 2.0]);
    assert!(refused(cubic).contains("cubic"));
    let mut crop = rs(
        ResizeMode::Linear,
        CoordinateTransform::TfCropAndResize,
        x,
        &[1.0, 1.0, 2.0, 2.0],
    );
    crop.roi = vec![0.0, 0.0, 0.1, 0.1, 1.0, 1.0, 0.9, 0.9];
    assert!(refused(crop).contains("tf_crop_and_resize"));
    let mut aa = rs(ResizeMode::Linear, hp, x, &[1.0, 1.0, 0.5, 0.5]);
    aa.antialias = true;
    assert!(refused(aa).contains("antialiased"));
    let channels = rs(ResizeMode::Nearest, hp, x, &[1.0, 2.0, 2.0, 2.0]);
    assert!(refused(channels).contains("axis 1 is scaled"));
    let batch = rs(ResizeMode::Linear, hp, x, &[2.0, 1.0, 1.0, 1.0]);
    assert!(refused(batch).contains("axis 0 is scaled"));
    // Plain nearest and linear are claimed.
    for mode in [ResizeMode::Nearest, ResizeMode::Linear] {
        assert_eq!(
            refusal(&Op::Resize(rs(mode, hp, x, &[1.0, 1.0, 2.0, 0.5])), &[x]),
            None
        );
    }
}
