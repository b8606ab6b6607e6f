//! An import of a model the caller keeps (`import_model_specialized_borrowed`, what a
//! `DynamicNetwork` does at every plan miss): the model is read in place and left as it was,
//! the network is the one an import of a copy builds, a Constant node's value and the
//! weights are the same tensors, and a retry that binds an input value needs no copy.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
use common::*;

use backplane_onnx::{
    import_model_specialized, import_model_specialized_borrowed, ImportOptions, SharedInitializers,
};
use std::sync::Arc;

/// x [1, k] · W [k, n] + a Constant node's bias, reshaped by the input `shape`, whose value
/// the import needs (the first attempt asks for it, the retry binds it).
fn model(k: usize, n: usize) -> Model {
    let w: Vec<f32> = (0..k * n).map(|i| (i % 17) as f32 / 8.0 - 1.0).collect();
    let bias: Vec<f32> = (0..n).map(|i| i as f32 * 0.25).collect();
    Model::new(13)
        .input(input("x", &[1, k as i64]))
        .input(value_info("shape", INT64, Some(&[D::V(2)])))
        .init(tensor_f32_raw("w", &[k as i64, n as i64], &w))
        .node(node(
            "Constant",
            &[],
            &["bias"],
            vec![a_tensor("value", tensor_f32("bias", &[n as i64], &bias))],
        ))
        .node(node("MatMul", &["x", "w"], &["xw"], vec![]))
        .node(node("Add", &["xw", "bias"], &["y0"], vec![]))
        .node(node("Reshape", &["y0", "shape"], &["y"], vec![]))
        .output("y")
}

fn constant(net: &backplane_core::Network, name: &str) -> Arc<backplane_core::Tensor> {
    net.tensors()
        .iter()
        .find(|t| t.name == name)
        .and_then(|t| t.constant().cloned())
        .unwrap_or_else(|| panic!("no constant {name}"))
}

#[test]
fn a_borrowed_import_reads_the_model_in_place_and_builds_the_same_network() {
    for (k, n) in [(1, 1), (5, 7), (31, 64)] {
        let proto = model(k, n).proto();
        let kept = proto.clone();
        let shape = backplane_core::Tensor::from_vec(vec![2], vec![n as i64, 1]).unwrap();
        let given = [("shape".to_string(), shape)];
        let shared = Arc::new(SharedInitializers::new());
        let options = ImportOptions {
            shared_initializers: Some(shared.clone()),
            ..ImportOptions::default()
        };
        let (borrowed, bound) =
            import_model_specialized_borrowed(&proto, None, &options, &given).unwrap();
        assert_eq!(bound, ["shape"], "{k}x{n}: the retry bound the shape");
        assert!(proto == kept, "{k}x{n}: the borrowed model was changed");
        let (owned, _) =
            import_model_specialized(kept, None, &ImportOptions::default(), &given).unwrap();
        assert_eq!(ops(&borrowed), ops(&owned), "{k}x{n}");
        let y = borrowed.outputs()[0];
        assert_eq!(borrowed.tensor(y).info.shape.dims(), &[n, 1]);
        for name in ["w", "bias"] {
            assert_eq!(
                constant(&borrowed, name).bytes(),
                constant(&owned, name).bytes(),
                "{k}x{n}: {name}"
            );
        }
        // The weight was decoded once into the shared set, and a second borrowed import
        // takes that tensor.
        let (again, _) = import_model_specialized_borrowed(&proto, None, &options, &given).unwrap();
        assert_eq!(shared.len(), 1, "{k}x{n}: w only (bias is a Constant node)");
        assert!(Arc::ptr_eq(
            &constant(&borrowed, "w"),
            &constant(&again, "w")
        ));
    }
}

/// An import given the index of its node list (`ImportOptions::node_names`, what a
/// `DynamicNetwork` passes) builds the network an import that walks its nodes builds: the
/// same layers and tensor names, a MaxPool's indices kept where a later node reads them and
/// dropped where none does, and fresh names that avoid the names later nodes define.
#[test]
fn an_import_with_the_node_index_builds_the_same_network() {
    use backplane_onnx::import_model_specialized_with_nodes;
    use backplane_onnx::node_names::{NodeNames, NodeNamesAt};
    let pool = |indices_read: bool| {
        let mut m = Model::new(13)
            .input(input("x", &[1, 1, 4, 4]))
            .node(node(
                "MaxPool",
                &["x"],
                &["p", "idx"],
                vec![a_ints("kernel_shape", &[2, 2]), a_ints("strides", &[2, 2])],
            ))
            .node(node("Relu", &["p"], &["y"], vec![]))
            .output("y");
        if indices_read {
            m = m
                .node(node("Cast", &["idx"], &["idx_f"], vec![a_int("to", 1)]))
                .output("idx_f");
        }
        m
    };
    for indices_read in [false, true] {
        let proto = pool(indices_read).proto();
        let nodes = &proto.graph.as_ref().unwrap().node;
        let plain = ImportOptions::default();
        let indexed = ImportOptions {
            node_names: Some(NodeNamesAt {
                names: Arc::new(NodeNames::of(nodes)),
                start: 0,
            }),
            ..ImportOptions::default()
        };
        let (a, _) = import_model_specialized_with_nodes(&proto, nodes, None, &plain, &[]).unwrap();
        let (b, _) =
            import_model_specialized_with_nodes(&proto, nodes, None, &indexed, &[]).unwrap();
        let names = |n: &backplane_core::Network| {
            n.tensors()
                .iter()
                .map(|t| t.name.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(ops(&a), ops(&b), "indices read: {indices_read}");
        assert_eq!(names(&a), names(&b), "indices read: {indices_read}");
        assert_eq!(
            names(&b).iter().any(|n| n == "idx"),
            indices_read,
            "the indices are kept exactly where a later node reads them"
        );
    }
}

/// The index answers which later node reads a name, from any start, and which names the
/// nodes define.
#[test]
fn the_node_index_finds_later_readers() {
    use backplane_onnx::node_names::NodeNames;
    let nodes = vec![
        node("Relu", &["x"], &["a"], vec![]),
        node("Add", &["a", "x"], &["b"], vec![]),
        node("Mul", &["b", "a"], &["c"], vec![]),
    ];
    let ix = NodeNames::of(&nodes);
    assert_eq!(ix.first_reader("a", 0), Some(1));
    assert_eq!(ix.first_reader("a", 2), Some(2));
    assert_eq!(ix.first_reader("a", 3), None);
    assert_eq!(ix.first_reader("x", 0), Some(0));
    assert_eq!(ix.first_reader("c", 0), None);
    assert!(ix.defines("b") && ix.defines("c") && !ix.defines("x"));
}
