//! Comparing a tensor with an expected one, element by element: the one rule the CLI's
//! `run --expected`, the backend test kit and the tests share.
//!
//! Types and shapes must be equal. NaN must meet NaN, infinities their equal, integer and bool
//! types (int4/uint4 included) compare exactly; floats (f16, bf16 and float8 as their exact
//! f32 values) within `atol + rtol * |expected|`.

use backplane_core::{DataType, Tensor};

/// How two tensors differ.
#[derive(Debug, Clone, PartialEq)]
pub struct Mismatch {
    /// What differs, in a sentence (the worst element, with the tolerances).
    pub message: String,
    /// The largest |actual - expected| over all elements (infinite for a type or shape
    /// mismatch, or NaN against a number).
    pub worst: f64,
    /// How many elements are out of tolerance (0 for a type or shape mismatch).
    pub bad: usize,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// Compare `actual` with `expected` (see the module docs): the largest |difference| when
/// every element is within tolerance, or how they differ.
pub fn compare(actual: &Tensor, expected: &Tensor, rtol: f64, atol: f64) -> Result<f64, Mismatch> {
    if !actual.info().same_layout(expected.info()) {
        return Err(Mismatch {
            message: format!("got {}, expected {}", actual.info(), expected.info()),
            worst: f64::INFINITY,
            bad: 0,
        });
    }
    let dtype = expected.dtype();
    let exact = !(dtype.is_float() || dtype == DataType::BF16 || dtype.is_float8());
    let (a, e) = (actual.to_f64_vec(), expected.to_f64_vec());
    let mut worst = 0.0f64;
    let mut worst_bad: Option<(usize, f64)> = None;
    let mut bad = 0usize;
    for (i, (&x, &y)) in a.iter().zip(&e).enumerate() {
        let ok = if y.is_nan() {
            x.is_nan()
        } else if y.is_infinite() || exact {
            x == y
        } else {
            (x - y).abs() <= atol + rtol * y.abs()
        };
        let d = if x == y || (x.is_nan() && y.is_nan()) {
            0.0
        } else if (x - y).is_nan() {
            f64::INFINITY
        } else {
            (x - y).abs()
        };
        worst = worst.max(d);
        if !ok {
            bad += 1;
            if worst_bad.is_none_or(|(_, w)| d > w) {
                worst_bad = Some((i, d));
            }
        }
    }
    match worst_bad {
        None => Ok(worst),
        Some((i, d)) => Err(Mismatch {
            message: format!(
                "{bad} of {} values differ; worst at element {i}: got {}, expected {} (|diff| {d:.3e}, rtol {rtol}, atol {atol})",
                a.len(),
                a[i],
                e[i]
            ),
            worst,
            bad,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use backplane_core::TensorInfo;

    fn f32s(v: &[f32]) -> Tensor {
        Tensor::from_f64_values(
            TensorInfo::new(DataType::F32, vec![v.len()]),
            &v.iter().map(|&x| f64::from(x)).collect::<Vec<_>>(),
        )
        .unwrap()
    }

    #[test]
    fn within_tolerance_passes_with_the_worst_difference() {
        let r = compare(&f32s(&[1.0, 2.0005]), &f32s(&[1.0, 2.0]), 0.0, 1e-3);
        let worst = r.unwrap();
        assert!(worst > 4e-4 && worst < 6e-4, "{worst}");
    }

    #[test]
    fn the_worst_bad_element_is_named_and_bad_ones_counted() {
        let m = compare(&f32s(&[1.5, 2.0, 9.0]), &f32s(&[1.0, 2.0, 3.0]), 0.0, 0.1).unwrap_err();
        assert_eq!(m.bad, 2);
        assert_eq!(m.worst, 6.0);
        assert!(m.message.contains("worst at element 2"), "{m}");
    }

    #[test]
    fn nan_meets_nan_only_and_infinities_their_equal() {
        assert!(compare(&f32s(&[f32::NAN]), &f32s(&[f32::NAN]), 0.0, 0.0).is_ok());
        assert!(compare(&f32s(&[1.0]), &f32s(&[f32::NAN]), 1.0, 1.0).is_err());
        assert!(compare(&f32s(&[f32::NAN]), &f32s(&[1.0]), 1.0, 1.0).is_err());
        let inf = f32::INFINITY;
        assert!(compare(&f32s(&[inf]), &f32s(&[inf]), 0.0, 0.0).is_ok());
        assert!(compare(&f32s(&[f32::MAX]), &f32s(&[inf]), 1.0, 1.0).is_err());
    }

    #[test]
    fn integers_are_exact_and_types_and_shapes_must_agree() {
        let i = |v: &[f64]| {
            Tensor::from_f64_values(TensorInfo::new(DataType::I32, vec![v.len()]), v).unwrap()
        };
        assert!(compare(&i(&[3.0]), &i(&[4.0]), 1.0, 1.0).is_err());
        assert!(compare(&i(&[3.0]), &i(&[3.0]), 0.0, 0.0).is_ok());
        let m = compare(&i(&[3.0]), &f32s(&[3.0]), 1.0, 1.0).unwrap_err();
        assert_eq!(m.worst, f64::INFINITY);
        assert!(compare(&f32s(&[1.0, 2.0]), &f32s(&[1.0]), 1.0, 1.0).is_err());
    }
}
