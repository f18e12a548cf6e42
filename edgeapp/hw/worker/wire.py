"""What crosses a worker's control connection, and how an operator finds a worker: one byte
`r` (run the inputs in the region), `q` (quit); answers `k` (outputs written) or a pickled
("error", class name, message, device)."""

RUN, QUIT, DONE = b"r", b"q", b"k"
ARGV_MARK = "edgeapp-worker"  # the worker's command line holds it (`pgrep -f edgeapp-worker`)
