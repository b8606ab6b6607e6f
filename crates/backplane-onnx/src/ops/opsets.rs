//! Which operators the importer accepts, by domain and opset: the default domain from
//! [`MIN_OPSET`] on (earlier for the few operators whose definition has not changed in a
//! way that matters since), and exactly the operators implemented of `ai.onnx.ml` and
//! `ai.onnx.preview.training`.

use super::{ml, training, Lowering, NodeCx, Tx};
use crate::import::MIN_OPSET;

/// The traditional machine-learning domain.
pub(crate) const ML_DOMAIN: &str = "ai.onnx.ml";
/// The training-preview domain.
pub(crate) const TRAINING_DOMAIN: &str = "ai.onnx.preview.training";

/// Default-domain operators imported from an opset older than [`MIN_OPSET`]: their
/// definition at that opset means what the current one does.
const EARLY_OPS: &[(&str, i64)] = &[
    // Not-1 is still the current definition.
    ("Not", 1),
    // Identity-1 and Shape-1, Size-1: later versions only add types (and Shape's start/end
    // attributes, which default to the whole shape).
    ("Identity", 1),
    ("Shape", 1),
    ("Size", 1),
];

/// The earliest default-domain opset the importer translates `op_type` from.
pub(crate) fn earliest_opset(op_type: &str) -> i64 {
    EARLY_OPS
        .iter()
        .find(|(name, _)| *name == op_type)
        .map_or(MIN_OPSET, |&(_, v)| v)
}

/// The operators of the non-default domains the importer translates.
const DOMAIN_OPS: &[(&str, &[&str])] = &[
    (
        ML_DOMAIN,
        &["Binarizer", "ArrayFeatureExtractor", "TreeEnsemble"],
    ),
    (TRAINING_DOMAIN, &["Adagrad", "Adam", "Momentum"]),
];

/// Whether the importer translates some operators of the (non-default) `domain`.
pub(crate) fn known_domain(domain: &str) -> bool {
    DOMAIN_OPS.iter().any(|(d, _)| *d == domain)
}

/// Whether the importer translates `op_type` of the (non-default) `domain`.
pub(crate) fn domain_op_supported(domain: &str, op_type: &str) -> bool {
    DOMAIN_OPS
        .iter()
        .any(|(d, ops)| *d == domain && ops.contains(&op_type))
}

/// The translation of a node of a non-default domain; `None` for the default domain.
pub(super) fn translate_other_domain(cx: &NodeCx<'_>) -> Option<Tx<Lowering>> {
    let domain = cx.node.domain.as_deref().unwrap_or("");
    match domain {
        "" | "ai.onnx" => None,
        ML_DOMAIN => Some(ml::translate(cx)),
        TRAINING_DOMAIN => Some(training::translate(cx)),
        other => Some(Err(super::TxError::Unsupported(format!(
            "operators of the domain '{other}' are not supported"
        )))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn early_operators_and_domains() {
        assert_eq!(earliest_opset("Not"), 1);
        assert_eq!(earliest_opset("Relu"), MIN_OPSET);
        assert!(known_domain(ML_DOMAIN) && known_domain(TRAINING_DOMAIN));
        assert!(!known_domain("com.microsoft"));
        assert!(domain_op_supported(ML_DOMAIN, "TreeEnsemble"));
        assert!(!domain_op_supported(ML_DOMAIN, "LabelEncoder"));
        assert!(!domain_op_supported(TRAINING_DOMAIN, "Binarizer"));
        assert!(domain_op_supported(TRAINING_DOMAIN, "Momentum"));
    }
}
