"""The synthetic int8 model of `bench --synthetic`: how many int8 TOPS can this device reach?

A stack of 3×3 CONV_2D layers (or FULLY_CONNECTED layers) written with our own flatbuffer
writer, so no TensorFlow is needed. Its parameters stay under the Edge TPU's ~8 MiB on-chip
cache (weights streamed over USB every inference would measure the link, not the chip), and the
convolutions reuse every weight over the whole feature map, so the run is compute-bound: the
int8 counterpart of a matmul TFLOPS benchmark. The MACs are known by construction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgeapp.core.edgetpu.specs import ON_CHIP_CACHE_BYTES
from edgeapp.core.naming import edgetpu_twin_path
from edgeapp.core.tflite.writer import ModelWriter, conv_layer, dense_layer, int8_input
from edgeapp.errors import CompileError, MissingDependency
from edgeapp.hw.devices import scan_sysfs

PARAM_BUDGET = int(ON_CHIP_CACHE_BYTES * 0.75)  # headroom for the compiler's own data
_INT8_STD = 255 / math.sqrt(12)  # std of values spread over the whole int8 range
_OUT_STD = 40.0


@dataclass(frozen=True)
class SyntheticSpec:
    """Shape of the synthetic model. conv: `layers` 3×3 convs of `channels` on size×size;
    fc: `layers` dense layers of `channels` units on a batch of `size` rows."""

    kind: str = "conv"
    layers: int = 10
    channels: int = 256
    size: int = 16
    kernel: int = 3

    @property
    def macs(self) -> int:
        """Multiply-accumulates per inference, by construction."""
        if self.kind == "conv":
            return self.layers * self.size * self.size * self.channels * self.channels * self.kernel ** 2
        return self.layers * self.size * self.channels * self.channels

    @property
    def parameter_bytes(self) -> int:
        """int8 weights plus int32 biases."""
        per_layer = self.channels * self.channels * (self.kernel ** 2 if self.kind == "conv" else 1)
        return self.layers * (per_layer + 4 * self.channels)

    @property
    def input_shape(self) -> tuple[int, ...]:
        if self.kind == "conv":
            return (1, self.size, self.size, self.channels)
        return (self.size, self.channels)

    def describe(self) -> str:
        if self.kind == "conv":
            what = (f"{self.layers}× CONV_2D {self.kernel}x{self.kernel}, {self.channels}→"
                    f"{self.channels} channels on {self.size}x{self.size}")
        else:
            what = f"{self.layers}× FULLY_CONNECTED {self.channels}→{self.channels}, {self.size} rows"
        return (f"synthetic int8 {what}: {self.macs / 1e6:.0f} M MACs, "
                f"{self.parameter_bytes / 2**20:.2f} MiB parameters")


DEFAULT_SPEC = SyntheticSpec()


def build_synthetic(spec: SyntheticSpec = DEFAULT_SPEC, seed: int = 0) -> bytes:
    """The synthetic model as .tflite bytes; raises ValueError when it outgrows the TPU cache."""
    if spec.kind not in ("conv", "fc"):
        raise ValueError(f"unknown synthetic kind {spec.kind!r} (conv or fc)")
    if spec.parameter_bytes > PARAM_BUDGET:
        raise ValueError(f"{spec.describe()} exceeds the {PARAM_BUDGET / 2**20:.1f} MiB "
                         "parameter budget of the Edge TPU cache")
    rng = np.random.RandomState(seed)  # not default_rng: numpy 1.16 (Coral Dev Board) lacks it
    w = ModelWriter(spec.describe())
    x = int8_input(w, "input", spec.input_shape, scale=1 / 32)
    first = x.index
    depth = spec.channels * (spec.kernel ** 2 if spec.kind == "conv" else 1)
    x_std = _INT8_STD  # the benchmark feeds uniformly random int8 input
    for i in range(spec.layers):
        c = spec.channels
        # Choose the output scale so activations keep a std of _OUT_STD int8 steps, neither
        # saturating nor fading to zero: the accumulator's std is about sqrt(depth)·std(x)·std(w).
        acc_std = math.sqrt(depth) * x_std * _INT8_STD
        x_std = _OUT_STD
        if spec.kind == "conv":
            wscale = np.full(c, 0.01)
            out_scale = float(x.scale * wscale[0] * acc_std / _OUT_STD)
            filters = rng.randint(-127, 128, size=(c, spec.kernel, spec.kernel, c), dtype=np.int8)
            bias = rng.randint(-1000, 1000, size=c, dtype=np.int32)
            x = conv_layer(w, x, filters, bias, wscale, out_scale, name=f"conv{i}")
        else:
            out_scale = float(x.scale * 0.01 * acc_std / _OUT_STD)
            weights = rng.randint(-127, 128, size=(c, c), dtype=np.int8)
            bias = rng.randint(-1000, 1000, size=c, dtype=np.int32)
            x = dense_layer(w, x, weights, bias, 0.01, out_scale, name=f"dense{i}")
    return w.build(inputs=[first], outputs=[x.index])


def write_synthetic(path: str | Path, spec: SyntheticSpec = DEFAULT_SPEC, seed: int = 0) -> Path:
    p = Path(path)
    p.write_bytes(build_synthetic(spec, seed))
    return p


def edge_tpu_present() -> bool:
    """Any Edge TPU on this machine (sysfs; no library loaded): compiling the synthetic model
    for --device all/auto means running edgetpu_compiler, which is pointless without one."""
    return bool(scan_sysfs())


def compile_for_edgetpu(path: str | Path) -> Path:
    """Compile the synthetic model with `edgetpu_compiler` (the one lookup of edgeapp.hw.compiler:
    --compiler is not offered here; $EDGETPU_COMPILER, PATH and `edgeapp compiler install`'s are)
    into X_edgetpu.tflite beside it; raise MissingDependency / CompileError with the reason."""
    from edgeapp.hw.compiler import COMPILER_NAME, ENV_VAR, compile_model, find_compiler

    try:
        exe = find_compiler()
    except MissingDependency:  # bench has no --compiler option: do not suggest one
        raise MissingDependency(f"--synthetic needs {COMPILER_NAME} to measure the Edge TPU (looked at "
                                f"${ENV_VAR}, PATH and edgeapp's own install): `edgeapp compiler "
                                "install` gets Google's") from None
    try:
        exe.runner()  # ARM Linux without QEMU, macOS without Docker: say what to install
    except MissingDependency as e:
        raise MissingDependency(f"--synthetic cannot compile its model here: {e}") from None
    p = Path(path)
    report = compile_model(p, exe)
    out = edgetpu_twin_path(p)
    if report.judgement.exit_code or not out.exists():
        why = "; ".join(str(e) for e in report.judgement.errors[:1]) or report.judgement.verdict
        raise CompileError(f"edgetpu_compiler failed on the synthetic model: {why}")
    return out
