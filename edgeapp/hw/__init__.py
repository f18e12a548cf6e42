"""The hardware boundary: the only code that touches TFLite runtimes, the Edge TPU delegate,
libedgetpu (ctypes), sysfs, cameras, power sensors and the edgetpu_compiler process."""
