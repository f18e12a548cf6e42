"""Pure code: the TFLite reader/writer, Edge TPU rules, pre/post-processing, boxes, statistics,
labels, metadata, file naming, the published numbers, the libedgetpu/runtime pairing table and
the install plan per platform. No runtime, no hardware, no network, no processes; its only I/O
is reading and writing the model files and sidecars it is handed (core/tflite, core/meta.py)."""
