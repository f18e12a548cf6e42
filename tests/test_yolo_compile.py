"""What edgetpu_compiler says to YOLO users, and what edgeapp makes of it (core/edgetpu/compiler_output).

The samples are the compiler's lines as users posted them for YOLO exports (google-coral/edgetpu
#449, #601, libedgetpu #71, ultralytics/hub #1136), trimmed to the lines that matter.
"""

from __future__ import annotations

import pytest

from edgeapp.core.edgetpu import compiler_output as CO
from edgeapp.errors import ExitCode

LARGE_ACTIVATIONS = """\
Edge TPU Compiler version 16.0.384591198
Started a compilation timeout timer of 180 seconds.
ERROR: Restored original execution plan after delegate application failure.
Compilation failed: Compilation failed due to large activation tensors in model.
Compilation child process completed within timeout period.
Compilation failed! 
"""

OP_VERSION = """\
Edge TPU Compiler version 16.0.384591198
ERROR: Didn't find op for builtin opcode 'EXP' version '2'. An older version of this builtin might be supported. Are you using an old TFLite binary with a newer model?

ERROR: Registration failed.

Invalid model: model_2.tflite
Model could not be parsed
"""

TIMEOUT = """\
Edge TPU Compiler version 16.0.384591198
Started a compilation timeout timer of 180 seconds.
Compilation timeout. This is usually caused by large activations.
Compilation failed! 
"""

SUBGRAPH = """\
Edge TPU Compiler version 16.0.384591198
Started a compilation timeout timer of 180 seconds.

Model compiled successfully in 4215 ms.

Input model: yolov8n_saved_model/yolov8n_full_integer_quant.tflite
Input size: 3.32MiB
Output model: yolov8n_saved_model/yolov8n_full_integer_quant_edgetpu.tflite
Output size: 3.60MiB
On-chip memory used for caching model parameters: 3.31MiB
On-chip memory remaining for caching model parameters: 4.27MiB
Off-chip memory used for streaming uncached model parameters: 0.00B
Number of Edge TPU subgraphs: 1
Total number of operations: 169
Operation log: yolov8n_saved_model/yolov8n_full_integer_quant_edgetpu.log

Model successfully compiled but not all operations are supported by the Edge TPU. A percentage of the model will instead run on the CPU, which is slower. If possible, consider updating your model to use only operations supported by the Edge TPU. For details, visit g.co/coral/model-reqs.
Number of operations that will run on Edge TPU: 160
Number of operations that will run on CPU: 9

Operator                       Count      Status

ADD                            2          More than one subgraph is not supported
ADD                            6          Mapped to Edge TPU
LOGISTIC                       57         Mapped to Edge TPU
LOGISTIC                       1          More than one subgraph is not supported
MAX_POOL_2D                    3          Mapped to Edge TPU
PAD                            7          Mapped to Edge TPU
RESIZE_NEAREST_NEIGHBOR        2          Mapped to Edge TPU
QUANTIZE                       1          More than one subgraph is not supported
QUANTIZE                       1          Mapped to Edge TPU
CONV_2D                        63         Mapped to Edge TPU
CONV_2D                        1          More than one subgraph is not supported
CONCATENATION                  16         Mapped to Edge TPU
CONCATENATION                  1          Operation is otherwise supported, but not mapped due to some unspecified limitation
CONCATENATION                  1          More than one subgraph is not supported
SOFTMAX                        1          Mapped to Edge TPU
MUL                            2          More than one subgraph is not supported
SUB                            2          Mapped to Edge TPU
Compilation child process completed within timeout period.
Compilation succeeded! 
"""


@pytest.mark.parametrize("text,kind,words", [
    (LARGE_ACTIVATIONS, "large_activations", ["large activation tensors", "on-chip memory",
                                              "smaller imgsz", "--search-delegate"]),
    (OP_VERSION, "op_version", ["EXP version 2", "newer than this compiler knows"]),
    (TIMEOUT, "timeout", ["Compilation timeout", "--timeout", "smaller imgsz"]),
])
def test_yolo_failures_name_the_fix(text, kind, words):
    result = CO.parse_stdout(text)
    assert [f.kind for f in result.failures] == [kind]
    judgement = CO.judge(result, 1)
    assert judgement.verdict == "failed" and judgement.exit_code == ExitCode.COMPILE_FAILED
    (error,) = judgement.errors
    assert "\n" not in error
    for w in words:
        assert w in error


def test_a_cut_graph_is_explained():
    result = CO.parse_stdout(SUBGRAPH)
    assert (result.ops_tpu, result.ops_cpu, result.total_ops) == (160, 9, 169)
    judgement = CO.judge(result, 0)
    assert judgement.verdict == "partially_mapped" and judgement.errors == []
    cpu, cut, limit = judgement.warnings
    assert "9 of 169 operation(s) run on the CPU" in cpu
    assert "More than one subgraph is not supported" in cut and "--search-delegate" in cut
    assert "unspecified limitation" in limit and "smaller imgsz" in limit


def test_a_fully_mapped_or_plain_partial_run_gets_no_cut_notes():
    table = SUBGRAPH.replace("More than one subgraph is not supported", "Operation not supported")
    table = table.replace("Operation is otherwise supported, but not mapped due to some "
                          "unspecified limitation", "Operation not supported")
    assert CO.partial_causes(CO.parse_stdout(table)) == []


@pytest.mark.parametrize("imgsz,tpu,total,failed,expected", [
    (640, 160, 169, False, 512),  # 94 % mapped: one step down the ladder
    (640, 100, 200, False, 416),  # half mapped: 640 x sqrt(0.5) = 452 -> 416
    (320, 10, 100, False, 160),   # little mapped: the smallest usual size
    (640, 0, 100, False, 160),
    (640, None, None, True, 416),  # failed on large activations: as if half mapped
    (320, 169, 169, False, None),  # fully mapped: nothing to suggest
    (160, 10, 100, False, None),   # already the smallest
    (333, 1, 2, False, 224),       # an odd size: the ladder's sizes below it
])
def test_suggest_imgsz(imgsz, tpu, total, failed, expected):
    assert CO.suggest_imgsz(imgsz, tpu, total, failed) == expected
