"""TFLite schema enums (from tensorflow/lite/schema/schema.fbs), as plain data."""

from typing import Tuple

# BuiltinOperator: index = builtin code.
BUILTIN_OPS: Tuple[str, ...] = (
    "ADD", "AVERAGE_POOL_2D", "CONCATENATION", "CONV_2D",
    "DEPTHWISE_CONV_2D", "DEPTH_TO_SPACE", "DEQUANTIZE", "EMBEDDING_LOOKUP",
    "FLOOR", "FULLY_CONNECTED", "HASHTABLE_LOOKUP", "L2_NORMALIZATION",
    "L2_POOL_2D", "LOCAL_RESPONSE_NORMALIZATION", "LOGISTIC", "LSH_PROJECTION",
    "LSTM", "MAX_POOL_2D", "MUL", "RELU",
    "RELU_N1_TO_1", "RELU6", "RESHAPE", "RESIZE_BILINEAR",
    "RNN", "SOFTMAX", "SPACE_TO_DEPTH", "SVDF",
    "TANH", "CONCAT_EMBEDDINGS", "SKIP_GRAM", "CALL",
    "CUSTOM", "EMBEDDING_LOOKUP_SPARSE", "PAD", "UNIDIRECTIONAL_SEQUENCE_RNN",
    "GATHER", "BATCH_TO_SPACE_ND", "SPACE_TO_BATCH_ND", "TRANSPOSE",
    "MEAN", "SUB", "DIV", "SQUEEZE",
    "UNIDIRECTIONAL_SEQUENCE_LSTM", "STRIDED_SLICE", "BIDIRECTIONAL_SEQUENCE_RNN", "EXP",
    "TOPK_V2", "SPLIT", "LOG_SOFTMAX", "DELEGATE",
    "BIDIRECTIONAL_SEQUENCE_LSTM", "CAST", "PRELU", "MAXIMUM",
    "ARG_MAX", "MINIMUM", "LESS", "NEG",
    "PADV2", "GREATER", "GREATER_EQUAL", "LESS_EQUAL",
    "SELECT", "SLICE", "SIN", "TRANSPOSE_CONV",
    "SPARSE_TO_DENSE", "TILE", "EXPAND_DIMS", "EQUAL",
    "NOT_EQUAL", "LOG", "SUM", "SQRT",
    "RSQRT", "SHAPE", "POW", "ARG_MIN",
    "FAKE_QUANT", "REDUCE_PROD", "REDUCE_MAX", "PACK",
    "LOGICAL_OR", "ONE_HOT", "LOGICAL_AND", "LOGICAL_NOT",
    "UNPACK", "REDUCE_MIN", "FLOOR_DIV", "REDUCE_ANY",
    "SQUARE", "ZEROS_LIKE", "FILL", "FLOOR_MOD",
    "RANGE", "RESIZE_NEAREST_NEIGHBOR", "LEAKY_RELU", "SQUARED_DIFFERENCE",
    "MIRROR_PAD", "ABS", "SPLIT_V", "UNIQUE",
    "CEIL", "REVERSE_V2", "ADD_N", "GATHER_ND",
    "COS", "WHERE", "RANK", "ELU",
    "REVERSE_SEQUENCE", "MATRIX_DIAG", "QUANTIZE", "MATRIX_SET_DIAG",
    "ROUND", "HARD_SWISH", "IF", "WHILE",
    "NON_MAX_SUPPRESSION_V4", "NON_MAX_SUPPRESSION_V5", "SCATTER_ND", "SELECT_V2",
    "DENSIFY", "SEGMENT_SUM", "BATCH_MATMUL", "PLACEHOLDER_FOR_GREATER_OP_CODES",
    "CUMSUM", "CALL_ONCE", "BROADCAST_TO", "RFFT2D",
    "CONV_3D", "IMAG", "REAL", "COMPLEX_ABS",
    "HASHTABLE", "HASHTABLE_FIND", "HASHTABLE_IMPORT", "HASHTABLE_SIZE",
    "REDUCE_ALL", "CONV_3D_TRANSPOSE", "VAR_HANDLE", "READ_VARIABLE",
    "ASSIGN_VARIABLE", "BROADCAST_ARGS", "RANDOM_STANDARD_NORMAL", "BUCKETIZE",
    "RANDOM_UNIFORM", "MULTINOMIAL", "GELU", "DYNAMIC_UPDATE_SLICE",
    "RELU_0_TO_1", "UNSORTED_SEGMENT_PROD", "UNSORTED_SEGMENT_MAX", "UNSORTED_SEGMENT_SUM",
    "ATAN2", "UNSORTED_SEGMENT_MIN", "SIGN", "BITCAST",
    "BITWISE_XOR", "RIGHT_SHIFT", "STABLEHLO_LOGISTIC", "STABLEHLO_ADD",
    "STABLEHLO_DIVIDE", "STABLEHLO_MULTIPLY", "STABLEHLO_MAXIMUM", "STABLEHLO_RESHAPE",
    "STABLEHLO_CLAMP", "STABLEHLO_CONCATENATE", "STABLEHLO_BROADCAST_IN_DIM", "STABLEHLO_CONVOLUTION",
    "STABLEHLO_SLICE", "STABLEHLO_CUSTOM_CALL", "STABLEHLO_REDUCE", "STABLEHLO_ABS",
    "STABLEHLO_AND", "STABLEHLO_COSINE", "STABLEHLO_EXPONENTIAL", "STABLEHLO_FLOOR",
    "STABLEHLO_LOG", "STABLEHLO_MINIMUM", "STABLEHLO_NEGATE", "STABLEHLO_OR",
    "STABLEHLO_POWER", "STABLEHLO_REMAINDER", "STABLEHLO_RSQRT", "STABLEHLO_SELECT",
    "STABLEHLO_SUBTRACT", "STABLEHLO_TANH", "STABLEHLO_SCATTER", "STABLEHLO_COMPARE",
    "STABLEHLO_CONVERT", "STABLEHLO_DYNAMIC_SLICE", "STABLEHLO_DYNAMIC_UPDATE_SLICE", "STABLEHLO_PAD",
    "STABLEHLO_IOTA", "STABLEHLO_DOT_GENERAL", "STABLEHLO_REDUCE_WINDOW", "STABLEHLO_SORT",
    "STABLEHLO_WHILE", "STABLEHLO_GATHER", "STABLEHLO_TRANSPOSE", "DILATE",
    "STABLEHLO_RNG_BIT_GENERATOR", "REDUCE_WINDOW", "STABLEHLO_COMPOSITE", "STABLEHLO_SHIFT_LEFT",
    "STABLEHLO_CBRT", "STABLEHLO_CASE",
)

# TensorType: index = type code; names as numpy spells them where it can.
TENSOR_TYPES: Tuple[str, ...] = (
    "float32", "float16", "int32", "uint8", "int64", "string",
    "bool", "int16", "complex64", "int8", "float64", "complex128",
    "uint64", "resource", "variant", "uint32", "uint16", "int4",
    "bfloat16", "int2", "uint4", "float8_e4m3fn", "float8_e5m2",
)

# BuiltinOptions: for each builtin operator edgeapp reads or writes options of, the union index of
# its options table and the table's fields in schema.fbs order (a field's slot is its position).
_POOL_FIELDS = ("padding", "stride_w", "stride_h", "filter_width", "filter_height",
                "fused_activation_function")
BUILTIN_OPTIONS = {
    "CONV_2D": (1, ("padding", "stride_w", "stride_h", "fused_activation_function",
                    "dilation_w_factor", "dilation_h_factor")),
    "DEPTHWISE_CONV_2D": (2, ("padding", "stride_w", "stride_h", "depth_multiplier",
                              "fused_activation_function", "dilation_w_factor", "dilation_h_factor")),
    "AVERAGE_POOL_2D": (5, _POOL_FIELDS),
    "MAX_POOL_2D": (5, _POOL_FIELDS),
    "FULLY_CONNECTED": (8, ("fused_activation_function", "weights_format", "keep_num_dims",
                            "asymmetric_quantize_inputs")),
    "SOFTMAX": (9, ("beta",)),
    "ADD": (11, ("fused_activation_function", "pot_scale_int16")),
    "CONCATENATION": (10, ("axis", "fused_activation_function")),
    "L2_NORMALIZATION": (12, ("fused_activation_function",)),
    "STRIDED_SLICE": (32, ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask",
                           "shrink_axis_mask", "offset")),
    "PACK": (59, ("values_count", "axis")),
    "BATCH_MATMUL": (101, ("adj_x", "adj_y", "asymmetric_quantize_inputs")),
}
PADDING = {"SAME": 0, "VALID": 1}
ACTIVATIONS = {"NONE": 0, "RELU": 1, "RELU_N1_TO_1": 2, "RELU6": 3, "TANH": 4, "SIGN_BIT": 5}


def options_type(op: str) -> int:
    """The BuiltinOptions union index of `op`'s options table."""
    return BUILTIN_OPTIONS[op][0]


def option_slot(op: str, name: str) -> int:
    """The vtable slot of field `name` in `op`'s options table."""
    return BUILTIN_OPTIONS[op][1].index(name)
