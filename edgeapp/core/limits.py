"""Limits edgeapp enforces on user input, each in one place (the CLI and the library share them)."""

MAX_THREADS = 64  # more interpreter threads than this is a typo, and a crash in some runtimes
