"""A model cut into N segments, run as a pipeline over N Edge TPUs.

As Coral's PipelinedModelRunner does: one interpreter per segment, each on its own TPU and
driven by its own thread, with bounded queues between them (one item between two segments, so
a slow segment holds back the ones before it instead of piling up memory). While segment 1
works on image k, segment 0 already works on image k+1. Tensors travel by name; one that a
later segment reads skips the segments in between (core/pipeline_segments.Chain), and is dropped after
its last reader. Results come out in input order (every queue is FIFO).

A segment that fails stops the pipeline cleanly: every thread ends, every result before the
failure has been handed back, and the error says which segment and TPU. With `auto` the CPU
twin of the whole model (`X.tflite` beside the segments) takes over from the first item not
finished, so nothing is lost. Ctrl-C (or any exception in the caller) stops it the same way.
"""

from __future__ import annotations

import collections
import queue
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, List, Optional

from typing_extensions import TypedDict

from edgeapp.core.edgetpu.pipeline_segments import check_chain, set_label
from edgeapp.core.naming import segment_source
from edgeapp.core.tflite.model import load_model
from edgeapp.errors import DeviceFailed, DeviceUnavailable, EdgeappError, InvalidModel, UsageError
from edgeapp.execution.runner import Done, Notice, Runner, SingleRunner, invoke
from edgeapp.hw.device_choice import find_tpus, resolve_tpus
from edgeapp.hw.runtime import Engine, EngineOptions, TfliteEngine, open_engine

if TYPE_CHECKING:
    import numpy as np

    from edgeapp.hw.device_choice import DeviceChoice

_END = object()
_POLL_S = 0.1  # how often blocked threads look at the stop flag



class SegmentStat(TypedDict):
    """One segment of a pipeline run: its device and model, invokes, mean invoke time (ms)."""
    segment: int
    device: str
    model: str
    invokes: int
    mean_ms: Optional[float]

class _Failure:
    def __init__(self, error: BaseException, segment: int) -> None:
        self.error, self.segment = error, segment


class PipelineView(Engine):
    """The pipeline seen as one model: the first segment's input, the last segment's outputs
    (what input_spec, classifier_output and the detection layout read); `run` is the runner's."""

    def __init__(self, engines: List[TfliteEngine], label: str, source: str) -> None:
        first, last = engines[0], engines[-1]
        self.engines = engines
        self.inputs, self.input = first.inputs, first.input
        self.input_shape, self.input_dtype = first.input_shape, first.input_dtype
        self.input_quantization = first.input_quantization
        self.outputs = last.outputs
        self.model = last.model  # the post-process op and signature live in the last segment
        self.model_path = label
        self.requested_model = source
        self.device = "edgetpu"
        self.name = "+".join(e.name for e in engines)
        self.notice = None
        self.runtime = first.runtime
        self.cpu_kernels = first.cpu_kernels

    def run(self, tensor: np.ndarray) -> List[np.ndarray]:
        raise NotImplementedError("a pipeline runs through its SegmentPipeline runner")


class SegmentPipeline(Runner):
    """Runs `engines[i]` (segment i) in thread i; `chain` says which tensors go where."""

    def __init__(self, engines: list, chain, *, label: str, source: str,
                 fallback: Optional[Callable] = None, on_notice: Optional[Notice] = None,
                 queue_size: int = 1) -> None:
        super().__init__()
        n = len(engines)
        self.chain, self._engines = chain, engines
        self.engine = PipelineView(engines, label, source)
        self.label = f"{n}-segment pipeline on {', '.join(e.name for e in engines)}"
        self.model_path, self.meta_path = label, source
        self.segment_ms: list[list[float]] = [[] for _ in range(n)]  # invoke time per segment
        self._fallback, self._say = fallback, on_notice
        self.window = 2 * n + 2
        self._queues = [queue.Queue(maxsize=self.window)] + \
            [queue.Queue(maxsize=queue_size) for _ in range(n - 1)] + [queue.Queue()]
        self._stop = threading.Event()
        # after segment i, tensors no later segment reads are dropped
        self._drop = [[name for name, last in chain.last_use.items() if last == i] for i in range(n)]
        self._threads = [threading.Thread(target=self._segment, args=(i,), daemon=True,
                                          name=f"edgeapp-segment-{i}") for i in range(n)]
        for t in self._threads:
            t.start()

    # -- segment threads -------------------------------------------------------------------

    def _put(self, q: queue.Queue, item) -> bool:
        while not self._stop.is_set():
            try:
                q.put(item, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def _get(self, q: queue.Queue):
        while not self._stop.is_set():
            try:
                return q.get(timeout=_POLL_S)
            except queue.Empty:
                continue
        return _END

    def _segment(self, i: int) -> None:
        engine, hop = self._engines[i], self.chain.hops[i]
        q_in, q_out = self._queues[i], self._queues[i + 1]
        while True:
            item = self._get(q_in)
            if item is _END or isinstance(item, _Failure):
                self._put(q_out, item)
                return
            seq, tensors, spent = item
            t0 = time.perf_counter()
            try:
                outputs = engine.run_all([tensors[name] for name in hop.inputs])
            except BaseException as e:  # noqa: BLE001 - ends the pipeline, raised in the caller
                self._put(q_out, _Failure(e, i))
                return
            spent.append((time.perf_counter() - t0) * 1000.0)
            self.segment_ms[i].append(spent[-1])
            for name in self._drop[i]:
                tensors.pop(name, None)
            tensors.update(zip(hop.outputs, outputs))
            if not self._put(q_out, (seq, tensors, spent)):
                return

    # -- the caller's side -----------------------------------------------------------------

    def imap(self, items):
        first_input = self.chain.hops[0].inputs[0]
        last = self.chain.hops[-1].outputs
        pending: collections.deque = collections.deque()  # (seq, key, payload or None)
        it = iter(items)
        seq, in_flight, exhausted = 0, 0, False
        while True:
            while not exhausted and in_flight < self.window and len(pending) < 4 * self.window:
                nxt = next(it, _END)
                if nxt is _END:
                    exhausted = True
                    break
                key, payload = nxt
                if payload is not None:
                    self._put(self._queues[0], (seq, {first_input: payload}, []))
                    in_flight += 1
                pending.append((seq, key, payload))
                seq += 1
            if not pending:
                return
            _, key, payload = pending[0]
            if payload is None:
                pending.popleft()
                yield key, None
                continue
            result = self._result()  # FIFO: this is the head's result
            if isinstance(result, _Failure):
                yield from self._take_over(result, pending, it)
                return
            pending.popleft()
            in_flight -= 1
            _, tensors, spent = result
            done = Done([tensors[name] for name in last], self.engine.name, sum(spent))
            self.counts[done.device] += 1
            yield key, done

    def _result(self):
        while True:
            try:
                return self._queues[-1].get(timeout=_POLL_S)  # a timeout keeps Ctrl-C responsive
            except queue.Empty:
                continue

    def _take_over(self, failure: _Failure, pending, rest):
        """A segment failed: stop every thread; with a fallback, the CPU twin runs what is left
        (the unfinished items first, in order), else the error goes to the caller."""
        self.close()
        engine = self._engines[failure.segment]
        error = failure.error
        if not isinstance(error, EdgeappError):
            raise error
        where = f"segment {failure.segment} on {engine.name}"
        self.failures.append((engine.name, str(error)))
        if self._fallback is None or not isinstance(error, DeviceUnavailable):
            raise DeviceFailed(f"{where} failed, pipeline stopped: {error}", engine.name) \
                if isinstance(error, DeviceUnavailable) else error
        single = SingleRunner(self._fallback(), on_notice=self._say)
        if self._say:
            self._say(f"{where} failed ({error}); {single.engine.notice or 'running on CPU'} for the rest")
        self.label += f", then {single.engine.name}"
        for _, key, payload in pending:
            done = None if payload is None else single.run(payload)
            if done is not None:
                self.counts[done.device] += 1
            yield key, done
        for key, payload in rest:
            done = None if payload is None else single.run(payload)
            if done is not None:
                self.counts[done.device] += 1
            yield key, done

    def close(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=5.0)

    def segment_stats(self) -> List[SegmentStat]:
        """Per segment: device, invokes and mean ms; the slowest one bounds the throughput."""
        out: List[SegmentStat] = []
        for i, (engine, ms) in enumerate(zip(self._engines, self.segment_ms)):
            out.append({"segment": i, "device": engine.name, "model": engine.model_path,
                        "invokes": len(ms), "mean_ms": round(sum(ms) / len(ms), 3) if ms else None})
        return out


def open_pipeline(paths: list, choice: DeviceChoice, options: Optional[EngineOptions] = None, *,
                  on_notice: Optional[Notice] = None, work: Callable = invoke) -> Runner:
    """Check the chain, then open segment i on the i-th TPU of `choice` (a list, `all`, or
    `auto`: every TPU found). Too few TPUs: an error, or with `auto` the CPU twin of the whole
    model (`options.cpu_model`, else the segments' source). `--device cpu` runs the twin.
    `options` (hw/runtime.EngineOptions) open every segment's TPU and the twin."""
    options = options or EngineOptions()
    say = on_notice or (lambda _text: None)
    n = len(paths)
    chain = check_chain([load_model(p) for p in paths])
    label, source = set_label(paths), str(segment_source(paths[0]))
    twin_path = Path(options.cpu_model) if options.cpu_model else Path(source)

    def twin(why: str) -> TfliteEngine:
        if not twin_path.exists():
            raise DeviceUnavailable(f"{why}: the whole model's CPU twin {twin_path} was not found; "
                                    "pass --cpu-model X.tflite (the model that was segmented)")
        engine = open_engine(twin_path, "cpu", options, probe=False)
        _check_twin(engine, chain, paths)
        engine.notice = f"running {twin_path.name} (the whole model) on CPU"
        return engine

    if work is not invoke:
        raise UsageError("segment pipelines run in classify, detect and bench, not here: pass the "
                         f"whole model ({twin_path.name}) instead")
    single = choice.single
    if single is not None and single.kind == "cpu":
        engine = twin("--device cpu runs the whole model")
        say(f"--device cpu: {engine.notice}")
        return SingleRunner(engine, work=work, on_notice=on_notice, meta_path=source)
    if single is not None and single.kind != "auto":
        raise UsageError(f"{n} segments run on {n} Edge TPUs, one each: use --device all or name "
                         f"{n} TPUs (usb:0,usb:1,...), not {single.text}")
    fallback = single is not None or choice.fallback
    lenient = fallback or choice.every  # TPUs found but unusable are skipped, not fatal
    names = find_tpus() if single is not None else resolve_tpus(choice)
    engines, skipped = _open_segments(paths, names, lenient, options)
    for s in skipped:
        say(f"skipping {s}")
    if len(engines) < n:
        why = f"{n} segments need {n} Edge TPUs, {len(engines)} usable"
        if not fallback:
            raise DeviceUnavailable(f"{why} (--device {choice.text}); use the whole model "
                                    f"({twin_path.name}) or fewer segments")
        engine = twin(why)
        say(f"{why}: {engine.notice}")
        return SingleRunner(engine, work=work, on_notice=on_notice, meta_path=source)
    if len(names) > n:
        say(f"{n} segments on {', '.join(e.name for e in engines)} ({len(names) - n} more TPU(s) idle)")
    return SegmentPipeline(engines, chain, label=label, source=source,
                           fallback=(lambda: twin("a segment failed"))
                           if fallback and twin_path.exists() else None,
                           on_notice=on_notice)


def _open_segments(paths: list, names: list, lenient: bool,
                   options: EngineOptions) -> tuple[List[TfliteEngine], list[str]]:
    """Segment i on the i-th usable TPU of `names` (the rest stay idle); an unusable TPU fails,
    or with `lenient` is skipped and named ("name: why") in the second list."""
    engines: List[TfliteEngine] = []
    skipped: list[str] = []
    for name in names:
        if len(engines) == len(paths):
            break
        try:
            engines.append(open_engine(paths[len(engines)], name, options))
        except DeviceUnavailable as e:
            if not lenient:
                raise
            skipped.append(f"{name}: {e}")
    return engines, skipped


def _check_twin(engine: TfliteEngine, chain, paths) -> None:
    """The whole model must take the first segment's input and give the last one's outputs."""
    first, last = load_model(paths[0]), load_model(paths[-1])
    want = [(tuple(t.shape), t.dtype) for t in first.input_tensors + last.output_tensors]
    got = [(tuple(t.shape), t.dtype) for t in engine.model.input_tensors + engine.model.output_tensors]
    if want != got:
        raise InvalidModel(f"CPU twin {engine.model_path} does not match the segments: inputs/outputs "
                           f"{got} vs {want}; pass the segmented model with --cpu-model")
