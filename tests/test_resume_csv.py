"""CSV `--resume` counts a complete last image (Ctrl-C said "362 result(s) written", the resume
said "361 already done" and redid one), redoes an image whose rows a kill may have cut short,
and a write failing part-way leaves no partial image: nothing lost, nothing twice."""

import csv
import io
import re
import resource
import signal
import subprocess
import sys
import time

from conftest import ROOT

from edgeapp.sinks.records import TORN_WRITE_BOUNDARY


def _per_image(text: str) -> dict:
    out: dict = {}
    for row in csv.DictReader(io.StringIO(text)):
        out.setdefault(row["path"], []).append(row["rank"])
    return out


def _image_ends(lines: list) -> list:
    """Byte offsets after each image's last row (lines[0] is the header)."""
    ends, offset = [], len(lines[0])
    for i, line in enumerate(lines[1:], 1):
        offset += len(line)
        nxt = lines[i + 1] if i + 1 < len(lines) else None
        if nxt is None or nxt.split(b",")[0] != line.split(b",")[0]:
            ends.append(offset)
    return ends


def test_a_complete_csv_keeps_its_last_image(cli, tiny_model, tiny_data, tmp_path):
    out = tmp_path / "out.csv"
    folder = tiny_data / "test" / "red"
    assert cli("classify", tiny_model, folder, "-f", "csv", "-o", out, "-k", "3").exit_code == 0
    full = out.read_bytes()
    ends = [e for e in _image_ends(full.splitlines(keepends=True)) if e % TORN_WRITE_BOUNDARY]
    out.write_bytes(full[:ends[6]])  # 7 whole images, as a Ctrl-C between two images leaves them
    r = cli("classify", tiny_model, folder, "-f", "csv", "-o", out, "-k", "3", "--resume")
    assert r.exit_code == 0, r.stderr
    assert "7 already done" in r.stderr, r.stderr
    again = out.read_bytes()
    assert again.startswith(full[:ends[6]])  # the 7 kept as they were
    assert list(_per_image(again.decode())) == list(_per_image(full.decode()))  # each once, in order
    assert all(ranks == ["1", "2", "3"] for ranks in _per_image(again.decode()).values())


def test_ctrl_c_count_is_what_the_resume_finds(tiny_model, many_images, tmp_path):
    out = tmp_path / "out.csv"
    cmd = [sys.executable, "-m", "edgeapp", "classify", str(tiny_model), str(many_images), "-f",
           "csv", "-o", str(out), "-k", "2", "--workers", "0"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            cwd=ROOT, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 60
    while not (out.exists() and out.read_text().count("\n") >= 40) and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    written = int(re.search(r"interrupted: (\d+) result\(s\) written", err).group(1))
    assert 0 < written < 300
    on_boundary = len(out.read_bytes()) % TORN_WRITE_BOUNDARY == 0  # 1 in 4096: redone, to be safe
    r = subprocess.run(cmd + ["--resume"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr
    assert f"{written - on_boundary} already done" in r.stderr, r.stderr
    images = _per_image(out.read_text())
    assert len(images) == 300 and all(ranks == ["1", "2"] for ranks in images.values())


def test_rows_cut_at_a_page_boundary_are_redone_whole(cli, tiny_model, tiny_data, tmp_path):
    """A kill cuts a write short only at a page boundary: there whole rows may be only some of
    an image's rows. Made here by padding a latency cell so that a cut inside an image falls
    exactly on the boundary."""
    out = tmp_path / "out.csv"
    folder = tiny_data / "test" / "red"
    assert cli("classify", tiny_model, folder, "-f", "csv", "-o", out, "-k", "3").exit_code == 0
    lines = out.read_bytes().splitlines(keepends=True)
    ends = set(_image_ends(lines))
    offset, inside = 0, []
    for line in lines:
        offset += len(line)
        if offset <= TORN_WRITE_BOUNDARY and offset not in ends:
            inside.append(offset)
    pad = TORN_WRITE_BOUNDARY - inside[-1]
    latency = next(csv.reader([lines[0].decode()])).index("latency_ms")
    first = next(csv.reader([lines[1].decode()]))
    first[latency] += "0" * pad  # 0.123 -> 0.12300...: the same number, `pad` bytes longer
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(first)
    lines[1] = buf.getvalue().encode()
    cut = b"".join(lines)[:TORN_WRITE_BOUNDARY]
    assert cut.endswith(b"\n") and len(cut) == TORN_WRITE_BOUNDARY
    out.write_bytes(cut)
    partial = len(_image_ends(cut.splitlines(keepends=True)))  # whole images + the cut one
    r = cli("classify", tiny_model, folder, "-f", "csv", "-o", out, "-k", "3", "--resume")
    assert r.exit_code == 0, r.stderr
    assert f"{partial - 1} already done" in r.stderr, r.stderr
    images = _per_image(out.read_text())
    assert len(images) == 20 and all(ranks == ["1", "2", "3"] for ranks in images.values())


def test_a_write_failing_part_way_leaves_no_partial_image(tiny_model, tiny_data, tmp_path):
    """A file size limit (as a full disk) stops a record's write part-way: it is cut back."""
    limit = 2000
    out = tmp_path / "out.csv"

    def limited():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)

    r = subprocess.run([sys.executable, "-m", "edgeapp", "classify", str(tiny_model),
                        str(tiny_data / "test" / "red"), "-f", "csv", "-o", str(out), "-k", "3"],
                       capture_output=True, text=True, cwd=ROOT, timeout=300, preexec_fn=limited)
    assert r.returncode == 2 and "cannot write results to" in r.stderr, r.stderr
    data = out.read_bytes()
    assert 0 < len(data) < limit and data.endswith(b"\n")
    images = _per_image(data.decode())
    assert images and all(ranks == ["1", "2", "3"] for ranks in images.values())
