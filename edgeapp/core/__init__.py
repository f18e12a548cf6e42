"""Pure code: the TFLite reader/writer, Edge TPU rules, pre/post-processing, boxes, statistics,
labels, metadata, file naming and the published numbers. No runtime, no hardware, no I/O beyond
reading the files it is handed."""
