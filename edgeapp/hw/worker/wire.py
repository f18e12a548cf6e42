"""What crosses a worker's control connection, and how an operator finds a worker.

To the worker: `r` followed by a model's number in ASCII digits (run that model on the inputs
in its region), `q` (quit), or a pickled command: ("open", number, model, device, options,
trust_model)
(answered ("ready", description) and the region's file descriptor, or an error) and
("close", number) (no answer). From the worker: `k` (outputs written) or a pickled
("error", class name, message, device).
"""

RUN, QUIT, DONE = b"r", b"q", b"k"
ARGV_MARK = "edgeapp-worker"  # the worker's command line holds it (`pgrep -f edgeapp-worker`)


def run_message(number: int) -> bytes:
    """The message that runs model `number`."""
    return RUN + str(number).encode("ascii")
