//! The parts of TFLite's FlatBuffers schema (`tensorflow/compiler/mlir/lite/schema/schema.fbs`,
//! namespace `tflite`, file identifier `TFL3`) the importer reads: field slots of the tables
//! (a field's slot is its position in the table's declaration, a union taking two: its type,
//! then its value), the union types of the operator options it reads, the builtin operator
//! codes it lowers and the names of all of them, for messages.

/// `table Model`.
pub(crate) mod model {
    pub const VERSION: usize = 0;
    pub const OPERATOR_CODES: usize = 1;
    pub const SUBGRAPHS: usize = 2;
    pub const BUFFERS: usize = 4;
}

/// `table OperatorCode`.
pub(crate) mod operator_code {
    pub const DEPRECATED_BUILTIN_CODE: usize = 0;
    pub const CUSTOM_CODE: usize = 1;
    pub const BUILTIN_CODE: usize = 3;
}

/// `table SubGraph`.
pub(crate) mod subgraph {
    pub const TENSORS: usize = 0;
    pub const INPUTS: usize = 1;
    pub const OUTPUTS: usize = 2;
    pub const OPERATORS: usize = 3;
}

/// `table Buffer`.
pub(crate) mod buffer {
    pub const DATA: usize = 0;
    pub const OFFSET: usize = 1;
    pub const SIZE: usize = 2;
}

/// `table Tensor`.
pub(crate) mod tensor {
    pub const SHAPE: usize = 0;
    pub const TYPE: usize = 1;
    pub const BUFFER: usize = 2;
    pub const NAME: usize = 3;
    pub const QUANTIZATION: usize = 4;
    pub const IS_VARIABLE: usize = 5;
    pub const SPARSITY: usize = 6;
}

/// `table SparsityParameters`.
pub(crate) mod sparsity {
    pub const TRAVERSAL_ORDER: usize = 0;
    pub const BLOCK_MAP: usize = 1;
    pub const DIM_METADATA: usize = 2;
}

/// `table DimensionMetadata` (format: DENSE = 0, SPARSE_CSR = 1; the index vectors are the
/// union `SparseIndexVector`: Int32Vector = 1, Uint16Vector = 2, Uint8Vector = 3, each a
/// table whose field 0 is `values`).
pub(crate) mod dim_metadata {
    pub const FORMAT: usize = 0;
    pub const DENSE_SIZE: usize = 1;
    pub const ARRAY_SEGMENTS_TYPE: usize = 2;
    pub const ARRAY_SEGMENTS: usize = 3;
    pub const ARRAY_INDICES_TYPE: usize = 4;
    pub const ARRAY_INDICES: usize = 5;
}

/// `table QuantizationParameters`.
pub(crate) mod quantization {
    pub const SCALE: usize = 2;
    pub const ZERO_POINT: usize = 3;
    pub const DETAILS_TYPE: usize = 4;
    pub const QUANTIZED_DIMENSION: usize = 6;
}

/// `table Operator`.
pub(crate) mod operator {
    pub const OPCODE_INDEX: usize = 0;
    pub const INPUTS: usize = 1;
    pub const OUTPUTS: usize = 2;
    pub const BUILTIN_OPTIONS_TYPE: usize = 3;
    pub const BUILTIN_OPTIONS: usize = 4;
    pub const CUSTOM_OPTIONS: usize = 5;
}

/// `enum TensorType`.
pub(crate) mod tensor_type {
    pub const NAMES: [&str; 19] = [
        "FLOAT32",
        "FLOAT16",
        "INT32",
        "UINT8",
        "INT64",
        "STRING",
        "BOOL",
        "INT16",
        "COMPLEX64",
        "INT8",
        "FLOAT64",
        "COMPLEX128",
        "UINT64",
        "RESOURCE",
        "VARIANT",
        "UINT32",
        "UINT16",
        "INT4",
        "BFLOAT16",
    ];
}

/// `enum Padding`.
pub(crate) const PADDING_SAME: i8 = 0;

/// `enum ActivationFunctionType`.
pub(crate) mod activation {
    pub const NONE: i8 = 0;
    pub const RELU: i8 = 1;
    pub const RELU_N1_TO_1: i8 = 2;
    pub const RELU6: i8 = 3;
    pub const TANH: i8 = 4;
}

/// Operator options: each table's `union BuiltinOptions` type and its field slots.
pub(crate) mod options {
    /// `Conv2DOptions` (and the first fields of `DepthwiseConv2DOptions`, `Pool2DOptions`).
    pub mod conv2d {
        pub const TYPE: u8 = 1;
        pub const PADDING: usize = 0;
        pub const STRIDE_W: usize = 1;
        pub const STRIDE_H: usize = 2;
        pub const ACTIVATION: usize = 3;
        pub const DILATION_W: usize = 4;
        pub const DILATION_H: usize = 5;
    }
    /// `DepthwiseConv2DOptions`.
    pub mod depthwise {
        pub const TYPE: u8 = 2;
        pub const PADDING: usize = 0;
        pub const STRIDE_W: usize = 1;
        pub const STRIDE_H: usize = 2;
        pub const ACTIVATION: usize = 4;
        pub const DILATION_W: usize = 5;
        pub const DILATION_H: usize = 6;
    }
    /// `Pool2DOptions`.
    pub mod pool2d {
        pub const TYPE: u8 = 5;
        pub const PADDING: usize = 0;
        pub const STRIDE_W: usize = 1;
        pub const STRIDE_H: usize = 2;
        pub const FILTER_W: usize = 3;
        pub const FILTER_H: usize = 4;
        pub const ACTIVATION: usize = 5;
    }
    /// `FullyConnectedOptions`.
    pub mod fully_connected {
        pub const TYPE: u8 = 8;
        pub const ACTIVATION: usize = 0;
        pub const WEIGHTS_FORMAT: usize = 1;
    }
    /// `SoftmaxOptions`.
    pub mod softmax {
        pub const TYPE: u8 = 9;
        pub const BETA: usize = 0;
    }
    /// `ConcatenationOptions`.
    pub mod concatenation {
        pub const TYPE: u8 = 10;
        pub const AXIS: usize = 0;
        pub const ACTIVATION: usize = 1;
    }
    /// `AddOptions`, `SubOptions`, `MulOptions`, `DivOptions`: the activation is field 0.
    pub mod arith {
        pub const ADD: u8 = 11;
        pub const MUL: u8 = 21;
        pub const SUB: u8 = 28;
        pub const DIV: u8 = 29;
        pub const ACTIVATION: usize = 0;
    }
    /// `ResizeBilinearOptions`.
    pub mod resize_bilinear {
        pub const TYPE: u8 = 15;
        pub const ALIGN_CORNERS: usize = 2;
        pub const HALF_PIXEL_CENTERS: usize = 3;
    }
    /// `ResizeNearestNeighborOptions`.
    pub mod resize_nearest {
        pub const TYPE: u8 = 74;
        pub const ALIGN_CORNERS: usize = 0;
        pub const HALF_PIXEL_CENTERS: usize = 1;
    }
    /// `GatherOptions`.
    pub mod gather {
        pub const TYPE: u8 = 23;
        pub const AXIS: usize = 0;
        pub const BATCH_DIMS: usize = 1;
    }
    /// `ReducerOptions`.
    pub mod reducer {
        pub const TYPE: u8 = 27;
        pub const KEEP_DIMS: usize = 0;
    }
    /// `StridedSliceOptions`.
    pub mod strided_slice {
        pub const TYPE: u8 = 32;
        pub const BEGIN_MASK: usize = 0;
        pub const END_MASK: usize = 1;
        pub const ELLIPSIS_MASK: usize = 2;
        pub const NEW_AXIS_MASK: usize = 3;
        pub const SHRINK_AXIS_MASK: usize = 4;
        pub const OFFSET: usize = 5;
    }
    /// `PackOptions`.
    pub mod pack {
        pub const TYPE: u8 = 59;
        pub const AXIS: usize = 1;
    }
    /// `UnpackOptions`.
    pub mod unpack {
        pub const TYPE: u8 = 64;
        pub const AXIS: usize = 1;
    }
    /// `LeakyReluOptions`.
    pub mod leaky_relu {
        pub const TYPE: u8 = 75;
        pub const ALPHA: usize = 0;
    }
    /// `TransposeConvOptions`.
    pub mod transpose_conv {
        pub const TYPE: u8 = 49;
        pub const PADDING: usize = 0;
        pub const STRIDE_W: usize = 1;
        pub const STRIDE_H: usize = 2;
        pub const ACTIVATION: usize = 3;
    }
    /// `BatchMatMulOptions`.
    pub mod batch_matmul {
        pub const TYPE: u8 = 101;
        pub const ADJ_X: usize = 0;
        pub const ADJ_Y: usize = 1;
    }
}

/// TFLite's builtin operator names by code (schema.fbs, `enum BuiltinOperator`).
pub(crate) const BUILTIN_NAMES: [&str; 210] = [
    "ADD",
    "AVERAGE_POOL_2D",
    "CONCATENATION",
    "CONV_2D",
    "DEPTHWISE_CONV_2D",
    "DEPTH_TO_SPACE",
    "DEQUANTIZE",
    "EMBEDDING_LOOKUP",
    "FLOOR",
    "FULLY_CONNECTED",
    "HASHTABLE_LOOKUP",
    "L2_NORMALIZATION",
    "L2_POOL_2D",
    "LOCAL_RESPONSE_NORMALIZATION",
    "LOGISTIC",
    "LSH_PROJECTION",
    "LSTM",
    "MAX_POOL_2D",
    "MUL",
    "RELU",
    "RELU_N1_TO_1",
    "RELU6",
    "RESHAPE",
    "RESIZE_BILINEAR",
    "RNN",
    "SOFTMAX",
    "SPACE_TO_DEPTH",
    "SVDF",
    "TANH",
    "CONCAT_EMBEDDINGS",
    "SKIP_GRAM",
    "CALL",
    "CUSTOM",
    "EMBEDDING_LOOKUP_SPARSE",
    "PAD",
    "UNIDIRECTIONAL_SEQUENCE_RNN",
    "GATHER",
    "BATCH_TO_SPACE_ND",
    "SPACE_TO_BATCH_ND",
    "TRANSPOSE",
    "MEAN",
    "SUB",
    "DIV",
    "SQUEEZE",
    "UNIDIRECTIONAL_SEQUENCE_LSTM",
    "STRIDED_SLICE",
    "BIDIRECTIONAL_SEQUENCE_RNN",
    "EXP",
    "TOPK_V2",
    "SPLIT",
    "LOG_SOFTMAX",
    "DELEGATE",
    "BIDIRECTIONAL_SEQUENCE_LSTM",
    "CAST",
    "PRELU",
    "MAXIMUM",
    "ARG_MAX",
    "MINIMUM",
    "LESS",
    "NEG",
    "PADV2",
    "GREATER",
    "GREATER_EQUAL",
    "LESS_EQUAL",
    "SELECT",
    "SLICE",
    "SIN",
    "TRANSPOSE_CONV",
    "SPARSE_TO_DENSE",
    "TILE",
    "EXPAND_DIMS",
    "EQUAL",
    "NOT_EQUAL",
    "LOG",
    "SUM",
    "SQRT",
    "RSQRT",
    "SHAPE",
    "POW",
    "ARG_MIN",
    "FAKE_QUANT",
    "REDUCE_PROD",
    "REDUCE_MAX",
    "PACK",
    "LOGICAL_OR",
    "ONE_HOT",
    "LOGICAL_AND",
    "LOGICAL_NOT",
    "UNPACK",
    "REDUCE_MIN",
    "FLOOR_DIV",
    "REDUCE_ANY",
    "SQUARE",
    "ZEROS_LIKE",
    "FILL",
    "FLOOR_MOD",
    "RANGE",
    "RESIZE_NEAREST_NEIGHBOR",
    "LEAKY_RELU",
    "SQUARED_DIFFERENCE",
    "MIRROR_PAD",
    "ABS",
    "SPLIT_V",
    "UNIQUE",
    "CEIL",
    "REVERSE_V2",
    "ADD_N",
    "GATHER_ND",
    "COS",
    "WHERE",
    "RANK",
    "ELU",
    "REVERSE_SEQUENCE",
    "MATRIX_DIAG",
    "QUANTIZE",
    "MATRIX_SET_DIAG",
    "ROUND",
    "HARD_SWISH",
    "IF",
    "WHILE",
    "NON_MAX_SUPPRESSION_V4",
    "NON_MAX_SUPPRESSION_V5",
    "SCATTER_ND",
    "SELECT_V2",
    "DENSIFY",
    "SEGMENT_SUM",
    "BATCH_MATMUL",
    "PLACEHOLDER_FOR_GREATER_OP_CODES",
    "CUMSUM",
    "CALL_ONCE",
    "BROADCAST_TO",
    "RFFT2D",
    "CONV_3D",
    "IMAG",
    "REAL",
    "COMPLEX_ABS",
    "HASHTABLE",
    "HASHTABLE_FIND",
    "HASHTABLE_IMPORT",
    "HASHTABLE_SIZE",
    "REDUCE_ALL",
    "CONV_3D_TRANSPOSE",
    "VAR_HANDLE",
    "READ_VARIABLE",
    "ASSIGN_VARIABLE",
    "BROADCAST_ARGS",
    "RANDOM_STANDARD_NORMAL",
    "BUCKETIZE",
    "RANDOM_UNIFORM",
    "MULTINOMIAL",
    "GELU",
    "DYNAMIC_UPDATE_SLICE",
    "RELU_0_TO_1",
    "UNSORTED_SEGMENT_PROD",
    "UNSORTED_SEGMENT_MAX",
    "UNSORTED_SEGMENT_SUM",
    "ATAN2",
    "UNSORTED_SEGMENT_MIN",
    "SIGN",
    "BITCAST",
    "BITWISE_XOR",
    "RIGHT_SHIFT",
    "STABLEHLO_LOGISTIC",
    "STABLEHLO_ADD",
    "STABLEHLO_DIVIDE",
    "STABLEHLO_MULTIPLY",
    "STABLEHLO_MAXIMUM",
    "STABLEHLO_RESHAPE",
    "STABLEHLO_CLAMP",
    "STABLEHLO_CONCATENATE",
    "STABLEHLO_BROADCAST_IN_DIM",
    "STABLEHLO_CONVOLUTION",
    "STABLEHLO_SLICE",
    "STABLEHLO_CUSTOM_CALL",
    "STABLEHLO_REDUCE",
    "STABLEHLO_ABS",
    "STABLEHLO_AND",
    "STABLEHLO_COSINE",
    "STABLEHLO_EXPONENTIAL",
    "STABLEHLO_FLOOR",
    "STABLEHLO_LOG",
    "STABLEHLO_MINIMUM",
    "STABLEHLO_NEGATE",
    "STABLEHLO_OR",
    "STABLEHLO_POWER",
    "STABLEHLO_REMAINDER",
    "STABLEHLO_RSQRT",
    "STABLEHLO_SELECT",
    "STABLEHLO_SUBTRACT",
    "STABLEHLO_TANH",
    "STABLEHLO_SCATTER",
    "STABLEHLO_COMPARE",
    "STABLEHLO_CONVERT",
    "STABLEHLO_DYNAMIC_SLICE",
    "STABLEHLO_DYNAMIC_UPDATE_SLICE",
    "STABLEHLO_PAD",
    "STABLEHLO_IOTA",
    "STABLEHLO_DOT_GENERAL",
    "STABLEHLO_REDUCE_WINDOW",
    "STABLEHLO_SORT",
    "STABLEHLO_WHILE",
    "STABLEHLO_GATHER",
    "STABLEHLO_TRANSPOSE",
    "DILATE",
    "STABLEHLO_RNG_BIT_GENERATOR",
    "REDUCE_WINDOW",
    "STABLEHLO_COMPOSITE",
    "STABLEHLO_SHIFT_LEFT",
    "STABLEHLO_CBRT",
    "STABLEHLO_CASE",
];
