"""edgeapp: from a Keras model to fast inference on the Google Coral Edge TPU."""

__version__ = "0.1.0"
