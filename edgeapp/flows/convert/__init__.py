"""Any model to a full-integer int8 TFLite model: one flow, one converter per source format.

  source.py      the model file's source class (Keras, ONNX, Ultralytics YOLO ONNX), told apart once
  onnx_source.py an ONNX file's source: checked graph, onnx2tf conversion, its own metadata
  yolo_source.py a YOLO export's source: letterboxed calibration, box agreement, names, task, sidecar
  onnx_graph.py  .onnx read and checked before TensorFlow loads (inputs, ops, memory)
  onnx.py        .onnx -> onnx2tf's float NHWC graph -> FloatModel (ONNX Runtime runs the original)
  yolo_onnx.py   Ultralytics YOLO exports found in the graph and cut before their decode
  detection.py   a YOLO conversion's letterboxed calibration, detection agreement and sidecar entry
  quantize.py    the one int8 quantization (calibration, per-channel, op check, `check`, write)
  agreement.py   float vs int8 on held-out images: cosine, SQNR, top-1/top-5
  report.py      --report: per layer SQNR and causes (TensorFlow Lite's QuantizationDebugger)
  job.py         the steps in order, for the CLI and the Python API
  data.py        images and paths, checked before TensorFlow loads

The float models themselves (which format a path is, Keras, the TensorFlow import, a float
source as an engine) are flows/sources/, which `eval` shares. TensorFlow, onnx, onnx2tf and ONNX
Runtime are imported only in these two packages, and only inside functions: `edgeapp --help` and
`classify` never pay for them.
"""
