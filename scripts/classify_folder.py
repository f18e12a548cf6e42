"""Classify every image in a folder with edgeapp's Python API and write path,label,score to CSV.

    python scripts/classify_folder.py MODEL FOLDER OUT.csv

The same pipeline as `edgeapp classify` (Edge TPU when usable, else the CPU twin; decoding ahead
on worker threads); a bad image becomes a row with its error instead of stopping the batch.
Errors are one line and the exit codes are the CLI's (docs/exit-codes.md): 2 for a missing or
empty folder, 4 for a model that cannot be used, 3 when some images failed (their rows say why).
"""

import csv
import sys
from pathlib import Path

import edgeapp
from edgeapp.errors import EdgeappError, ExitCode, UsageError


def main(model_path: str, folder: str, out_csv: str) -> int:
    root = Path(folder)
    if not root.is_dir():
        raise UsageError(f"{folder}: {'not a folder' if root.exists() else 'no such folder'}")
    paths = sorted(p for p in root.rglob("*") if p.is_file())
    if not paths:
        raise UsageError(f"{folder}: no files to classify")
    model = edgeapp.open_model(model_path)
    if model.notice:
        print(f"classify_folder: {model.notice}", file=sys.stderr)
    failed = 0
    with open(out_csv, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["path", "label", "score", "error"])
        for record in model.classify_batch(paths, top_k=1):
            best = record["classes"][0] if record["classes"] else {}
            failed += bool(record["error"])
            out.writerow([record["path"], best.get("label", best.get("id")), best.get("score"),
                          record["error"]])
    print(f"classify_folder: {len(paths)} image(s), {failed} failed; results in {out_csv}",
          file=sys.stderr)
    return int(ExitCode.INPUTS_FAILED) if failed else 0


def run(argv: list) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return int(ExitCode.USAGE)
    try:
        return main(*argv)
    except EdgeappError as e:  # one line, the CLI's exit code
        print(f"classify_folder: error: {e}", file=sys.stderr)
        return int(e.exit_code)
    except OSError as e:  # the CSV cannot be written
        print(f"classify_folder: error: {e.filename or out_name(argv)}: {e.strerror or e}", file=sys.stderr)
        return int(ExitCode.USAGE)
    except KeyboardInterrupt:
        print("classify_folder: interrupted", file=sys.stderr)
        return int(ExitCode.INTERRUPTED)


def out_name(argv: list) -> str:
    return argv[2] if len(argv) > 2 else "the CSV"


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
