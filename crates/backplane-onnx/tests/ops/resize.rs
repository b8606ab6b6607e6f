//! Resize and Upsample across opsets.

use super::*;

fn resize_desc(net: &backplane_core::Network) -> ResizeDesc {
    match only_op(net) {
        Op::Resize(r) => r.clone(),
        other => panic!("not a resize: {other:?}"),
    }
}

#[test]
fn resize_opset_10_and_upsample() {
    let net = Model::new(10)
        .input(input("x", &[1, 1, 2, 3]))
        .init(floats("sc", &[1.0, 1.0, 2.0, 1.5]))
        .node(node(
            "Resize",
            &["x", "sc"],
            &["y"],
            vec![a_str("mode", "linear")],
        ))
        .output("y")
        .ok();
    let r = resize_desc(&net);
    assert_eq!(r.mode, ResizeMode::Linear);
    assert_eq!(r.coordinate_transform, CoordinateTransform::Asymmetric);
    assert_eq!(r.output_shape, vec![1, 1, 4, 4]);
    assert_eq!(r.scales, vec![1.0, 1.0, 2.0, 1.5]);
    assert_eq!(only_layer(&net).inputs.len(), 1);

    let net = Model::new(7)
        .input(input("x", &[1, 1, 2, 3]))
        .node(node(
            "Upsample",
            &["x"],
            &["y"],
            vec![a_floats("scales", &[1.0, 1.0, 2.0, 2.0])],
        ))
        .output("y")
        .ok();
    let r = resize_desc(&net);
    assert_eq!(r.mode, ResizeMode::Nearest);
    assert_eq!(r.nearest_mode, NearestMode::Floor);
    assert_eq!(r.output_shape, vec![1, 1, 4, 6]);
    let net = Model::new(9)
        .input(input("x", &[1, 1, 2, 3]))
        .init(floats("sc", &[1.0, 1.0, 3.0, 3.0]))
        .node(node(
            "Upsample",
            &["x", "sc"],
            &["y"],
            vec![a_str("mode", "linear")],
        ))
        .output("y")
        .ok();
    let r = resize_desc(&net);
    assert_eq!(r.mode, ResizeMode::Linear);
    assert_eq!(r.output_shape, vec![1, 1, 6, 9]);

    // Opset-10 nearest downsampling rounds up.
    let net = Model::new(10)
        .input(input("x", &[1, 1, 2, 4]))
        .init(floats("sc", &[1.0, 1.0, 0.6, 0.6]))
        .node(node("Resize", &["x", "sc"], &["y"], vec![]))
        .output("y")
        .ok();
    let r = resize_desc(&net);
    assert_eq!(r.nearest_mode, NearestMode::Ceil);
    assert_eq!(r.output_shape, vec![1, 1, 1, 2]);
    let err = Model::new(10)
        .input(input("x", &[1, 1, 2, 4]))
        .init(floats("sc", &[1.0, 1.0, 2.0, 0.5]))
        .node(node("Resize", &["x", "sc"], &["y"], vec![]))
        .output("y")
        .import()
        .unwrap_err();
    assert!(err.unsupported_ops()[0].reason.contains("shrinks"), "{err}");
}

#[test]
fn resize_opset_11_and_13() {
    // opset 11: roi and scales are required inputs; empty scales with sizes.
    let net = Model::new(11)
        .input(input("x", &[1, 1, 4, 4]))
        .init(floats("roi", &[]))
        .init(floats("sc", &[]))
        .init(ints("sz", &[1, 1, 8, 2]))
        .node(node(
            "Resize",
            &["x", "roi", "sc", "sz"],
            &["y"],
            vec![
                a_str("mode", "cubic"),
                a_str("coordinate_transformation_mode", "align_corners"),
                a_float("cubic_coeff_a", -0.5),
                a_int("exclude_outside", 1),
            ],
        ))
        .output("y")
        .ok();
    let r = resize_desc(&net);
    assert_eq!(r.mode, ResizeMode::Cubic);
    assert_eq!(r.coordinate_transform, CoordinateTransform::AlignCorners);
    assert_eq!(r.cubic_coeff_a, -0.5);
    assert!(r.exclude_outside);
    assert_eq!(r.output_shape, vec![1, 1, 8, 2]);
    assert_eq!(r.scales, vec![1.0, 1.0, 2.0, 0.5]);
    assert_eq!(dims(&net, "y"), vec![1, 1, 8, 2]);

    // opset 13: roi omitted, scales given; defaults half_pixel / round_prefer_floor.
    let net = Model::new(13)
        .input(input("x", &[1, 1, 4, 4]))
        .init(floats("sc", &[1.0, 1.0, 0.5, 0.5]))
        .node(node(
            "Resize",
            &["x", "", "sc"],
            &["y"],
            vec![a_str("nearest_mode", "ceil")],
        ))
        .output("y")
        .ok();
    let r = resize_desc(&net);
    assert_eq!(r.mode, ResizeMode::Nearest);
    assert_eq!(r.coordinate_transform, CoordinateTransform::HalfPixel);
    assert_eq!(r.nearest_mode, NearestMode::Ceil);
    assert_eq!(r.output_shape, vec![1, 1, 2, 2]);

    let err = Model::new(13)
        .input(input("x", &[1, 1, 4, 4]))
        .init(floats("sc", &[1.0, 1.0, 0.5, 0.5]))
        .node(node(
            "Resize",
            &["x", "", "sc"],
            &["y"],
            vec![a_str(
                "coordinate_transformation_mode",
                "tf_crop_and_resize",
            )],
        ))
        .output("y")
        .import()
        .unwrap_err();
    // tf_crop_and_resize needs its roi input.
    assert!(err.to_string().contains("roi"), "{err}");
    let err = Model::new(13)
        .input(input("x", &[1, 1, 4, 4]))
        .input(value_info("sz", INT64, Some(&[D::V(4)])))
        .node(node("Resize", &["x", "", "", "sz"], &["y"], vec![]))
        .output("y")
        .import()
        .unwrap_err();
    assert_eq!(
        err.unsupported_ops()[0].reason,
        "dynamic sizes (computed at run time)"
    );
}

#[test]
fn resize_opset_18_19_axes_and_aspect_ratio() {
    let net = Model::new(18)
        .input(input("x", &[1, 3, 4, 8]))
        .init(ints("sz", &[8, 8]))
        .node(node(
            "Resize",
            &["x", "", "", "sz"],
            &["y"],
            vec![
                a_ints("axes", &[2, 3]),
                a_str("keep_aspect_ratio_policy", "not_larger"),
                a_str("mode", "linear"),
                a_str("coordinate_transformation_mode", "pytorch_half_pixel"),
            ],
        ))
        .output("y")
        .ok();
    let r = resize_desc(&net);
    assert_eq!(r.output_shape, vec![1, 3, 4, 8]);
    assert_eq!(
        r.coordinate_transform,
        CoordinateTransform::PytorchHalfPixel
    );
    let net = Model::new(18)
        .input(input("x", &[1, 3, 4, 8]))
        .init(ints("sz", &[8, 8]))
        .node(node(
            "Resize",
            &["x", "", "", "sz"],
            &["y"],
            vec![
                a_ints("axes", &[2, 3]),
                a_str("keep_aspect_ratio_policy", "not_smaller"),
            ],
        ))
        .output("y")
        .ok();
    let r = resize_desc(&net);
    assert_eq!(r.output_shape, vec![1, 3, 8, 16]);
    assert_eq!(r.scales, vec![1.0, 1.0, 2.0, 2.0]);
    let net = Model::new(19)
        .input(input("x", &[1, 3, 4, 8]))
        .init(floats("sc", &[0.5]))
        .node(node(
            "Resize",
            &["x", "", "sc"],
            &["y"],
            vec![
                a_ints("axes", &[-1]),
                a_str("coordinate_transformation_mode", "half_pixel_symmetric"),
            ],
        ))
        .output("y")
        .ok();
    let r = resize_desc(&net);
    assert_eq!(r.output_shape, vec![1, 3, 4, 4]);
    assert_eq!(r.scales, vec![1.0, 1.0, 1.0, 0.5]);
    assert_eq!(
        r.coordinate_transform,
        CoordinateTransform::HalfPixelSymmetric
    );
    let net = Model::new(18)
        .input(input("x", &[1, 3, 4, 8]))
        .init(floats("sc", &[1.0, 1.0, 0.5, 0.5]))
        .node(node(
            "Resize",
            &["x", "", "sc"],
            &["y"],
            vec![a_int("antialias", 1)],
        ))
        .output("y")
        .ok();
    assert!(resize_desc(&net).antialias);
}
