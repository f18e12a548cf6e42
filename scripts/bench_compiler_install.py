"""How long `edgeapp compiler install` spends downloading and verifying, over loopback.

Serves files of the pinned files' sizes (the compiler binary's size is not in the copy of the
tree we read: --binary-mib sets it, 30 MiB by default) from a local HTTP server on 127.0.0.1 and
fetches them with edgeapp's resumable downloader, then hashes each as `compiler install` does
(git blob id, and the sha256 recorded at install). Random bytes cannot match Google's pins, so
this times the work, not a successful install; the install from a .deb is timed end to end
with the stand-in compiler (tests/compiler_standin.py).

    python scripts/bench_compiler_install.py [--binary-mib 30] [--runs 3]
"""

from __future__ import annotations

import argparse
import http.server
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from edgeapp.core.edgetpu.compiler_files import PINNED  # noqa: E402
from edgeapp.core.registry import digests  # noqa: E402
from edgeapp.hw.download import Reporter, download  # noqa: E402


def serve(folder: Path):
    handler = lambda *a, **k: http.server.SimpleHTTPRequestHandler(*a, directory=str(folder), **k)  # noqa: E731
    http.server.SimpleHTTPRequestHandler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


def fetch_and_verify(url: str, dest: Path) -> float:
    start = time.perf_counter()
    for ref in PINNED:
        part = dest / (ref.path + ".part")
        part.parent.mkdir(parents=True, exist_ok=True)
        download(url + ref.path, part, ref.path, None, Reporter(), 30.0)
        digests(part)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary-mib", type=float, default=30.0)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        mirror = Path(tmp) / "mirror"
        total = 0
        for ref in PINNED:
            size = ref.size if ref.size is not None else int(a.binary_mib * 2 ** 20)
            (mirror / ref.path).parent.mkdir(parents=True, exist_ok=True)
            (mirror / ref.path).write_bytes(os.urandom(size))
            total += size
        server, url = serve(mirror)
        times = []
        for i in range(a.runs):
            times.append(fetch_and_verify(url, Path(tmp) / f"get{i}"))
        server.shutdown()
        mib = total / 2 ** 20
        best = min(times)
        print(f"download + verify of {len(PINNED)} files, {mib:.1f} MiB over loopback: median "
              f"{statistics.median(times):.3f} s, best {best:.3f} s ({mib / best:.0f} MiB/s)")
        import compiler_standin as standin

        if not standin.why_not():
            bundle = standin.build_bundle(Path(tmp) / "standin")
            deb = standin.make_deb(bundle, Path(tmp) / "edgetpu-compiler_16.0_amd64.deb")
            env = {**os.environ, "EDGEAPP_DATA_DIR": str(Path(tmp) / "data")}
            start = time.perf_counter()
            subprocess.run([sys.executable, "-m", "edgeapp", "compiler", "install", "--from", str(deb)],
                           env=env, check=True, capture_output=True)
            print(f"`edgeapp compiler install --from` a {deb.stat().st_size / 2 ** 20:.2f} MiB .deb "
                  f"(stand-in): {time.perf_counter() - start:.3f} s end to end")


if __name__ == "__main__":
    main()
