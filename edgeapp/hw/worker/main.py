"""The worker process: owns one device and runs every model opened on it, each with its own
engine and its own shared region, on the inputs the main process writes there, until told to
stop or its parent is gone.

Started by process.py as `python -I -c "... edgeapp.hw.worker.main ..." edgeapp-worker ...`,
so `ps` (and an operator's `pkill -f edgeapp-worker`) finds it. What crosses the control
connection: wire.py.
"""

from __future__ import annotations

import argparse
import os
import pickle
import signal
import sys
from dataclasses import replace
from multiprocessing.connection import Connection
from multiprocessing.reduction import send_handle
from typing import TYPE_CHECKING, Dict, List, Optional, Tuple

from edgeapp.hw.worker.wire import ARGV_MARK, DONE, QUIT, RUN, ModelDescription

if TYPE_CHECKING:
    from edgeapp.hw.runtime import TfliteEngine
    from edgeapp.hw.worker.shared import Region, RegionLayout

Opened = Dict[int, Tuple["TfliteEngine", "Region"]]  # model number -> its engine and region


def _die_with_parent() -> None:
    """Linux: the kernel ends this process when its parent dies (PR_SET_PDEATHSIG), even while a
    native call hangs; elsewhere the closed connection ends it at the next message."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def error_message(error: BaseException) -> tuple:
    """What crosses the connection for an error: ("error", class name, message, device)."""
    from edgeapp.errors import EdgeappError

    name = type(error).__name__ if isinstance(error, EdgeappError) else "DeviceFailed"
    text = str(error) or type(error).__name__
    return ("error", name, text, getattr(error, "device", None))


def _describe(engine: "TfliteEngine", layout: "RegionLayout") -> ModelDescription:
    return {"inputs": engine.inputs, "outputs": engine.outputs, "device": engine.device,
            "name": engine.name, "notice": engine.notice, "model_path": engine.model_path,
            "requested_model": engine.requested_model, "cpu_kernels": engine.cpu_kernels,
            "runtime": (engine.runtime.name, engine.runtime.version), "layout": layout,
            "pid": os.getpid()}


def _open(conn: Connection, opened: Opened, command: tuple, parent: int) -> None:
    """("open", number, model, device, options, trust_model): the engine and its region, handed
    over."""
    from edgeapp.hw.runtime import EngineOptions, open_engine
    from edgeapp.hw.worker.shared import RegionLayout, new_region

    _, number, model, device, options, trust_model = command
    try:
        opts = replace(EngineOptions(**options), isolate=False)
        engine = open_engine(model, device, opts, trust_model=trust_model)
        layout = RegionLayout.of(engine.inputs, engine.outputs)
        region = new_region(layout)
    except BaseException as e:  # noqa: BLE001 - every failure is the parent's to word
        conn.send(error_message(e))
        return
    opened[number] = (engine, region)
    conn.send(("ready", _describe(engine, layout)))
    send_handle(conn, region.fd, parent)


def _close(opened: Opened, number: int) -> None:
    engine, region = opened.pop(number, (None, None))
    if engine is not None and region is not None:
        region.close()
        engine.release()


def _run(conn: Connection, opened: Opened, number: int) -> None:
    if number not in opened:
        conn.send(("error", "DeviceFailed", f"no model {number} is open in this worker", None))
        return
    engine, region = opened[number]
    inputs: List = region.inputs
    try:
        outputs = engine.run_all(inputs) if len(inputs) > 1 else engine.run(inputs[0])
        for view, out in zip(region.outputs, outputs):
            view[...] = out.reshape(view.shape)
    except Exception as e:  # noqa: BLE001 - told to the parent, which decides
        conn.send(error_message(e))
        return
    conn.send_bytes(DONE)


def serve(conn: Connection, parent: int) -> int:
    """Answer opens, runs and closes until `q` or the end of the connection."""
    try:  # imported before the first open asks (a restart waits less); a failure is the open's to tell
        import edgeapp.hw.runtime  # noqa: F401
    except BaseException:  # noqa: BLE001, S110
        pass
    opened: Opened = {}
    while True:
        try:
            message = conn.recv_bytes()
        except (EOFError, OSError):
            return 0
        head = message[:1]
        if head == RUN:
            _run(conn, opened, int(message[1:]))
        elif head == QUIT or not message:
            return 0
        else:
            command = pickle.loads(message)
            if command[0] == "open":
                _open(conn, opened, command, parent)
            elif command[0] == "close":
                _close(opened, command[1])


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog=ARGV_MARK)
    parser.add_argument("mark")
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--device", required=True)  # for `ps`: each open names its device
    parser.add_argument("--parent", type=int, required=True)
    args = parser.parse_args(argv)
    _die_with_parent()
    if os.getppid() != args.parent:  # the parent died before the line above took effect
        return 0
    conn = Connection(args.fd)
    try:
        return serve(conn, args.parent)
    finally:
        conn.close()


if __name__ == "__main__":
    sys.exit(main())
