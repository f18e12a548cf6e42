"""The delegate probe's child process: everything the main process would do with the delegate, once.

Run as `python -m edgeapp.hw.probe_child MODEL DEVICE RUNTIME` by probe.py, which judges how it
ends (a signal or silence is a crashing pair). Kept apart from probe.py so that the probe does
not import the runtime module that calls it.
"""

import json
import sys

from edgeapp.hw.probe import MARK


def main(model_path: str, device: str, runtime_name: str) -> int:
    """The probe itself: everything the main process would do with the delegate, once."""
    import gc

    import numpy as np

    from edgeapp.errors import EdgeappError
    from edgeapp.hw.runtime import find_runtime, open_model

    try:  # a crash here is expected, and no reason to leave a core file behind
        import resource
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (ImportError, ValueError, OSError):
        pass
    find_runtime(runtime_name)
    print(MARK + "ready", flush=True)
    try:
        engine = open_model(model_path, device, runtime=runtime_name, probe=False)
        engine.run(np.zeros(engine.input_shape, engine.input_dtype))
        result = {"status": "pass"}
    except EdgeappError as e:
        result = {"status": "failed", "message": str(e)}
    engine = None  # tear the delegate down before reporting: a crash there counts too
    gc.collect()
    print(MARK + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
