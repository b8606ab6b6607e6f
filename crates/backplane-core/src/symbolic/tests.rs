#![allow(clippy::unwrap_used)]

use super::*;

fn s(name: &str) -> DimExpr {
    DimExpr::sym(name)
}

fn c(v: i64) -> DimExpr {
    DimExpr::Const(v)
}

fn shape(text: &[DimExpr]) -> String {
    display_shape(text)
}

#[test]
fn expressions_are_canonical_and_print_as_written() {
    let batch_seq = s("batch").times(&s("seq"));
    assert_eq!(batch_seq, s("seq").times(&s("batch")));
    assert_eq!(batch_seq.to_string(), "batch*seq");
    let half = s("seq").div_floor(2).unwrap().plus(&c(1));
    assert_eq!(half.to_string(), "seq/2+1");
    assert_eq!(s("seq").plus(&c(3)).minus(&c(3)), s("seq"));
    assert_eq!(s("seq").minus(&s("seq")), c(0));
    assert_eq!(s("seq").plus(&s("seq")), c(2).times(&s("seq")));
    assert_eq!(c(2).times(&s("seq")).to_string(), "2*seq");
    assert_eq!(
        c(4).times(&s("n")).div_floor(2).unwrap(),
        c(2).times(&s("n"))
    );
    assert_eq!(s("n").minus(&c(1)).to_string(), "n-1");
    assert_eq!(s("a").minus(&s("b")).to_string(), "a-b");
    assert_eq!(s("a").plus(&c(1)).times(&c(2)).to_string(), "2*(a+1)");
    assert_eq!(s("seq").min_with(&c(128)).to_string(), "min(128, seq)");
    assert_eq!(c(3).min_with(&c(5)), c(3));
    assert_eq!(s("n").div_floor(0), None);
    assert_eq!(c(7).times(&c(0)), c(0));
}

#[test]
fn evaluation_binds_symbols() {
    let mut b = Bindings::new();
    b.insert("seq", 7);
    b.insert("batch", 3);
    assert_eq!(s("batch").times(&s("seq")).eval(&b), Some(21));
    assert_eq!(s("seq").div_floor(2).unwrap().plus(&c(1)).eval(&b), Some(4));
    assert_eq!(s("seq").min_with(&c(5)).eval(&b), Some(5));
    assert_eq!(s("other").eval(&b), None);
    assert_eq!(b.to_string(), "batch=3, seq=7");
    assert_eq!(
        s("a").times(&s("b")).plus(&s("a")).symbols(),
        vec!["a".to_string(), "b".to_string()]
    );
}

#[test]
fn broadcasting_keeps_symbols_and_refuses_numbers_that_differ() {
    let a = vec![s("batch"), s("seq"), c(96)];
    let b = vec![s("seq").min_with(&c(128)), c(96)];
    assert_eq!(shape(&broadcast(&a, &b).unwrap()), "[batch, seq, 96]");
    assert_eq!(
        shape(&broadcast(&[c(1), s("n")], &[c(4), c(1)]).unwrap()),
        "[4, n]"
    );
    assert_eq!(shape(&broadcast(&[s("n")], &[c(5)]).unwrap()), "[5]");
    assert!(matches!(
        broadcast(&[c(3)], &[c(4)]),
        Err(SymbolicError::Mismatch(_))
    ));
    assert_eq!(shape(&broadcast(&[], &[s("n")]).unwrap()), "[n]");
}

#[test]
fn products_and_windows() {
    let x = vec![s("batch"), s("seq"), c(96)];
    assert_eq!(
        shape(&matmul(&x, &[c(96), c(384)]).unwrap()),
        "[batch, seq, 384]"
    );
    assert_eq!(
        shape(
            &matmul(
                &[s("b"), c(4), s("q"), c(24)],
                &[s("b"), c(4), c(24), s("k")]
            )
            .unwrap()
        ),
        "[b, 4, q, k]"
    );
    assert_eq!(shape(&matmul(&[s("k")], &[s("k"), c(5)]).unwrap()), "[5]");
    assert!(matmul(&[c(2), c(3)], &[c(4), c(5)]).is_err());
    assert!(matmul(&[], &[c(4)]).is_err());
    assert_eq!(
        shape(&gemm(&[s("m"), c(8)], &[c(16), c(8)], false, true).unwrap()),
        "[m, 16]"
    );
    assert!(gemm(&[c(1)], &[c(1), c(1)], false, false).is_err());
    // 3x3, stride 2, pads 1+1: (h + 2 - 3)/2 + 1 = (h-1)/2+1.
    let h = window_output(&s("h"), 3, 2, (1, 1), 1, false).unwrap();
    assert_eq!(h.to_string(), "(h-1)/2+1");
    let mut b = Bindings::new();
    b.insert("h", 224);
    assert_eq!(h.eval(&b), Some(112));
    assert_eq!(window_output(&c(7), 3, 1, (0, 0), 2, false).unwrap(), c(3));
    // ceil_mode: (6 - 3 + 1)/2 + 1 = 3.
    assert_eq!(window_output(&c(6), 3, 2, (0, 0), 1, true).unwrap(), c(3));
    assert!(window_output(&c(6), 3, 0, (0, 0), 1, false).is_err());
}

#[test]
fn reshape_solves_minus_one_factor_by_factor() {
    let x = vec![s("batch"), s("seq"), c(96)];
    // Split heads: [0, 0, 4, 24].
    let heads = reshape(&x, &[c(0), c(0), c(4), c(24)], false).unwrap();
    assert_eq!(shape(&heads), "[batch, seq, 4, 24]");
    // Flatten: [-1, 96] gives batch*seq.
    let flat = reshape(&x, &[c(-1), c(96)], false).unwrap();
    assert_eq!(shape(&flat), "[batch*seq, 96]");
    // Merge heads back: [0, 0, -1] over [batch, seq, 4, 24].
    assert_eq!(
        shape(&reshape(&heads, &[c(0), c(0), c(-1)], false).unwrap()),
        "[batch, seq, 96]"
    );
    // [batch*seq, 96] back to [batch, -1, 96].
    assert_eq!(
        shape(&reshape(&flat, &[s("batch"), c(-1), c(96)], false).unwrap()),
        "[batch, seq, 96]"
    );
    // A -1 that would divide by a symbol the input lacks is unknown.
    assert!(matches!(
        reshape(&x, &[s("other"), c(-1)], false),
        Err(SymbolicError::Unknown(_))
    ));
    // allowzero keeps a 0.
    assert_eq!(
        shape(&reshape(&[c(0), c(3)], &[c(3), c(0)], true).unwrap()),
        "[3, 0]"
    );
    assert!(reshape(&x, &[c(-2)], false).is_err());
}

#[test]
fn data_movement_rules() {
    let a = vec![s("batch"), s("seq")];
    let b = vec![s("batch"), c(1)];
    assert_eq!(shape(&concat(&[&a, &b], 1).unwrap()), "[batch, seq+1]");
    assert_eq!(shape(&concat(&[&a, &a], -1).unwrap()), "[batch, 2*seq]");
    assert!(concat(&[&a, &[c(1)]], 0).is_err());
    assert!(concat(&[], 0).is_err());
    // pos_emb[0:seq] of a [128, 96] table: min(128, seq) rows.
    assert_eq!(
        slice_len(&c(128), &c(0), &s("seq"), 1).unwrap().to_string(),
        "min(128, seq)"
    );
    assert_eq!(
        slice_len(&s("n"), &c(1), &c(i64::MAX), 1)
            .unwrap()
            .to_string(),
        "n-1"
    );
    assert_eq!(
        slice_len(&s("n"), &c(0), &c(-1), 1).unwrap().to_string(),
        "n-1"
    );
    assert_eq!(slice_len(&c(10), &c(-3), &c(100), 1).unwrap(), c(3));
    assert_eq!(slice_len(&c(10), &c(9), &c(-100), -2).unwrap(), c(5));
    assert_eq!(slice_len(&c(10), &c(0), &c(10), 3).unwrap(), c(4));
    assert!(slice_len(&s("n"), &c(0), &c(4), 2).is_err());
    assert!(slice_len(&c(4), &c(0), &c(4), 0).is_err());
    let emb = gather(&[c(64), c(96)], &a, 0).unwrap();
    assert_eq!(shape(&emb), "[batch, seq, 96]");
    assert_eq!(shape(&gather(&a, &[], -1).unwrap()), "[batch]");
    let heads = vec![s("b"), s("s"), c(4), c(24)];
    assert_eq!(
        shape(&transpose(&heads, &[0, 2, 1, 3]).unwrap()),
        "[b, 4, s, 24]"
    );
    assert_eq!(shape(&transpose(&a, &[]).unwrap()), "[seq, batch]");
    assert!(transpose(&a, &[0]).is_err());
    assert_eq!(
        shape(&unsqueeze(&a, &[0, -1]).unwrap()),
        "[1, batch, seq, 1]"
    );
    assert!(unsqueeze(&a, &[0, 0]).is_err());
    assert_eq!(
        shape(&squeeze(&[c(1), s("n"), c(1)], &[0, 2]).unwrap()),
        "[n]"
    );
    assert!(matches!(
        squeeze(&[c(1), s("n")], &[]),
        Err(SymbolicError::Unknown(_))
    ));
    assert_eq!(shape(&squeeze(&[c(1), c(3)], &[]).unwrap()), "[3]");
    assert!(normalize_axis(2, 2).is_err());
}

#[test]
fn binding_checks_every_dimension_and_names_a_misfit() {
    let sig = SymbolicSignature {
        inputs: vec![
            ("ids".into(), Some(vec![s("batch"), s("seq")])),
            ("mask".into(), Some(vec![s("batch"), s("seq")])),
            (
                "half".into(),
                Some(vec![s("seq").div_floor(2).unwrap().plus(&c(1))]),
            ),
            ("fixed".into(), Some(vec![c(3)])),
            ("free".into(), None),
        ],
        outputs: Vec::new(),
    };
    let ok = sig
        .bind(&[
            ("ids", &[2, 7]),
            ("mask", &[2, 7]),
            ("half", &[4]),
            ("fixed", &[3]),
            ("free", &[9, 9, 9]),
        ])
        .unwrap();
    assert_eq!(ok.to_string(), "batch=2, seq=7");
    let err = sig
        .bind(&[("ids", &[2, 7]), ("mask", &[2, 9])])
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("input 'mask' dimension 1 ('seq') is 9"),
        "{text}"
    );
    assert!(
        text.contains("'seq' is 7 from input 'ids' dimension 1"),
        "{text}"
    );
    let err = sig
        .bind(&[("ids", &[2, 7]), ("half", &[5])])
        .unwrap_err()
        .to_string();
    assert!(err.contains("('seq/2+1') is 5"), "{err}");
    assert!(err.contains("must be 4"), "{err}");
    let err = sig.bind(&[("fixed", &[4])]).unwrap_err().to_string();
    assert!(
        err.contains("dimension 0 is 4; the model declares 3"),
        "{err}"
    );
    let err = sig.bind(&[("ids", &[2, 7, 1])]).unwrap_err().to_string();
    assert!(err.contains("input 'ids' has 3 dimensions"), "{err}");
    assert!(err.contains("[batch, seq]"), "{err}");
    // Inputs not given are not checked.
    assert!(sig.bind(&[]).unwrap().is_empty());
}
