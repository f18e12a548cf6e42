"""Classify every image in a folder with edgeapp's Python API and write path,label,score to CSV.

    python scripts/classify_folder.py MODEL FOLDER OUT.csv

The same pipeline as `edgeapp classify` (Edge TPU when usable, else the CPU twin; decoding ahead
on worker threads); a bad image becomes a row with its error instead of stopping the batch.
"""

import csv
import sys
from pathlib import Path

import edgeapp


def main(model_path: str, folder: str, out_csv: str) -> int:
    model = edgeapp.open_model(model_path)
    if model.notice:
        print(model.notice, file=sys.stderr)
    paths = sorted(p for p in Path(folder).rglob("*") if p.is_file())
    with open(out_csv, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["path", "label", "score", "error"])
        for record in model.classify_batch(paths, top_k=1):
            best = record["classes"][0] if record["classes"] else {}
            out.writerow([record["path"], best.get("label", best.get("id")), best.get("score"),
                          record["error"]])
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    sys.exit(main(*sys.argv[1:]))
