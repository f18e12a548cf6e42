#!/usr/bin/env python3
"""Start-up and host throughput of edgeapp, each beside its floor or peer loop, in one run.

    python scripts/bench_host.py [--rounds 5] [--repeat 3] [--count 480] [--size 640x480]
                                 [--no-cli] [--json] [--save results.json]

Everything is measured in rounds that interleave edgeapp and what it is compared with (one
warm-up round first, not counted), so a change of load on a shared machine hits both sides of
a ratio alike. Figures are medians over the rounds (start-up: over rounds × --repeat runs), with
the 10th-90th percentile spread.

Start-up: fresh processes, run as a user runs them (the `edgeapp` script beside this Python,
stdout to /dev/null), wall time from spawn to exit, and the child's CPU time (user + sys, less
sensitive to other load than wall time). Bytecode is cached (in a temporary
PYTHONPYCACHEPREFIX, filled by the warm-up round), as it is for an installed package:
  python -c pass          the interpreter and this environment's site hooks: a floor
  python -c "import typer"  the CLI framework alone: a floor
  edgeapp --help          target <= 0.15 s
  ..., no bytecode cache  the same with edgeapp's modules compiled from source on every run (a
                          copy without __pycache__ and PYTHONDONTWRITEBYTECODE=1, as a checkout
                          that is never written to runs)
  classify digits         `edgeapp classify models/digits_int8.tflite one.jpg`, end to end
  classify mobilenet_v2   the same with ../shared/coral/mobilenet_v2_1.0_224_quant.tflite (when
                          present): process start, model opened (its containment verdict is
                          cached by the warm-up round, as after a user's first run), one JPEG
                          decoded and classified, the table line printed. Target <= 0.35 s.

Throughput, in this process, over --count JPEGs (crops of ../shared/coral/cat_720p.jpg, else
smooth random images) read once beforehand so all sides read them from the page cache. Each
run also reports its CPU time per image (every thread of this process) and the share of the
usable cores it kept busy: on a loaded machine the ratios below fall with the share the other
processes take, while the CPU per image still shows edgeapp's own overhead.
  edgeapp                 what `edgeapp classify MODEL FOLDER -o results.jsonl` runs after start-up:
                          flows.open_task.open_task (default device auto: one single-thread CPU
                          interpreter per usable core) then flows.batch.run_batch with the default
                          --workers, records written as JSON lines to a file; images / wall time.
  ... (CLI)               `edgeapp classify MODEL FOLDER -o results.jsonl` run as a user runs it:
                          the rate of its own summary line (the batch alone, start-up and model
                          loading excluded; one-time costs of a fresh process, such as importing
                          Pillow, are in it). --no-cli skips it.
  decode capacity         the peer loop for a fast model: one plain Python thread per usable core,
                          each taking the next path and making the library calls edgeapp's
                          preparation makes (Pillow open, load, the EXIF orientation read (and
                          ImageOps.exif_transpose when not upright), convert to the model's colour
                          mode, LANCZOS resize to its input size, numpy asarray), and no
                          inference. Target: edgeapp with the digits model >= 0.95 of it.
  peer loop (MobileNet V2) hand-written with the runtime's own API: one thread per usable core,
                          each with its own one-thread interpreter, preparing (as the decode peer,
                          plus Coral's quantization) and invoking (set_tensor, invoke, get_tensor)
                          the next image ("fused"); and decode threads feeding interpreter threads
                          through a queue ("split"). The better of the two is "best peer".
  CPU-work bound          for MobileNet V2: cores / (p + i), where p and i are the CPU seconds
                          (time.thread_time around each call) of preparing one image and of
                          invoking it, measured in the fused peer run, i.e. with every usable core
                          doing exactly that work, averaged over the run's images. It is the rate
                          at which all cores would do nothing but the necessary work: no hand-off,
                          no waiting, no bookkeeping, no records. Target: edgeapp >= 0.95 of it.
                          Printed beside it: p and i measured on one thread with the other cores
                          idle ("one core alone"); that bound is a few per cent higher, because two
                          busy cores share the L3 cache, memory bandwidth and clock, which no
                          program on this machine escapes.

Camera-sized photos (--camera N, default 30: 0.3 to 12 MP in turn, every third stored sideways
with an EXIF orientation), with Coral's MobileNet v1 0.25/128 as the fast model (digits without
../shared), each side in one round:
  full-decode capacity    the decode peer above on these photos, each decoded whole
  scaled-decode capacity  the same with Pillow's own `draft(mode, input size)` before loading (the
                          DCT scale Pillow picks for that size)
  edgeapp --decode scaled `edgeapp classify --decode scaled` (detect, pose and segment's default). Targets:
                          >= 0.95 of the scaled-decode capacity, which is >= 2x the full one
  edgeapp --decode full   target >= 0.95 of the full-decode capacity
  mobilenet_v2 (scaled)   edgeapp beside its CPU-work bound with the decode at the scale used (the
                          fused peer decoding scaled). Target >= 0.95.
--decode full|scaled says how the --size JPEGs above are decoded, by edgeapp and by its peers
alike (full by default, as `classify` decodes unless told).

The machine matters: say its cores and load average with any figure quoted (both are printed).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import queue
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "coral"
DIGITS = ROOT / "models" / "digits_int8.tflite"
MOBILENET = SHARED / "mobilenet_v2_1.0_224_quant.tflite"
FAST = SHARED / "mobilenet_v1_0.25_128_quant.tflite"  # the camera set's fast model (else digits)
COMPILING = "edgeapp --help, no bytecode cache"
TARGETS = {"help_s": 0.15, "classify_s": 0.35, "fast_vs_decode": 0.95, "mobilenet_vs_bound": 0.95,
           "camera_fast_vs_scaled_capacity": 0.95, "camera_scaled_vs_full_capacity": 2.0,
           "camera_mobilenet_vs_bound": 0.95, "camera_full_vs_full_capacity": 0.95}

sys.path.insert(0, str(ROOT))


# -- images -----------------------------------------------------------------------------------------

def make_jpegs(folder: Path, count: int, size: tuple) -> List[str]:
    """`count` distinct JPEGs: crops of the shared cat photo scaled to `size`, or smooth random
    images; quality 90."""
    from PIL import Image

    rng = np.random.default_rng(0)
    src = SHARED / "cat_720p.jpg"
    base = Image.open(src).convert("RGB") if src.exists() else None
    paths = []
    for i in range(count):
        if base is not None:
            w = int(base.width * rng.uniform(0.5, 0.9))
            h = min(base.height, w * size[1] // size[0])
            x, y = rng.integers(0, base.width - w + 1), rng.integers(0, base.height - h + 1)
            img = base.crop((x, y, x + w, y + h)).resize(size, Image.BICUBIC)
        else:
            small = rng.integers(0, 256, (size[1] // 16, size[0] // 16, 3), dtype=np.uint8)
            img = Image.fromarray(small).resize(size, Image.BICUBIC)
        p = folder / f"img_{i:04d}.jpg"
        img.save(p, quality=90)
        paths.append(str(p))
    return paths


CAMERA_SIZES = ((640, 480), (1280, 960), (2048, 1536), (3264, 2448), (4000, 3000))  # 0.3-12 MP


def make_camera_jpegs(folder: Path, count: int) -> List[str]:
    """`count` camera-sized photos, 0.3 to 12 MP in turn (CAMERA_SIZES): crops of the shared
    1080p cat, else smooth random images, scaled up; every third one stored sideways with an
    EXIF orientation (6), every fifth an MPO (a JPEG with a second picture, as many phones
    write them); quality 92."""
    from PIL import Image

    rng = np.random.default_rng(1)
    src = SHARED / "cat_1080p.jpg"
    base = Image.open(src).convert("RGB") if src.exists() else None
    paths = []
    for i in range(count):
        w, h = CAMERA_SIZES[i % len(CAMERA_SIZES)]
        if base is not None:
            cw = int(base.width * rng.uniform(0.6, 0.95))
            ch = min(base.height, cw * h // w)
            x, y = rng.integers(0, base.width - cw + 1), rng.integers(0, base.height - ch + 1)
            img = base.crop((x, y, x + cw, y + ch)).resize((w, h), Image.BICUBIC)
        else:
            small = rng.integers(0, 256, (h // 32, w // 32, 3), dtype=np.uint8)
            img = Image.fromarray(small).resize((w, h), Image.BICUBIC)
        kw = {}
        if i % 3 == 2:  # stored sideways: the viewer (and edgeapp) turns it upright
            img = img.transpose(Image.Transpose.ROTATE_90)
            exif = Image.Exif()
            exif[0x0112] = 6
            kw["exif"] = exif.tobytes()
        p = folder / f"cam_{i:03d}.jpg"
        if i % 5 == 4:  # a phone's MPO: the photo, then a preview picture in the same file
            img.save(p, "MPO", quality=92, save_all=True, append_images=[img.resize((640, 480))], **kw)
        else:
            img.save(p, quality=92, **kw)
        paths.append(str(p))
    return paths


def camera_sizes(paths: List[str]) -> dict:
    from PIL import Image

    mp = [Image.open(p).size for p in paths]
    mp = [w * h / 1e6 for w, h in mp]
    return {"count": len(paths), "megapixels": [round(min(mp), 2), round(max(mp), 2)] if mp else []}


# -- start-up ---------------------------------------------------------------------------------------

def edgeapp_command() -> List[str]:
    """The `edgeapp` script a user of this environment runs, else `python -m edgeapp`."""
    script = Path(sys.executable).parent / "edgeapp"
    if script.is_file():
        return [str(script)]
    found = shutil.which("edgeapp")
    return [found] if found else [sys.executable, "-m", "edgeapp"]


def run_child(cmd: List[str], env: dict, cwd: str) -> tuple:
    """(wall seconds, CPU seconds) of one process run to its end; a failure stops the bench."""
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=err, env=env, cwd=cwd)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -1
        if proc.returncode != 0:
            err.seek(0)
            raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): "
                             f"{err.read().decode(errors='replace').strip()[-400:]}")
    return wall, usage.ru_utime + usage.ru_stime


def startup_commands(one_jpg: str, with_mobilenet: bool) -> Dict[str, List[str]]:
    edgeapp = edgeapp_command()
    cmds = {"python -c pass": [sys.executable, "-c", "pass"],
            "python -c 'import typer'": [sys.executable, "-c", "import typer"],
            "edgeapp --help": edgeapp + ["--help"],
            COMPILING: edgeapp + ["--help"],
            "classify digits one.jpg": edgeapp + ["classify", str(DIGITS), one_jpg]}
    if with_mobilenet:
        cmds["classify mobilenet_v2 one.jpg"] = edgeapp + ["classify", str(MOBILENET), one_jpg]
    return cmds


# -- the peer loops: plain library calls ------------------------------------------------------------

def plain_prepare(path: str, size: tuple, mode: str, scaled: bool = False) -> np.ndarray:
    """The library calls of edgeapp's preparation, nothing else (the decode peer's work);
    `scaled`: a JPEG decoded at the DCT scale Pillow's own `draft` picks for `size`."""
    from PIL import Image, ImageOps

    img = Image.open(path)
    if scaled and img.format in ("JPEG", "MPO"):
        img.draft(mode, size)
    img.load()
    if img.getexif().get(0x0112, 1) != 1:  # EXIF orientation: turned only when not upright
        img = ImageOps.exif_transpose(img)
    if img.mode != mode:
        img = img.convert(mode)
    if img.size != size:
        img = img.resize(size, Image.LANCZOS)
    return np.asarray(img, dtype=np.uint8)


def plain_quantize(pixels: np.ndarray, detail: dict, mean: float = 128.0, std: float = 128.0
                   ) -> np.ndarray:
    """Pixels into the input tensor as Coral's examples do ((p - mean) / std, quantized)."""
    scale, zero = detail["quantization"]
    dtype = np.dtype(detail["dtype"])
    shape = tuple(detail["shape"])
    a = 1.0 / (std * scale) if scale else 1.0
    b = zero - mean * a if scale else 0.0
    if dtype == np.uint8 and abs(a - 1) < 1e-5 and abs(b) < 1e-5:
        return pixels.reshape(shape)
    info = np.iinfo(dtype)
    values = np.rint(pixels.astype(np.float32) * np.float32(a) + np.float32(b))
    return np.clip(values, info.min, info.max).astype(dtype).reshape(shape)


class Run:
    """One timed run over `n` images: wall seconds and this process's CPU seconds (all threads)."""

    def __init__(self, n: int) -> None:
        self.n, self.wall, self.cpu = n, 0.0, 0.0
        self.work = (0.0, 0.0)  # peer_fused: (prepare, invoke) CPU seconds per image

    def __enter__(self) -> "Run":
        self._t, self._c = time.perf_counter(), _process_cpu()
        return self

    def __exit__(self, *exc) -> None:
        self.wall = time.perf_counter() - self._t
        self.cpu = _process_cpu() - self._c

    @property
    def rate(self) -> float:
        return self.n / self.wall

    @property
    def cpu_ms(self) -> float:
        """CPU milliseconds per image, every thread of the run counted."""
        return self.cpu * 1000 / self.n

    def busy(self, cores: int) -> float:
        """The share of the usable cores the run kept busy (other load on the machine lowers it)."""
        return self.cpu / (self.wall * cores)


def _process_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def on_threads(n: int, work: Callable[[], None]) -> None:
    threads = [threading.Thread(target=work, daemon=True) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def taker(paths: List[str]) -> Callable[[], Optional[str]]:
    """The next path for whichever thread asks, None at the end."""
    it, lock = iter(paths), threading.Lock()

    def take() -> Optional[str]:
        with lock:
            return next(it, None)
    return take


def peer_decode(paths: List[str], size: tuple, mode: str, threads: int, scaled: bool = False) -> Run:
    """Images/s of `threads` plain threads preparing images and doing nothing else."""
    take = taker(paths)

    def work() -> None:
        path = take()
        while path is not None:
            plain_prepare(path, size, mode, scaled)
            path = take()

    with Run(len(paths)) as run:
        on_threads(threads, work)
    return run


class PlainModel:
    """One-thread interpreters of the runtime edgeapp picks, driven through its own API."""

    def __init__(self, model: Path, count: int, scaled: bool = False) -> None:
        from edgeapp.hw.runtime import find_runtime

        self.scaled = scaled
        self.runtime = find_runtime()
        self.interpreters = []
        for _ in range(count):
            interpreter = self.runtime.module.Interpreter(model_path=str(model), num_threads=1)
            interpreter.allocate_tensors()
            self.interpreters.append(interpreter)
        detail = self.interpreters[0].get_input_details()[0]
        self.detail = detail
        self.size = (int(detail["shape"][2]), int(detail["shape"][1]))
        self.mode = "RGB" if int(detail["shape"][3]) == 3 else "L"
        self.out = self.interpreters[0].get_output_details()[0]["index"]

    def tensor(self, path: str) -> np.ndarray:
        return plain_quantize(plain_prepare(path, self.size, self.mode, self.scaled), self.detail)

    def invoke(self, k: int, tensor: np.ndarray) -> np.ndarray:
        interpreter = self.interpreters[k]
        interpreter.set_tensor(self.detail["index"], tensor)
        interpreter.invoke()
        return interpreter.get_tensor(self.out)


def peer_fused(paths: List[str], model: PlainModel) -> Run:
    """One thread per interpreter, each preparing and invoking the next image; each thread also
    times its two calls (time.thread_time), so `run.work` is the CPU seconds (prepare, invoke)
    per image with every core doing that work."""
    take = taker(paths)
    ids = iter(range(len(model.interpreters)))
    spent = [[0.0, 0.0] for _ in model.interpreters]

    def work() -> None:
        k = next(ids)
        path = take()
        while path is not None:
            t0 = time.thread_time()
            tensor = model.tensor(path)
            t1 = time.thread_time()
            model.invoke(k, tensor)
            spent[k][0] += t1 - t0
            spent[k][1] += time.thread_time() - t1
            path = take()

    with Run(len(paths)) as run:
        on_threads(len(model.interpreters), work)
    run.work = tuple(sum(s[i] for s in spent) / len(paths) for i in (0, 1))
    return run


def peer_split(paths: List[str], model: PlainModel, decoders: int) -> Run:
    """`decoders` threads preparing into a queue, one thread per interpreter invoking from it."""
    take = taker(paths)
    tensors: queue.Queue = queue.Queue(maxsize=4 * len(model.interpreters))
    ids = iter(range(len(model.interpreters)))

    def decode() -> None:
        path = take()
        while path is not None:
            tensors.put(model.tensor(path))
            path = take()

    def infer() -> None:
        k = next(ids)
        while True:
            tensor = tensors.get()
            if tensor is None:
                return
            model.invoke(k, tensor)

    with Run(len(paths)) as run:
        invokers = [threading.Thread(target=infer, daemon=True) for _ in model.interpreters]
        for t in invokers:
            t.start()
        on_threads(decoders, decode)
        for _ in invokers:
            tensors.put(None)
        for t in invokers:
            t.join()
    return run


def cpu_work(paths: List[str], model: PlainModel) -> tuple:
    """(prepare, invoke) CPU seconds per image on this thread alone (time.thread_time): the
    cost with the other cores idle, a ceiling (see the module's docstring)."""
    t0 = time.thread_time()
    tensors = [model.tensor(p) for p in paths]
    prepare = (time.thread_time() - t0) / len(paths)
    t0 = time.thread_time()
    for tensor in tensors:
        model.invoke(0, tensor)
    return prepare, (time.thread_time() - t0) / len(paths)


# -- edgeapp ----------------------------------------------------------------------------------------

class EdgeappBatch:
    """A model opened as `edgeapp classify` opens it (cli/task_commands.py), run on a list of images."""

    def __init__(self, model: Path, results: Path, decode: str = "scaled",
                 isolate: Optional[bool] = None) -> None:
        from edgeapp.flows.open_task import Placement, open_task
        from edgeapp.hw.hostinfo import decode_workers, usable_cores
        from edgeapp.hw.runtime import EngineOptions

        self.opened = open_task(model, "classify", Placement(engine=EngineOptions(isolate=isolate)),
                                cpu_replicas=usable_cores(), decode=decode)
        self.workers = decode_workers(None)
        self.results = results

    def rate(self, paths: List[str]) -> Run:
        from edgeapp.flows.batch import run_batch
        from edgeapp.sinks.records import Format, Layout

        writer = Layout(self.opened.task.kind).writer(Format.jsonl, self.results)
        with Run(len(paths)) as run, writer:
            stats = run_batch(paths, self.opened.runner, self.opened.task, writer,
                              workers=self.workers)
        if stats.ok != len(paths):
            raise SystemExit(f"edgeapp classified {stats.ok} of {len(paths)} images")
        return run

    @property
    def where(self) -> str:
        return self.opened.where

    @property
    def input_size(self) -> tuple:
        """((width, height), Pillow mode) of the model's input."""
        shape = self.opened.runner.engine.input_shape
        return (int(shape[2]), int(shape[1])), "RGB" if shape[3] == 3 else "L"

    def close(self) -> None:
        self.opened.close()


def in_order(flip: bool, edgeapp: Callable[[], Any], peer: Callable[[], Any]) -> tuple:
    """(edgeapp's result, the peer's), run in that order when `flip`, else the peer first."""
    if flip:
        first = edgeapp()
        return first, peer()
    other = peer()
    return edgeapp(), other


_RATE = re.compile(r"image\(s\) in [\d.]+ s \(([\d.]+)/s\)")


def cli_rate(model: Path, folder: Path, env: dict, tmp: Path) -> float:
    """Images/s that `edgeapp classify MODEL FOLDER -o results.jsonl` reports (its summary line:
    the batch alone, start-up and model loading excluded), as a user runs it."""
    cmd = edgeapp_command() + ["classify", str(model), str(folder), "-o", str(tmp / "cli.jsonl"),
                                  "--overwrite"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=str(tmp))
    found = _RATE.search(proc.stderr)
    if proc.returncode != 0 or not found:
        raise SystemExit(f"{' '.join(cmd)} failed: {proc.stderr.strip()[-400:]}")
    return float(found.group(1))


# -- the run ----------------------------------------------------------------------------------------

def spread(values: List[float]) -> dict:
    a = np.asarray(values, dtype=float)
    return {"median": float(np.median(a)), "p10": float(np.percentile(a, 10)),
            "p90": float(np.percentile(a, 90)), "n": len(values),
            "samples": [round(v, 4) for v in values]}


def machine() -> dict:
    from edgeapp.hw.hostinfo import cpu_model, usable_cores
    from edgeapp.hw.runtime import find_runtime

    rt = find_runtime()
    return {"cpu": cpu_model(), "usable_cores": usable_cores(), "python": platform.python_version(),
            "runtime": f"{rt.name} {rt.version}", "edgeapp": edgeapp_command()[0]}


class Bench:
    def __init__(self, args: argparse.Namespace, tmp: Path) -> None:
        from edgeapp.hw.hostinfo import usable_cores

        self.args, self.tmp = args, tmp
        self.cores = usable_cores()
        size = tuple(int(v) for v in args.size.split("x"))
        images = tmp / "images"
        images.mkdir()
        self.images = images
        self.paths = make_jpegs(images, args.count, size)
        for p in self.paths:  # the page cache holds them for every side
            Path(p).read_bytes()
        self.mobilenet = MOBILENET.is_file() and not args.no_mobilenet
        os.environ["EDGEAPP_CACHE_DIR"] = str(tmp / "cache")  # verdicts of this run only, here too
        # bytecode cached as in an installed package (pip compiles it), kept out of the tree
        self.env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        self.env.update(PYTHONPYCACHEPREFIX=str(tmp / "pycache"), EDGEAPP_NO_PROGRESS="1")
        # a copy of edgeapp without bytecode, first on the path: its modules compiled each run,
        # installed packages (typer, numpy) still read their own bytecode
        import edgeapp

        shutil.copytree(Path(edgeapp.__file__).parent, tmp / "source" / "edgeapp",
                        ignore=shutil.ignore_patterns("__pycache__"))
        self.compiling = {k: v for k, v in self.env.items() if k != "PYTHONPYCACHEPREFIX"}
        self.compiling.update(PYTHONDONTWRITEBYTECODE="1", PYTHONPATH=str(tmp / "source"))
        self.cmds = startup_commands(self.paths[0], self.mobilenet) if not args.no_startup else {}
        self.samples: Dict[str, List[float]] = {}
        self.batches: Dict[str, EdgeappBatch] = {}
        self.plain: Optional[PlainModel] = None
        self.plain_scaled: Optional[PlainModel] = None
        self.camera: Optional[List[str]] = None
        self.digits_input = None

    def add(self, key: str, value: float) -> None:
        self.samples.setdefault(key, []).append(value)

    def runs(self, key: str, run: Run) -> None:
        self.add(key, run.rate)
        self.add(key + "/cpu_ms", run.cpu_ms)
        self.add(key + "/busy", run.busy(self.cores))

    def startup_round(self, keep: bool) -> None:
        for _ in range(self.args.repeat):
            for label, cmd in self.cmds.items():
                env = self.env
                if label == COMPILING:
                    env = self.compiling
                wall, cpu = run_child(cmd, env, str(self.tmp))
                if keep:
                    self.add(f"start/{label}/wall", wall)
                    self.add(f"start/{label}/cpu", cpu)

    def throughput_round(self, keep: bool, flip: bool) -> None:
        """One run of each side; `flip`: edgeapp first (rounds alternate, so a load that rises
        or falls during a round favours neither side)."""
        if self.args.no_batch:
            return
        scaled = self.args.decode == "scaled"
        digits = self.batches.setdefault("digits", EdgeappBatch(DIGITS, self.tmp / "digits.jsonl",
                                                                self.args.decode))
        if self.digits_input is None:
            shape = digits.opened.runner.engine.input_shape
            self.digits_input = ((int(shape[2]), int(shape[1])), "RGB" if shape[3] == 3 else "L")
        size, mode = self.digits_input
        fast, decode = in_order(flip, lambda: digits.rate(self.paths),
                                lambda: peer_decode(self.paths, size, mode, self.cores, scaled))
        cli = cli_rate(DIGITS, self.images, self.env, self.tmp) if self.args.cli else None
        if keep:
            self.runs("fast/decode_capacity", decode)
            self.runs("fast/edgeapp", fast)
            self.add("fast/ratio", fast.rate / decode.rate)
            self.add("fast/work_share", decode.cpu_ms / fast.cpu_ms)
            self.add("fast/busy", fast.busy(self.cores) / decode.busy(self.cores))
            if cli is not None:
                self.add("fast/cli", cli)
                self.add("fast/cli_ratio", cli / decode.rate)
        if not self.mobilenet:
            return
        mnv2 = self.batches.setdefault("mobilenet_v2",
                                       EdgeappBatch(MOBILENET, self.tmp / "mobilenet.jsonl",
                                                    self.args.decode))
        if self.plain is None:
            self.plain = PlainModel(MOBILENET, self.cores, scaled)
        alone = cpu_work(self.paths, self.plain)
        rate, (fused, split) = in_order(
            flip, lambda: mnv2.rate(self.paths),
            lambda: (peer_fused(self.paths, self.plain), peer_split(self.paths, self.plain, self.cores)))
        prepare, invoke = fused.work  # every core busy with exactly this work
        bound = self.cores / (prepare + invoke)
        cli = cli_rate(MOBILENET, self.images, self.env, self.tmp) if self.args.cli else None
        if keep:
            if cli is not None:
                self.add("mnv2/cli", cli)
                self.add("mnv2/cli_ratio_bound", cli / bound)
            self.add("mnv2/prepare_ms", prepare * 1000)
            self.add("mnv2/invoke_ms", invoke * 1000)
            self.add("mnv2/cpu_work_bound", bound)
            self.add("mnv2/prepare_ms_alone", alone[0] * 1000)
            self.add("mnv2/invoke_ms_alone", alone[1] * 1000)
            self.add("mnv2/cpu_work_bound_alone", self.cores / sum(alone))
            self.runs("mnv2/peer_fused", fused)
            self.runs("mnv2/peer_split", split)
            self.runs("mnv2/edgeapp", rate)
            self.add("mnv2/ratio_bound", rate.rate / bound)
            self.add("mnv2/ratio_bound_alone", rate.rate / (self.cores / sum(alone)))
            self.add("mnv2/ratio_peer", rate.rate / max(fused.rate, split.rate))
            # the ratio's two factors: necessary CPU work / CPU spent, and cores kept busy
            self.add("mnv2/work_share", (prepare + invoke) * 1000 / rate.cpu_ms)
            self.add("mnv2/busy", rate.busy(self.cores))

    def camera_round(self, keep: bool, flip: bool) -> None:
        """Camera-sized photos (--camera N of 0.3-12 MP): the fast model with scaled and full
        decode beside both decode capacities, MobileNet V2 (scaled) beside its CPU-work bound
        with decode counted at the scale used."""
        if not self.args.camera:
            return
        if self.camera is None:
            folder = self.tmp / "camera"
            folder.mkdir()
            self.camera = make_camera_jpegs(folder, self.args.camera)
            for p in self.camera:
                Path(p).read_bytes()
        paths, fast_model = self.camera, (FAST if FAST.is_file() else DIGITS)
        runs = {}
        for decode in ("scaled", "full"):
            self.batches.setdefault(f"camera_{decode}", EdgeappBatch(
                fast_model, self.tmp / f"camera_{decode}.jsonl", decode))
        size, mode = self.batches["camera_scaled"].input_size
        sides = [("edgeapp_scaled", lambda: self.batches["camera_scaled"].rate(paths)),
                 ("capacity_scaled", lambda: peer_decode(paths, size, mode, self.cores, True)),
                 ("edgeapp_full", lambda: self.batches["camera_full"].rate(paths)),
                 ("capacity_full", lambda: peer_decode(paths, size, mode, self.cores, False))]
        for name, run in (sides[::-1] if flip else sides):
            runs[name] = run()
        if self.mobilenet:
            mnv2 = self.batches.setdefault("camera_mnv2", EdgeappBatch(
                MOBILENET, self.tmp / "camera_mnv2.jsonl", "scaled"))
            if self.plain_scaled is None:
                self.plain_scaled = PlainModel(MOBILENET, self.cores, True)
            runs["mnv2"], runs["mnv2_peer"] = in_order(
                flip, lambda: mnv2.rate(paths), lambda: peer_fused(paths, self.plain_scaled))
        if not keep:
            return
        for name, run in runs.items():
            self.runs(f"camera/{name}", run)
        self.add("camera/ratio_scaled", runs["edgeapp_scaled"].rate / runs["capacity_scaled"].rate)
        self.add("camera/ratio_full", runs["edgeapp_full"].rate / runs["capacity_full"].rate)
        self.add("camera/scaled_vs_full_capacity",
                 runs["capacity_scaled"].rate / runs["capacity_full"].rate)
        self.add("camera/default_vs_full_capacity",
                 runs["edgeapp_scaled"].rate / runs["capacity_full"].rate)
        if "mnv2" in runs:
            prepare, invoke = runs["mnv2_peer"].work
            bound = self.cores / (prepare + invoke)
            self.add("camera/mnv2_prepare_ms", prepare * 1000)
            self.add("camera/mnv2_bound", bound)
            self.add("camera/mnv2_ratio_bound", runs["mnv2"].rate / bound)
            self.add("camera/mnv2_work_share", (prepare + invoke) * 1000 / runs["mnv2"].cpu_ms)
            self.add("camera/mnv2_busy", runs["mnv2"].busy(self.cores))

    def run(self) -> dict:
        load = [os.getloadavg()[0]]
        for r in range(self.args.rounds + 1):  # round 0 warms caches, verdicts, interpreters
            self.startup_round(keep=r > 0)
            self.throughput_round(keep=r > 0, flip=r % 2 == 1)
            self.camera_round(keep=r > 0, flip=r % 2 == 1)
            load.append(os.getloadavg()[0])
            if not self.args.json:
                print(f"round {r}/{self.args.rounds} done (load average {load[-1]:.2f})",
                      file=sys.stderr)
        for batch in self.batches.values():
            batch.close()
        result = {"machine": machine(), "images": {"count": len(self.paths), "size": self.args.size,
                                                   "decode": self.args.decode,
                                                   "camera": camera_sizes(self.camera or [])},
                  "rounds": self.args.rounds, "repeat": self.args.repeat,
                  "loadavg_1m": {"min": min(load), "max": max(load)}, "targets": TARGETS,
                  "where": {k: b.where for k, b in self.batches.items()},
                  "figures": {k: spread(v) for k, v in self.samples.items()}}
        result["verdicts"] = verdicts(result["figures"])
        return result


def verdicts(figures: dict) -> dict:
    """Each target against its median."""
    def med(key: str) -> Optional[float]:
        return figures[key]["median"] if key in figures else None

    found = {}
    help_s = med("start/edgeapp --help/wall")
    if help_s is not None:
        found["help_s"] = {"value": help_s, "target": TARGETS["help_s"], "met": help_s <= TARGETS["help_s"]}
    for label in ("digits", "mobilenet_v2"):
        v = med(f"start/classify {label} one.jpg/wall")
        if v is not None:
            found[f"classify_{label}_s"] = {"value": v, "target": TARGETS["classify_s"],
                                            "met": v <= TARGETS["classify_s"]}
    for key, fig in (("fast_vs_decode", "fast/ratio"), ("mobilenet_vs_bound", "mnv2/ratio_bound"),
                     ("camera_fast_vs_scaled_capacity", "camera/ratio_scaled"),
                     ("camera_scaled_vs_full_capacity", "camera/scaled_vs_full_capacity"),
                     ("camera_mobilenet_vs_bound", "camera/mnv2_ratio_bound"),
                     ("camera_full_vs_full_capacity", "camera/ratio_full")):
        v = med(fig)
        if v is not None:
            found[key] = {"value": v, "target": TARGETS[key], "met": v >= TARGETS[key]}
    return found


def print_table(r: dict) -> None:
    m, f = r["machine"], r["figures"]
    print(f"{m['cpu']}, {m['usable_cores']} usable cores, Python {m['python']}, {m['runtime']}; "
          f"load average {r['loadavg_1m']['min']:.2f}-{r['loadavg_1m']['max']:.2f}")
    print(f"{r['rounds']} rounds after a warm-up; median [p10-p90]")

    def row(label: str, key: str, unit: str, fmt: str = "{:.3f}", extra: str = "") -> None:
        if key not in f:
            return
        s = f[key]
        value = " ".join((fmt.format(s["median"]), f"[{fmt.format(s['p10'])}-{fmt.format(s['p90'])}]"))
        if not extra and f"{key}/cpu_ms" in f:
            extra = (f"cpu {f[key + '/cpu_ms']['median']:.2f} ms/img, "
                     f"cores busy {f[key + '/busy']['median']:.2f}")
        print(f"  {label:<36} {value:>24} {unit:<6} {extra}")

    if any(k.startswith("start/") for k in f):
        print(f"start-up, wall seconds (n={r['rounds'] * r['repeat']}) and the child's CPU seconds:")
        for label in ("python -c pass", "python -c 'import typer'", "edgeapp --help", COMPILING,
                      "classify digits one.jpg", "classify mobilenet_v2 one.jpg"):
            cpu = f.get(f"start/{label}/cpu")
            row(label, f"start/{label}/wall", "s",
                extra=f"cpu {cpu['median']:.3f} s" if cpu else "")
    if "fast/ratio" in f:
        print(f"batch classify, images/s over {r['images']['count']} {r['images']['size']} JPEGs:")
        row("digits: decode capacity (peer)", "fast/decode_capacity", "img/s", "{:.1f}")
        row(f"digits: edgeapp ({r['where'].get('digits')})", "fast/edgeapp", "img/s", "{:.1f}")
        row("  edgeapp / decode capacity", "fast/ratio", "")
        row("    = peer's CPU / edgeapp's CPU", "fast/work_share", "")
        row("    x cores kept busy, / peer's", "fast/busy", "")
        row("digits: edgeapp classify FOLDER (CLI)", "fast/cli", "img/s", "{:.1f}")
        row("  CLI / decode capacity", "fast/cli_ratio", "")
    if "mnv2/ratio_bound" in f:
        row("mobilenet_v2: prepare, CPU ms/img", "mnv2/prepare_ms", "ms", "{:.2f}",
            extra=_alone(f, "mnv2/prepare_ms_alone"))
        row("mobilenet_v2: invoke, CPU ms/img", "mnv2/invoke_ms", "ms", "{:.2f}",
            extra=_alone(f, "mnv2/invoke_ms_alone"))
        row("mobilenet_v2: CPU-work bound", "mnv2/cpu_work_bound", "img/s", "{:.1f}",
            extra=_alone(f, "mnv2/cpu_work_bound_alone", "{:.1f}"))
        row("mobilenet_v2: peer, fused", "mnv2/peer_fused", "img/s", "{:.1f}")
        row("mobilenet_v2: peer, split", "mnv2/peer_split", "img/s", "{:.1f}")
        row(f"mobilenet_v2: edgeapp ({r['where'].get('mobilenet_v2')})", "mnv2/edgeapp", "img/s", "{:.1f}")
        row("  edgeapp / CPU-work bound", "mnv2/ratio_bound", "",
            extra=_alone(f, "mnv2/ratio_bound_alone", "{:.3f}"))
        row("    = necessary CPU / edgeapp's CPU", "mnv2/work_share", "")
        row("    x cores kept busy", "mnv2/busy", "")
        row("  edgeapp / best peer", "mnv2/ratio_peer", "")
        row("mobilenet_v2: edgeapp classify FOLDER (CLI)", "mnv2/cli", "img/s", "{:.1f}")
        row("  CLI / CPU-work bound", "mnv2/cli_ratio_bound", "")
    if "camera/ratio_scaled" in f:
        c = r["images"]["camera"]
        print(f"camera-sized photos: {c['count']} JPEGs of {c['megapixels'][0]}-{c['megapixels'][1]} MP, "
              f"fast model {FAST.stem if FAST.is_file() else 'digits'}:")
        row("full-decode capacity (peer)", "camera/capacity_full", "img/s", "{:.1f}")
        row("scaled-decode capacity (peer)", "camera/capacity_scaled", "img/s", "{:.1f}")
        row("  scaled / full capacity", "camera/scaled_vs_full_capacity", "")
        row("edgeapp --decode scaled", "camera/edgeapp_scaled", "img/s", "{:.1f}")
        row("  / scaled-decode capacity", "camera/ratio_scaled", "")
        row("  / full-decode capacity", "camera/default_vs_full_capacity", "")
        row("edgeapp --decode full", "camera/edgeapp_full", "img/s", "{:.1f}")
        row("  / full-decode capacity", "camera/ratio_full", "")
        row("mobilenet_v2: prepare (scaled), CPU ms/img", "camera/mnv2_prepare_ms", "ms", "{:.2f}")
        row("mobilenet_v2: CPU-work bound (scaled)", "camera/mnv2_bound", "img/s", "{:.1f}")
        row("mobilenet_v2: edgeapp (scaled)", "camera/mnv2", "img/s", "{:.1f}")
        row("  edgeapp / CPU-work bound", "camera/mnv2_ratio_bound", "")
        row("    = necessary CPU / edgeapp's CPU", "camera/mnv2_work_share", "")
        row("    x cores kept busy", "camera/mnv2_busy", "")
    print("targets (medians):")
    for key, v in r["verdicts"].items():
        sign = "<=" if key.endswith("_s") else ">="
        print(f"  {key:<24} {v['value']:.3f} {sign} {v['target']}: {'met' if v['met'] else 'NOT met'}")


def _alone(figures: dict, key: str, fmt: str = "{:.2f}") -> str:
    """The same figure measured on one core with the others idle, for the table's margin."""
    return f"one core alone: {fmt.format(figures[key]['median'])}" if key in figures else ""


FAST = SHARED / "mobilenet_v1_0.25_128_quant.tflite"


def isolate_ratios(args: argparse.Namespace, tmp: Path) -> dict:
    """--isolate: edgeapp's batch throughput with the model in a worker process (--isolate)
    over in-process (--no-isolate), per model, in interleaved rounds (one warm-up round first);
    the ratio's median and spread over the rounds. Targets: 0.95 on MobileNet V2, 0.85 on the
    fast model (MobileNet v1 0.25/128)."""
    models = [Path(m) for m in args.isolate_model] or \
        [m for m in (MOBILENET, FAST) if m.is_file()] or [ROOT / "models" / "digits_int8.tflite"]
    (tmp / "jpegs").mkdir()
    paths = make_jpegs(tmp / "jpegs", args.count, tuple(int(v) for v in args.size.split("x")))
    out: dict = {}
    for model in models:
        sides = {flag: EdgeappBatch(model, tmp / f"{flag}.jsonl", args.decode, isolate=flag)
                 for flag in (True, False)}
        ratios, rates = [], {True: [], False: []}
        try:
            for r in range(args.rounds + 1):
                iso, plain = in_order(r % 2 == 0, lambda: sides[True].rate(paths),
                                      lambda: sides[False].rate(paths))
                if r:
                    rates[True].append(iso.rate)
                    rates[False].append(plain.rate)
                    ratios.append(iso.rate / plain.rate)
        finally:
            for side in sides.values():
                side.close()
        out[model.name] = {"ratio": spread(ratios), "isolated_per_s": spread(rates[True]),
                           "in_process_per_s": spread(rates[False]), "where": "cpu"}
        if not args.json:
            print(f"{model.name}: --isolate / in-process throughput {out[model.name]['ratio']['median']:.3f} "
                  f"(p10 {out[model.name]['ratio']['p10']:.3f}, p90 {out[model.name]['ratio']['p90']:.3f}); "
                  f"{spread(rates[True])['median']:.1f} vs {spread(rates[False])['median']:.1f} images/s "
                  f"over {args.rounds} rounds of {len(paths)} JPEGs", flush=True)
    return {"isolate": out, "machine": machine()}


def main(argv: Optional[list] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5, help="counted rounds (after one warm-up)")
    ap.add_argument("--repeat", type=int, default=3, help="start-up runs of each command per round")
    ap.add_argument("--count", type=int, default=480, help="JPEGs per throughput run")
    ap.add_argument("--size", default="640x480", help="JPEG size WxH")
    ap.add_argument("--no-startup", action="store_true", help="skip the start-up figures")
    ap.add_argument("--no-batch", action="store_true", help="skip the throughput figures")
    ap.add_argument("--no-mobilenet", action="store_true", help="skip MobileNet V2")
    ap.add_argument("--decode", choices=("scaled", "full"), default="full",
                    help="how edgeapp and the peers decode the --size JPEGs (edgeapp's --decode; "
                         "full: classify's default)")
    ap.add_argument("--camera", type=int, default=30, metavar="N",
                    help="camera-sized photos (0.3-12 MP) per run; 0 skips that set")
    ap.add_argument("--cli", action=argparse.BooleanOptionalAction, default=True,
                    help="also run `edgeapp classify FOLDER` as a user does (its own summary's rate)")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    ap.add_argument("--save", type=Path, metavar="FILE", help="also write the results as JSON to FILE")
    ap.add_argument("--isolate", action="store_true",
                    help="only compare the batch throughput of --isolate with in-process's")
    ap.add_argument("--isolate-model", action="append", default=[], metavar="MODEL",
                    help="with --isolate: a model to compare on (repeatable; default: MobileNet V2 "
                         "and MobileNet v1 0.25/128 from ../shared/coral, else the digits model)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="edgeapp-host-") as tmp:
        if args.isolate:
            result = isolate_ratios(args, Path(tmp))
            if args.save:
                args.save.write_text(json.dumps(result, indent=2) + "\n")
            if args.json:
                print(json.dumps(result, indent=2))
            return 0
        result = Bench(args, Path(tmp)).run()
    if args.save:
        args.save.write_text(json.dumps(result, indent=2) + "\n")
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_table(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
