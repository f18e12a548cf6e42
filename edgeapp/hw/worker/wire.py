"""What crosses a worker's control connection, and how an operator finds a worker.

To the worker: `r` followed by a model's number in ASCII digits (run that model on the inputs
in its region), `q` (quit), or a pickled command: ("open", number, model, device, options,
trust_model)
(answered ("ready", description) and the region's file descriptor, or an error) and
("close", number) (no answer). From the worker: `k` (outputs written) or a pickled
("error", class name, message, device).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, List, Optional, Tuple

from typing_extensions import TypedDict

if TYPE_CHECKING:
    from edgeapp.hw.worker.shared import RegionLayout

RUN, QUIT, DONE = b"r", b"q", b"k"
ARGV_MARK = "edgeapp-worker"  # the worker's command line holds it (`pgrep -f edgeapp-worker`)


def run_message(number: int) -> bytes:
    """The message that runs model `number`."""
    return RUN + str(number).encode("ascii")


class ModelDescription(TypedDict):
    """The worker's answer to "open": what the model runs as there (the main process's engine
    reads its facts from it, and its region's layout)."""

    inputs: List[dict]  # the interpreter's tensor details, as TFLite gives them
    outputs: List[dict]
    device: str  # "edgetpu" or "cpu"
    name: str  # the device's name ("usb:0", "cpu")
    notice: Optional[str]
    model_path: str
    requested_model: str
    cpu_kernels: str
    runtime: Tuple[str, str]  # (name, version)
    layout: "RegionLayout"
    pid: int
