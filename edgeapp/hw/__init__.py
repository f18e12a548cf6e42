"""The boundary with everything outside Python: TFLite runtimes, the Edge TPU delegate,
libedgetpu (ctypes), sysfs and /dev (through hw/sysroot.py), cameras, power sensors, external
tools run as processes (edgetpu_compiler, edgeapp's own children), HTTP downloads and this
machine's network interfaces. Nothing else in edgeapp touches them."""
