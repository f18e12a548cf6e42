"""The Edge TPU's published numbers (Coral datasheet and model-requirements page), in one place."""

ON_CHIP_CACHE_BYTES = 8 * 1024 * 1024  # SRAM for parameters; compiler 16 reports ~6.9-7.5 MiB usable
USABLE_CACHE_BYTES = int(6.9 * 1024 * 1024)  # below this compiler 16 reports parameters cached in practice
PEAK_TOPS = 4.0  # int8
NOMINAL_WATTS = 2.0  # at PEAK_TOPS: "2 TOPS per watt"
