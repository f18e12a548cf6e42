"""The model check's child when it is a fresh interpreter (`python -I`, see child.py).

Run as `python -I -c "...; from edgeapp.hw.probe_child import main; main()" MODEL RUNTIME DEVICE
LIBRARY` (or `--label LIBRARY RUNTIME`). Kept apart from child.py so that the probe does not
import the runtime module that calls it; a fork runs child.run_child directly.
"""

import sys

from edgeapp.hw.child import MARK, label_child, run_child


def _emit(line: str) -> None:
    sys.stdout.write(MARK + line + "\n")
    sys.stdout.flush()


def main() -> None:
    args = sys.argv[1:]
    if args[:1] == ["--label"]:
        sys.exit(label_child(args[1], _emit))
    model_path, runtime_name, device, library = args[:4]
    from edgeapp.hw.device_choice import parse_device
    from edgeapp.hw.runtime import find_runtime, load_edgetpu_delegate

    rt = find_runtime(runtime_name)
    load = (lambda: load_edgetpu_delegate(rt, parse_device(device))) if library else None
    sys.exit(run_child(rt, model_path, library or None, load, _emit))
