//! Translation of the signal and image-geometry ops: DFT, STFT, MelWeightMatrix, Col2Im,
//! AffineGrid, RoiAlign and DeformConv.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use backplane_core::ops::*;
use backplane_core::Op;
use backplane_onnx::OnnxError;
use common::*;

#[test]
fn dft_opset_17_reads_the_axis_attribute_and_a_constant_length() {
    let net = Model::new(17)
        .input(input("x", &[2, 8, 1]))
        .init(ints("n", &[6]))
        .node(node(
            "DFT",
            &["x", "n"],
            &["y"],
            vec![a_int("axis", 1), a_int("onesided", 1)],
        ))
        .output("y")
        .ok();
    assert_eq!(
        only_op(&net),
        &Op::Dft(DftDesc {
            axis: 1,
            length: 6,
            inverse: false,
            onesided: true,
        })
    );
    assert_eq!(dims(&net, "y"), [2, 4, 2]);
}

#[test]
fn dft_opset_20_takes_the_axis_input_counting_from_the_back() {
    let net = Model::new(20)
        .input(input("x", &[3, 5, 2]))
        .init(ints("axis", &[-3]))
        .node(node(
            "DFT",
            &["x", "", "axis"],
            &["y"],
            vec![a_int("inverse", 1)],
        ))
        .output("y")
        .ok();
    let Op::Dft(d) = only_op(&net) else {
        panic!("expected DFT")
    };
    assert_eq!((d.axis, d.length, d.inverse), (0, 3, true));
    // The default axis is -2, the last signal axis.
    let net = Model::new(20)
        .input(input("x", &[3, 5, 2]))
        .node(node("DFT", &["x"], &["y"], vec![]))
        .output("y")
        .ok();
    assert_eq!(dims(&net, "y"), [3, 5, 2]);
    // The complex axis is not a signal axis.
    let err = Model::new(20)
        .input(input("x", &[3, 5, 2]))
        .init(ints("axis", &[2]))
        .node(node("DFT", &["x", "", "axis"], &["y"], vec![]))
        .output("y")
        .import()
        .unwrap_err();
    assert!(err.to_string().contains("axis"), "{err}");
}

#[test]
fn dft_axis_from_a_graph_input_needs_its_value() {
    let err = Model::new(20)
        .input(input("x", &[3, 5, 1]))
        .input(value_info("axis", 7, Some(&[])))
        .node(node("DFT", &["x", "", "axis"], &["y"], vec![]))
        .output("y")
        .import()
        .unwrap_err();
    match err {
        OnnxError::NeedsInputValues { inputs, .. } => assert_eq!(inputs, vec!["axis"]),
        other => panic!("expected NeedsInputValues, got {other}"),
    }
}

#[test]
fn stft_takes_the_frame_length_from_the_window() {
    let net = Model::new(17)
        .input(input("signal", &[1, 64, 1]))
        .input(input("window", &[16]))
        .init(ints("step", &[8]))
        .node(node("STFT", &["signal", "step", "window"], &["y"], vec![]))
        .output("y")
        .ok();
    let layer = only_layer(&net);
    assert_eq!(
        layer.op,
        Op::Stft(StftDesc {
            frame_step: 8,
            frame_length: 16,
            onesided: true,
        })
    );
    assert_eq!(layer.inputs.len(), 2);
    assert_eq!(dims(&net, "y"), [1, 7, 9, 2]);
    // A frame_length that contradicts the window is invalid.
    let err = Model::new(17)
        .input(input("signal", &[1, 64, 1]))
        .input(input("window", &[16]))
        .init(ints("step", &[8]))
        .init(ints("len", &[12]))
        .node(node(
            "STFT",
            &["signal", "step", "window", "len"],
            &["y"],
            vec![],
        ))
        .output("y")
        .import()
        .unwrap_err();
    assert!(err.to_string().contains("window"), "{err}");
}

#[test]
fn mel_weight_matrix_is_a_constant_of_triangles() {
    let net = Model::new(17)
        .init(ints("bins", &[2]))
        .init(ints("n", &[8]))
        .init(ints("rate", &[8]))
        .init(floats("lo", &[0.0]))
        .init(floats("hi", &[4.0]))
        .node(node(
            "MelWeightMatrix",
            &["bins", "n", "rate", "lo", "hi"],
            &["m"],
            vec![],
        ))
        .output("m")
        .ok();
    assert!(net.layers().is_empty());
    let id = net.find_tensor("m").unwrap();
    let t = net.tensor(id).constant().expect("a constant");
    assert_eq!(t.shape().dims(), &[5, 2]);
    // Every weight lies in [0, 1] and every band peaks at 1.
    let v = t.to_f64_vec();
    assert!(v.iter().all(|&w| (0.0..=1.0).contains(&w)));
    for band in 0..2 {
        let peak = (0..5).map(|b| v[b * 2 + band]).fold(0.0, f64::max);
        assert_eq!(peak, 1.0);
    }
}

#[test]
fn col2im_reads_constant_shapes_and_default_window_attributes() {
    let net = Model::new(18)
        .input(input("x", &[1, 6, 4]))
        .init(ints("image", &[3, 4]))
        .init(ints("block", &[2, 3]))
        .node(node("Col2Im", &["x", "image", "block"], &["y"], vec![]))
        .output("y")
        .ok();
    assert_eq!(
        only_op(&net),
        &Op::Col2Im(Col2ImDesc {
            image_shape: vec![3, 4],
            block_shape: vec![2, 3],
            dilations: vec![1, 1],
            pads: vec![0, 0, 0, 0],
            strides: vec![1, 1],
        })
    );
    assert_eq!(dims(&net, "y"), [1, 1, 3, 4]);
    // A column count that does not match the block positions is rejected.
    let err = Model::new(18)
        .input(input("x", &[1, 6, 5]))
        .init(ints("image", &[3, 4]))
        .init(ints("block", &[2, 3]))
        .node(node("Col2Im", &["x", "image", "block"], &["y"], vec![]))
        .output("y")
        .import()
        .unwrap_err();
    assert!(err.to_string().contains("Col2Im"), "{err}");
}

#[test]
fn affine_grid_reads_the_size_input() {
    let net = Model::new(20)
        .input(input("theta", &[2, 3, 4]))
        .init(ints("size", &[2, 1, 3, 4, 5]))
        .node(node(
            "AffineGrid",
            &["theta", "size"],
            &["grid"],
            vec![a_int("align_corners", 1)],
        ))
        .output("grid")
        .ok();
    assert_eq!(
        only_op(&net),
        &Op::AffineGrid(AffineGridDesc {
            size: vec![2, 1, 3, 4, 5],
            align_corners: true,
        })
    );
    assert_eq!(dims(&net, "grid"), [2, 3, 4, 5, 3]);
}

#[test]
fn roi_align_defaults_follow_the_opset() {
    let model = |opset: i64| {
        Model::new(opset)
            .input(input("x", &[1, 2, 8, 8]))
            .input(input("rois", &[3, 4]))
            .input(value_info("idx", 7, Some(&[D::V(3)])))
            .node(node(
                "RoiAlign",
                &["x", "rois", "idx"],
                &["y"],
                vec![a_int("output_height", 2), a_str("mode", "max")],
            ))
            .output("y")
    };
    let net = model(16).ok();
    let Op::RoiAlign(d) = only_op(&net) else {
        panic!("expected RoiAlign")
    };
    assert!(d.half_pixel && d.max);
    assert_eq!(
        (d.output_height, d.output_width, d.sampling_ratio),
        (2, 1, 0)
    );
    assert_eq!(dims(&net, "y"), [3, 2, 2, 1]);
    let net = model(13).ok();
    let Op::RoiAlign(d) = only_op(&net) else {
        panic!("expected RoiAlign")
    };
    assert!(!d.half_pixel);
}

#[test]
fn deform_conv_supplies_a_zero_bias_before_a_mask() {
    let net = Model::new(19)
        .input(input("x", &[1, 2, 5, 5]))
        .input(input("w", &[4, 2, 3, 3]))
        .input(input("offset", &[1, 18, 3, 3]))
        .input(input("mask", &[1, 9, 3, 3]))
        .node(node(
            "DeformConv",
            &["x", "w", "offset", "", "mask"],
            &["y"],
            vec![],
        ))
        .output("y")
        .ok();
    let layer = only_layer(&net);
    let Op::DeformConv(d) = &layer.op else {
        panic!("expected DeformConv")
    };
    assert_eq!(d.kernel, [3, 3]);
    assert_eq!((d.group, d.offset_group), (1, 1));
    assert_eq!(layer.inputs.len(), 5);
    let bias = net.tensor(layer.inputs[3]);
    assert_eq!(bias.info.shape.dims(), &[4]);
    assert!(bias
        .constant()
        .unwrap()
        .to_f64_vec()
        .iter()
        .all(|&v| v == 0.0));
    assert_eq!(dims(&net, "y"), [1, 4, 3, 3]);
    // Offsets of the wrong shape are rejected.
    let err = Model::new(19)
        .input(input("x", &[1, 2, 5, 5]))
        .input(input("w", &[4, 2, 3, 3]))
        .input(input("offset", &[1, 9, 3, 3]))
        .node(node("DeformConv", &["x", "w", "offset"], &["y"], vec![]))
        .output("y")
        .import()
        .unwrap_err();
    assert!(err.to_string().contains("offset"), "{err}");
}

fn resize_of(net: &backplane_core::Network) -> ResizeDesc {
    match only_op(net) {
        Op::Resize(d) => d.clone(),
        other => panic!("expected Resize, got {other:?}"),
    }
}

#[test]
fn resize_tf_crop_and_resize_spreads_the_roi_of_the_listed_axes() {
    // axes [3, 2]: roi lists start3, start2, end3, end2; axes 0 and 1 are whole.
    let net = Model::new(18)
        .input(input("x", &[1, 1, 4, 4]))
        .init(floats("roi", &[0.2, 0.4, 0.6, 0.8]))
        .init(ints("sizes", &[3, 3]))
        .node(node(
            "Resize",
            &["x", "roi", "", "sizes"],
            &["y"],
            vec![
                a_str("mode", "linear"),
                a_str("coordinate_transformation_mode", "tf_crop_and_resize"),
                a_ints("axes", &[3, 2]),
                a_float("extrapolation_value", 10.0),
            ],
        ))
        .output("y")
        .ok();
    let d = resize_of(&net);
    assert_eq!(d.coordinate_transform, CoordinateTransform::TfCropAndResize);
    assert_eq!(d.roi, [0.0, 0.0, 0.4, 0.2, 1.0, 1.0, 0.8, 0.6]);
    assert_eq!(d.extrapolation_value, 10.0);
    assert_eq!(dims(&net, "y"), [1, 1, 3, 3]);
    // Without the roi input the mode cannot work.
    let err = Model::new(18)
        .input(input("x", &[1, 1, 4, 4]))
        .init(ints("sizes", &[1, 1, 3, 3]))
        .node(node(
            "Resize",
            &["x", "", "", "sizes"],
            &["y"],
            vec![a_str(
                "coordinate_transformation_mode",
                "tf_crop_and_resize",
            )],
        ))
        .output("y")
        .import()
        .unwrap_err();
    assert!(err.to_string().contains("roi"), "{err}");
}

#[test]
fn resize_antialias_is_read_from_opset_18() {
    let net = Model::new(18)
        .input(input("x", &[1, 1, 4, 4]))
        .init(floats("scales", &[1.0, 1.0, 0.5, 0.5]))
        .node(node(
            "Resize",
            &["x", "", "scales"],
            &["y"],
            vec![a_str("mode", "cubic"), a_int("antialias", 1)],
        ))
        .output("y")
        .ok();
    let d = resize_of(&net);
    assert!(d.antialias);
    assert!(d.roi.is_empty());
    assert_eq!(dims(&net, "y"), [1, 1, 2, 2]);
}

#[test]
fn mel_weight_matrix_single_band_by_hand() {
    // mel(4 Hz) ≈ 6.42; edges at 0, 2.14 and 4.28 mel ≈ 0, 1.33 and 2.66 Hz, i.e. spectrum
    // bins floor(9 * hz / 8) = 0, 1, 2: one triangle peaking at bin 1.
    let net = Model::new(17)
        .init(ints("bins", &[1]))
        .init(ints("n", &[8]))
        .init(ints("rate", &[8]))
        .init(floats("lo", &[0.0]))
        .init(floats("hi", &[4.0]))
        .node(node(
            "MelWeightMatrix",
            &["bins", "n", "rate", "lo", "hi"],
            &["m"],
            vec![a_int("output_datatype", 11)],
        ))
        .output("m")
        .ok();
    let t = net
        .tensor(net.find_tensor("m").unwrap())
        .constant()
        .unwrap()
        .clone();
    assert_eq!(t.dtype(), backplane_core::DataType::F64);
    assert_eq!(t.to_f64_vec(), [0.0, 1.0, 0.0, 0.0, 0.0]);
}
