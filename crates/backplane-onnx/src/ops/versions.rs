//! The operator versions the importer knows, and the check that refuses newer ones.
//!
//! ONNX versions an operator by the opset that last changed it (its `since_version`): a model
//! importing opset N of a domain uses, for each operator, the newest definition whose version
//! is at most N. The tables below give, for every operator the importer translates, the
//! version of the newest definition it implements (those of the `onnx` 1.17 package, whose
//! default domain ends at opset 22). A model importing a newer opset of a domain than the
//! importer knows may use a definition the importer has never seen (a new attribute, another
//! meaning), so its operators are refused rather than misread.

use super::opsets::{ML_DOMAIN, TRAINING_DOMAIN};

/// The newest IR version (`ModelProto.ir_version`) the importer knows.
pub(crate) const NEWEST_IR_VERSION: i64 = 10;

/// The newest opset the importer knows for each domain it translates (`""`: `ai.onnx`).
const NEWEST_OPSETS: &[(&str, i64)] = &[("", 22), (ML_DOMAIN, 5), (TRAINING_DOMAIN, 1)];

/// Default-domain operators and the version of their newest definition the importer implements.
const DEFAULT_DOMAIN_OPS: &[(&str, i64)] = &[
    ("Abs", 13),
    ("Acos", 22),
    ("Acosh", 22),
    ("Add", 14),
    ("AffineGrid", 20),
    ("And", 7),
    ("ArgMax", 13),
    ("ArgMin", 13),
    ("Asin", 22),
    ("Asinh", 22),
    ("Atan", 22),
    ("Atanh", 22),
    ("AveragePool", 22),
    ("BatchNormalization", 15),
    ("BitShift", 11),
    ("BitwiseAnd", 18),
    ("BitwiseNot", 18),
    ("BitwiseOr", 18),
    ("BitwiseXor", 18),
    ("BlackmanWindow", 17),
    ("Cast", 21),
    ("CastLike", 21),
    ("Ceil", 13),
    ("Celu", 12),
    ("CenterCropPad", 18),
    ("Clip", 13),
    ("Compress", 11),
    ("Concat", 13),
    ("ConcatFromSequence", 11),
    ("Constant", 21),
    ("ConstantOfShape", 21),
    ("Conv", 22),
    ("ConvInteger", 10),
    ("ConvTranspose", 22),
    ("Cos", 22),
    ("Cosh", 22),
    ("CumSum", 14),
    ("DFT", 20),
    ("DeformConv", 22),
    ("DepthToSpace", 13),
    ("DequantizeLinear", 21),
    ("Det", 22),
    ("Div", 14),
    ("Dropout", 22),
    ("DynamicQuantizeLinear", 11),
    ("Einsum", 12),
    ("Elu", 22),
    ("Equal", 19),
    ("Erf", 13),
    ("Exp", 13),
    ("Expand", 13),
    ("EyeLike", 22),
    ("Flatten", 21),
    ("Floor", 13),
    ("GRU", 22),
    ("Gather", 13),
    ("GatherElements", 13),
    ("GatherND", 13),
    ("Gelu", 20),
    ("Gemm", 13),
    ("GlobalAveragePool", 22),
    ("GlobalMaxPool", 22),
    ("Greater", 13),
    ("GreaterOrEqual", 16),
    ("GridSample", 22),
    ("GroupNormalization", 21),
    ("HammingWindow", 17),
    ("HannWindow", 17),
    ("HardSigmoid", 22),
    ("HardSwish", 22),
    ("Hardmax", 13),
    ("Identity", 21),
    ("If", 21),
    ("InstanceNormalization", 22),
    ("IsInf", 20),
    ("IsNaN", 20),
    ("LRN", 13),
    ("LSTM", 22),
    ("LayerNormalization", 17),
    ("LeakyRelu", 16),
    ("Less", 13),
    ("LessOrEqual", 16),
    ("Log", 13),
    ("LogSoftmax", 13),
    ("Loop", 21),
    ("LpPool", 22),
    ("MatMul", 13),
    ("MatMulInteger", 10),
    ("Max", 13),
    ("MaxPool", 22),
    ("MaxUnpool", 22),
    ("Mean", 13),
    ("MeanVarianceNormalization", 13),
    ("MelWeightMatrix", 17),
    ("Min", 13),
    ("Mish", 22),
    ("Mod", 13),
    ("Mul", 14),
    ("Neg", 13),
    ("NegativeLogLikelihoodLoss", 22),
    ("NonMaxSuppression", 11),
    ("NonZero", 13),
    ("Not", 1),
    ("OneHot", 11),
    ("Optional", 15),
    ("OptionalGetElement", 18),
    ("OptionalHasElement", 18),
    ("Or", 7),
    ("PRelu", 16),
    ("Pad", 21),
    ("Pow", 15),
    ("QLinearConv", 10),
    ("QLinearMatMul", 21),
    ("QuantizeLinear", 21),
    ("RNN", 22),
    ("Range", 11),
    ("Reciprocal", 13),
    ("ReduceLogSum", 18),
    ("ReduceLogSumExp", 18),
    ("ReduceMax", 20),
    ("ReduceMean", 18),
    ("ReduceMin", 20),
    ("ReduceProd", 18),
    ("ReduceSum", 13),
    ("ReduceSumSquare", 18),
    ("Relu", 14),
    ("Reshape", 21),
    ("Resize", 19),
    ("ReverseSequence", 10),
    ("RoiAlign", 22),
    ("Round", 22),
    ("STFT", 17),
    ("Scan", 21),
    ("Scatter", 11),
    ("ScatterElements", 18),
    ("ScatterND", 18),
    ("Selu", 22),
    ("SequenceAt", 11),
    ("SequenceConstruct", 11),
    ("SequenceEmpty", 11),
    ("SequenceErase", 11),
    ("SequenceInsert", 11),
    ("SequenceLength", 11),
    ("SequenceMap", 17),
    ("Shape", 21),
    ("Shrink", 9),
    ("Sigmoid", 13),
    ("Sign", 13),
    ("Sin", 22),
    ("Sinh", 22),
    ("Size", 21),
    ("Slice", 13),
    ("Softmax", 13),
    ("SoftmaxCrossEntropyLoss", 13),
    ("Softplus", 22),
    ("Softsign", 22),
    ("SpaceToDepth", 13),
    ("Split", 18),
    ("SplitToSequence", 11),
    ("Sqrt", 13),
    ("Squeeze", 21),
    ("Sub", 14),
    ("Sum", 13),
    ("Tan", 22),
    ("Tanh", 13),
    ("TfIdfVectorizer", 9),
    ("ThresholdedRelu", 22),
    ("Tile", 13),
    ("TopK", 11),
    ("Transpose", 21),
    ("Trilu", 14),
    ("Unique", 11),
    ("Unsqueeze", 21),
    ("Upsample", 10),
    ("Where", 16),
    ("Xor", 7),
];

/// `ai.onnx.ml` operators and their newest implemented versions.
const ML_OPS: &[(&str, i64)] = &[
    ("ArrayFeatureExtractor", 1),
    ("Binarizer", 1),
    ("TreeEnsemble", 5),
];

/// `ai.onnx.preview.training` operators and their newest implemented versions.
const TRAINING_OPS: &[(&str, i64)] = &[("Adagrad", 1), ("Adam", 1), ("Momentum", 1)];

/// The table of `domain` (`""` for the default domain).
fn table(domain: &str) -> &'static [(&'static str, i64)] {
    match domain {
        "" => DEFAULT_DOMAIN_OPS,
        ML_DOMAIN => ML_OPS,
        TRAINING_DOMAIN => TRAINING_OPS,
        _ => &[],
    }
}

/// The newest opset of `domain` (`""` for the default domain) the importer knows.
pub(crate) fn newest_opset(domain: &str) -> Option<i64> {
    NEWEST_OPSETS
        .iter()
        .find(|(d, _)| *d == domain)
        .map(|&(_, v)| v)
}

/// The version of the newest definition of `op_type` (of `domain`, `""` for the default one)
/// the importer implements; `None` for an operator it does not translate.
pub(crate) fn newest_version(domain: &str, op_type: &str) -> Option<i64> {
    table(domain)
        .iter()
        .find(|(name, _)| *name == op_type)
        .map(|&(_, v)| v)
}

/// Why a node of `op_type` cannot be imported when the model imports `opset` of `domain`
/// (`""` for the default domain): the opset is newer than the importer knows, so the operator
/// may have a definition the importer has never seen. `None` when the version is known (or
/// the operator is not one the importer translates: that is reported elsewhere).
pub(crate) fn too_new(domain: &str, op_type: &str, opset: i64) -> Option<String> {
    let known = newest_version(domain, op_type)?;
    let newest = newest_opset(domain)?;
    if opset <= newest {
        return None;
    }
    let domain_name = if domain.is_empty() { "ai.onnx" } else { domain };
    Some(format!(
        "{op_type}: the model imports opset {opset} of {domain_name}; this importer knows \
         {domain_name} up to opset {newest} and {op_type} up to version {known} (the semantics \
         of later versions may differ)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_stay_within_the_known_opsets() {
        for (domain, _) in NEWEST_OPSETS {
            let newest = newest_opset(domain).unwrap_or(0);
            for (op, v) in table(domain) {
                assert!(*v >= 1 && *v <= newest, "{domain}::{op} version {v}");
            }
        }
    }

    #[test]
    fn versions_beyond_the_newest_opset_are_refused() {
        assert_eq!(newest_version("", "SpaceToDepth"), Some(13));
        assert_eq!(too_new("", "Relu", 22), None);
        let reason = too_new("", "SpaceToDepth", 28).unwrap_or_default();
        assert!(
            reason.contains("opset 28 of ai.onnx") && reason.contains("up to version 13"),
            "{reason}"
        );
        assert!(too_new(ML_DOMAIN, "TreeEnsemble", 6).is_some());
        assert_eq!(too_new(ML_DOMAIN, "TreeEnsemble", 5), None);
        assert_eq!(too_new("", "NoSuchOp", 99), None);
    }
}
