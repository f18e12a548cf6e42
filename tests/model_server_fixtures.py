"""A model server on 127.0.0.1 (Coral's published models as edgeapp pulls them: ranges, cuts,
stalls, errors on demand), the tiny models published on it, and a registry naming them:
the fixtures of the `models` tests and of the commands taking models by name."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from media import CLASSES

PROXY_VARS = ("http_proxy", "https_proxy", "all_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY",
              "ALL_PROXY", "NO_PROXY")


class ModelServer:
    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.root: Path | None = None  # also serve files from here (../shared/coral)
        self.requests: list[tuple[str, str, str | None, bool]] = []  # mode, path, Range, proxied
        self.cut_done: set[str] = set()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                server.handle(self)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def url(self, mode: str) -> str:
        return f"http://127.0.0.1:{self.port}/{mode}/{{path}}"

    def reset(self) -> None:
        self.files, self.root, self.requests, self.cut_done = {}, None, [], set()

    def data(self, path: str) -> bytes | None:
        if path in self.files:
            return self.files[path]
        if self.root is not None and (self.root / path).is_file():
            return (self.root / path).read_bytes()
        return None

    def handle(self, h: BaseHTTPRequestHandler) -> None:
        proxied = h.path.startswith("http://")
        mode, _, path = urlsplit(h.path).path.lstrip("/").partition("/")
        path = unquote(path)
        rng = h.headers.get("Range")
        self.requests.append((mode, path, rng, proxied))
        data = self.data(path)
        if data is None or mode == "404":
            return h.send_error(404)
        if mode == "500":
            return h.send_error(500)
        if mode == "truncated":
            data = data[: len(data) // 2]
        if mode == "wrong":
            data = bytes(b ^ 0x5A for b in data)
        start = 0
        if rng and mode != "norange":
            start = int(rng.split("=")[1].split("-")[0])
            if start >= len(data):
                return h.send_error(416)
        body = data[start:]
        h.send_response(206 if start else 200)
        if start:
            h.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if mode == "cutalways" or (mode == "cut" and path not in self.cut_done):
            self.cut_done.add(path)
            h.wfile.write(body[: len(body) // 2])
            h.close_connection = True
            return
        if mode == "stall":
            h.wfile.write(body[:10])
            time.sleep(1.5)
            return
        if mode == "slow":
            step = max(1, len(body) // 5)
            for i in range(0, len(body), step):
                h.wfile.write(body[i:i + step])
                h.wfile.flush()
                time.sleep(0.05)
            return
        h.wfile.write(body)

    def seen(self, path: str) -> list[tuple[str, str | None, bool]]:
        return [(m, r, p) for m, q, r, p in self.requests if q == path]


@pytest.fixture(scope="module")
def server():
    s = ModelServer()
    yield s
    s.httpd.shutdown()


def git_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def registry_doc(files: dict[str, bytes], models: dict, how: str = "sha256") -> dict:
    def entry(data: bytes) -> dict:
        e = {"git_blob_sha1": git_id(data)}
        if how == "sha256":
            e.update(size=len(data), sha256=hashlib.sha256(data).hexdigest())
        return e

    return {"edgeapp_registry": 1, "source": "tests", "commit": "0" * 40,
            "url_template": "http://127.0.0.1:9/{commit}/{path}", "models": models,
            "files": {p: entry(d) for p, d in files.items()}}


@pytest.fixture(scope="module")
def published(compiled_pair, tiny_model, tmp_path_factory) -> dict:
    """Files as a model repository would publish them: the colours classifier (CPU model and its
    compiled stand-in), its labels, and a TF1-layout SSD with Coral-style numbered labels."""
    import detection_models as dm

    compiled, twin = compiled_pair
    det = dm.build(tmp_path_factory)
    pre = json.loads(tiny_model.with_suffix(".json").read_text())["preprocessing"]
    files = {"colors.tflite": twin.read_bytes(), "colors_edgetpu.tflite": compiled.read_bytes(),
             "colors_labels.txt": ("\n".join(CLASSES) + "\n").encode(),
             "toy_ssd.tflite": det["det_op_uint8"].read_bytes(),
             # numbered, with a gap at 1, as Coral's COCO file once was: ids are never shifted
             "toy_ssd_labels.txt": b"0  red\n2  blue\n",
             "pipeline/colors_segment_0_of_2_edgetpu.tflite": compiled.read_bytes(),
             "pipeline/colors_segment_1_of_2_edgetpu.tflite": compiled.read_bytes()}
    models = {
        "colors": {"task": "classify", "input": [16, 16], "cpu": "colors.tflite",
                   "edgetpu": "colors_edgetpu.tflite", "labels": "colors_labels.txt",
                   "preprocessing": {"mean": pre["mean"], "std": pre["std"]}},
        "toy_ssd": {"task": "detect", "input": [64, 64], "cpu": "toy_ssd.tflite",
                    "labels": "toy_ssd_labels.txt", "preprocessing": "raw"},
        "colors_pipeline2": {"task": "classify", "labels": "colors_labels.txt",
                             "segments": ["pipeline/colors_segment_0_of_2_edgetpu.tflite",
                                          "pipeline/colors_segment_1_of_2_edgetpu.tflite"]},
    }
    return {"files": files, "models": models}


@pytest.fixture()
def env(server, published, tmp_path, monkeypatch):
    """A fresh cache, our registry, the server in `ok` mode, no proxy, no Edge TPU attached."""
    server.reset()
    server.files = dict(published["files"])
    reg = tmp_path / "registry.json"
    reg.write_text(json.dumps(registry_doc(published["files"], published["models"])))
    for var in PROXY_VARS:
        monkeypatch.delenv(var, raising=False)
    values = {"EDGEAPP_CACHE_DIR": str(tmp_path / "cache"), "EDGEAPP_MODELS_REGISTRY": str(reg),
              "EDGEAPP_MODELS_URL": server.url("ok"), "EDGEAPP_MODELS_TIMEOUT": "10",
              "EDGEAPP_SYSROOT": str(tmp_path / "sysroot"),
              "EDGEAPP_EDGETPU_LIB": str(tmp_path / "absent" / "libedgetpu.so.1")}
    for k, v in values.items():
        monkeypatch.setenv(k, v)
    return {"cache": tmp_path / "cache" / "models", "registry": reg, "tmp": tmp_path, **published}
