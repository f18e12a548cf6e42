"""Int8 quantization maths, pure: float vs int8 metrics, per-layer report, --max-drop's trials and
equalization."""
