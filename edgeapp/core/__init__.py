"""Pure code: the TFLite reader/writer, Edge TPU rules, pre/post-processing, boxes, statistics,
labels, metadata, file naming, the published numbers, the libedgetpu/runtime pairing table and
the install plan per platform. No runtime, no hardware, no I/O beyond reading the files it is
handed."""
