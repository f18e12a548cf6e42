"""Pure code, split by topic: the TFLite reader/writer (tflite/), the Edge TPU's rules and facts
(edgetpu/), int8 quantization maths (quant/), images to results (vision/), tracking, lines and
zones (track/), metrics over labelled data (eval/), retraining a head (learn/), what to install
where (install/); directly in core/ the facts every room shares (naming, limits, labels, sidecar
metadata, units, the model registry, statistics, compat). No runtime, no hardware, no network,
no processes; its only I/O is reading and writing the model files and sidecars it is handed."""
