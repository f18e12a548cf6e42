"""Results written in chunks of whole lines: quick records together, slow ones at once, a
terminal line by line, and nothing counted before it is written (sinks/records.py)."""

import io
import json

from edgeapp.sinks import records
from edgeapp.sinks.records import Format, RecordWriter


def record(i: int) -> dict:
    return {"path": f"img_{i:03d}.jpg", "device": "cpu", "model": "m.tflite", "classes": [],
            "latency_ms": 0.1, "error": None}


def lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_quick_records_go_out_in_chunks_and_all_of_them_at_the_end(tmp_path, monkeypatch):
    monkeypatch.setattr(records.time, "monotonic", lambda: 1000.0)  # quick: no time passes
    out = tmp_path / "r.jsonl"
    with RecordWriter(Format.jsonl, [], None, None, out) as writer:
        for i in range(records.CHUNK_RECORDS - 1):
            writer.write(record(i))
        assert out.read_text() == "" and writer.written == 0  # waiting for more
        writer.write(record(records.CHUNK_RECORDS - 1))
        assert len(lines(out)) == writer.written == records.CHUNK_RECORDS
        for i in range(records.CHUNK_RECORDS, records.CHUNK_RECORDS + 5):
            writer.write(record(i))
        assert writer.written == records.CHUNK_RECORDS
        writer.flush()  # what Ctrl-C's message does before it counts
        assert len(lines(out)) == writer.written == records.CHUNK_RECORDS + 5
        writer.write(record(99))
    assert [r["path"] for r in lines(out)] == \
        [f"img_{i:03d}.jpg" for i in range(records.CHUNK_RECORDS + 5)] + ["img_099.jpg"]


def test_records_that_come_slowly_are_written_at_once(tmp_path, monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(records.time, "monotonic", lambda: now[0])
    out = tmp_path / "r.jsonl"
    with RecordWriter(Format.jsonl, [], None, None, out) as writer:
        for i in range(3):
            now[0] += records.CHUNK_SECONDS
            writer.write(record(i))
            assert len(lines(out)) == writer.written == i + 1


def test_a_terminal_gets_every_line_at_once_and_a_pipe_gets_chunks(monkeypatch):
    monkeypatch.setattr(records.time, "monotonic", lambda: 1000.0)
    class Stream(io.StringIO):
        def __init__(self, tty: bool) -> None:
            super().__init__()
            self.tty = tty

        def isatty(self) -> bool:
            return self.tty

    for tty in (True, False):
        stream = Stream(tty)
        writer = RecordWriter(Format.jsonl, [], None, None, stream=stream)
        writer.write(record(0))
        assert stream.getvalue().count("\n") == (1 if tty else 0)
        writer.close()
        assert stream.getvalue().count("\n") == 1 and writer.written == 1


def test_the_camera_frames_writer_writes_each_record(tmp_path):
    out = tmp_path / "frames.jsonl"
    with RecordWriter(Format.jsonl, [], None, None, out, chunks=False) as writer:
        writer.write(record(0))
        assert len(lines(out)) == writer.written == 1
