"""Reading the JSONL records a command printed."""

from __future__ import annotations

import json


def records(result) -> list[dict]:
    return [json.loads(line) for line in result.stdout.splitlines()]


def without_device(recs: list[dict]) -> list[tuple]:
    return [(r["path"], r["classes"], r["error"]) for r in recs]
