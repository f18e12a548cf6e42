"""Use cases: classify/detect batches, camera, bench, convert, check, compile, doctor.

They combine pure core/ functions with the hardware boundary in hw/, and know nothing of the CLI.
"""
