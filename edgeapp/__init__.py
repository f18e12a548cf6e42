"""edgeapp: from a Keras or ONNX model to fast inference on the Google Coral Edge TPU.

The Python API (`edgeapp.open_model`, `edgeapp.Model`) is loaded on first use, so importing
edgeapp stays cheap for the CLI.
"""

from edgeapp.core.version import VERSION as __version__

__all__ = ["open_model", "Model", "__version__"]


def __getattr__(name):  # PEP 562 (Python 3.7+): import the API only when it is asked for
    if name in ("open_model", "Model"):
        from edgeapp import api

        return getattr(api, name)
    raise AttributeError(f"module 'edgeapp' has no attribute {name!r}")
