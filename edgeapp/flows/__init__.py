"""Use cases, one module each, or one package where a use case spans several (bench/, camera/,
convert/, doctor/: each names its files in its docstring): task batches, the camera run,
open_task, the cluster, bench, convert, check, compile, doctor, models, retrain.

A flow combines the tasks (tasks/), how inferences run (execution/), where results go (sinks/),
the hardware and external tools (hw/) and pure maths (core/); it knows nothing of the CLI or
the API, which both call it, and raises typed errors (errors.py) for them to word.
"""
