"""Shared fixtures: a tiny Keras model trained here and converted by our own `edgeapp convert`.

The model classifies 16x16 RGB images by their dominant colour (red, green, blue), so every
test knows the expected class of an image it generates. Nothing is downloaded and nothing
from ../shared is needed.

Fixtures that several test modules share live in topic modules (`*_fixtures.py`) that
`pytest_plugins` below loads for every test module; images and videos are made by
tests/media.py.
"""

from __future__ import annotations

import functools
import importlib.util
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from media import CLASSES, SIZE, make_images, write_color_folders
from typer.testing import CliRunner

# Fixtures shared by several test modules, each module one topic (test modules never import
# from one another: tests/test_style.py checks it).
pytest_plugins = ["bench_fixtures", "compiler_fixtures", "convert_fixtures", "libedgetpu_fixtures", "media_fixtures",
                  "model_server_fixtures", "standin_fixtures"]

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "coral"

# What the suite would otherwise read or write in the user's home: edgeapp's cache (probe verdicts,
# pulled models, bench peaks) and Keras' home (keras.json, datasets).
PRIVATE_HOMES = {"EDGEAPP_CACHE_DIR": "edgeapp-cache", "EDGEAPP_DATA_DIR": "edgeapp-data",
                 "KERAS_HOME": "keras-home"}


@pytest.fixture(scope="session", autouse=True)
def private_homes(tmp_path_factory) -> dict:
    """Every test, and every process a test starts (they inherit os.environ), uses a temporary
    edgeapp cache and Keras home; tests that need their own still set EDGEAPP_CACHE_DIR."""
    root = tmp_path_factory.mktemp("homes")
    saved = {k: os.environ.get(k) for k in PRIVATE_HOMES}
    homes = {k: str(root / folder) for k, folder in PRIVATE_HOMES.items()}
    os.environ.update(homes)
    yield homes
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory) -> Path:
    """Folders train/ and test/, one sub-folder per colour class, of PNG images."""
    root = tmp_path_factory.mktemp("colors")
    write_color_folders(root / "train", 60, seed=1)
    write_color_folders(root / "test", 20, seed=2)
    return root


@pytest.fixture(scope="session")
def tiny_keras(tiny_data: Path) -> Path:
    """A small CNN trained (in a subprocess, so TensorFlow stays out of the test process)."""
    out = tiny_data / "colors.keras"
    code = f"""
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import numpy as np, keras
from PIL import Image
from pathlib import Path
keras.utils.set_random_seed(0)
classes = {CLASSES!r}
x, y = [], []
for c, name in enumerate(classes):
    for p in sorted(Path({str(tiny_data / 'train')!r}, name).glob("*.png")):
        x.append(np.asarray(Image.open(p).convert("RGB"), dtype=np.float32) / 255.0); y.append(c)
x, y = np.stack(x), np.array(y)
m = keras.Sequential([keras.Input(({SIZE}, {SIZE}, 3)),
    keras.layers.Conv2D(8, 3, padding="same", activation="relu"),
    keras.layers.MaxPooling2D(),
    keras.layers.Conv2D(8, 3, padding="same", activation="relu"),
    keras.layers.GlobalAveragePooling2D(),
    keras.layers.Dense(3, activation="softmax")])
m.compile(optimizer=keras.optimizers.Adam(1e-2), loss="sparse_categorical_crossentropy", metrics=["accuracy"])
m.fit(x, y, epochs=15, batch_size=16, verbose=0)
acc = m.evaluate(x, y, verbose=0)[1]
assert acc > 0.95, acc
m.save({str(out)!r})
"""
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT,
                   env={**os.environ, "KERAS_HOME": str(tiny_data / ".keras"),  # not ~/.keras
                        "MPLCONFIGDIR": str(tiny_data / ".matplotlib")})
    return out


@pytest.fixture(scope="session")
def converted(tiny_data: Path, tiny_keras: Path) -> dict:
    """`edgeapp convert` run as a user would (subprocess); returns its JSON report."""
    out = tiny_data / "colors_int8.tflite"
    proc = subprocess.run(
        [sys.executable, "-m", "edgeapp", "convert", str(tiny_keras), "-o", str(out),
         "--calibration", str(tiny_data / "train"), "--samples", "100",
         "--eval", str(tiny_data / "test"), "--format", "json"],
        capture_output=True, text=True, cwd=ROOT, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2",
                                                       "EDGEAPP_CACHE_DIR": str(tiny_data / ".cache"),
                                                       "KERAS_HOME": str(tiny_data / ".keras"),
                                                       "MPLCONFIGDIR": str(tiny_data / ".matplotlib")})
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    report["path"] = out
    return report


@pytest.fixture(scope="session")
def tiny_model(converted: dict) -> Path:
    """The converted uint8-I/O model (labels blue/green/red in its sidecar JSON)."""
    return converted["path"]


@pytest.fixture()
def cli():
    """Run the Typer app in-process: cli(args) -> click Result (stdout and stderr separate)."""
    from edgeapp.cli.app import app

    # click < 8.2 mixes stderr into stdout unless told not to (and has no `mix_stderr` after)
    mixes = "mix_stderr" in inspect.signature(CliRunner.__init__).parameters
    runner = CliRunner(**({"mix_stderr": False} if mixes else {}))

    def run(*args: str, input: str | None = None):
        return runner.invoke(app, [str(a) for a in args], input=input)

    return run


def pytest_collection_modifyitems(config, items):
    if SHARED.is_dir():
        return
    skip = pytest.mark.skip(reason=f"needs Coral's published models in {SHARED} (not in a fresh clone)")
    for item in items:
        if "shared" in item.keywords:
            item.add_marker(skip)


@functools.lru_cache(maxsize=None)
def default_runtime() -> tuple:
    """(distribution, version) of the TFLite runtime edgeapp picks here: ai-edge-litert, else
    tflite-runtime (Python <= 3.9, 32-bit ARM)."""
    from edgeapp.hw.runtime import find_runtime

    runtime = find_runtime()
    return runtime.name, runtime.version


def tflite_schema():
    """The TFLite flatbuffers schema classes: ai-edge-litert's, else TensorFlow's file of the same
    name (tflite-runtime ships none), loaded alone so that TensorFlow is not imported."""
    try:
        from ai_edge_litert import schema_py_generated

        return schema_py_generated
    except ImportError:
        pass
    tf = importlib.util.find_spec("tensorflow")
    if tf is None or not tf.submodule_search_locations:
        pytest.skip("needs ai-edge-litert or TensorFlow for the TFLite schema classes")
    path = Path(list(tf.submodule_search_locations)[0], "lite", "python", "schema_py_generated.py")
    spec = importlib.util.spec_from_file_location("tflite_schema_py_generated", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_edgetpu_stand_in(cpu_model: Path, out: Path, custom_code: str = "edgetpu-custom-op",
                          custom_options: bytes = b"compiled-for-edgetpu") -> Path:
    """A valid TFLite file shaped like edgetpu_compiler's output: one `edgetpu-custom-op` node
    (or another custom op, `custom_code`) from the CPU model's input to its output (written with the
    TFLite flatbuffers schema)."""
    import flatbuffers

    schema = tflite_schema()
    m = schema.ModelT.InitFromPackedBuf(cpu_model.read_bytes(), 0)
    sg = m.subgraphs[0]
    code = schema.OperatorCodeT()
    code.builtinCode = schema.BuiltinOperator.CUSTOM
    code.deprecatedBuiltinCode = schema.BuiltinOperator.CUSTOM
    code.customCode = custom_code
    code.version = 1
    op = schema.OperatorT()
    op.opcodeIndex = 0
    op.inputs, op.outputs = list(sg.inputs), list(sg.outputs)
    op.customOptions = list(custom_options)  # opaque blob, as the real op has (edgetpu_package)
    m.operatorCodes = [code]
    sg.operators = [op]
    m.metadata, m.signatureDefs = None, None
    b = flatbuffers.Builder(1024)
    b.Finish(m.Pack(b), file_identifier=b"TFL3")
    out.write_bytes(b.Output())
    return out


def edgetpu_package(executables, min_runtime: int = 14) -> bytes:
    """An edgetpu-custom-op's options in the compiler's own layout (libedgetpu's
    tflite/custom_op_data.cc and executable/executable.fbs): a FlexBuffers map whose "4" is a
    Package (DWN1) of a MultiExecutable of Executables, each (type, parameter bytes, caching
    token): 0 stand-alone, 1 parameter caching, 2 execution only."""
    import flatbuffers
    from flatbuffers import flexbuffers

    def finish(b, root, ident=None):
        b.Finish(root, file_identifier=ident)
        return bytes(b.Output())

    blobs = []
    for kind, n, token in executables:
        b = flatbuffers.Builder(64)
        params = b.CreateByteVector(bytes(n))
        b.StartObject(17)
        b.PrependUOffsetTRelativeSlot(6, params, 0)
        b.PrependUint64Slot(14, token, 0)
        b.PrependInt16Slot(13, kind, 0)
        blobs.append(finish(b, b.EndObject()))
    b = flatbuffers.Builder(64)
    strings = [b.CreateByteVector(x) for x in blobs]
    b.StartVector(4, len(strings), 4)
    for x in reversed(strings):
        b.PrependUOffsetTRelative(x)
    vec = b.EndVector()
    b.StartObject(1)
    b.PrependUOffsetTRelativeSlot(0, vec, 0)
    multi = finish(b, b.EndObject())
    b = flatbuffers.Builder(64)
    inner = b.CreateByteVector(multi)
    b.StartObject(7)
    b.PrependUOffsetTRelativeSlot(1, inner, 0)
    b.PrependInt32Slot(0, min_runtime, 0)
    package = finish(b, b.EndObject(), b"DWN1")
    fb = flexbuffers.Builder()
    with fb.Map():
        fb.Int("1", 0)
        fb.Key("4")
        fb.Blob(package)
        fb.Int("5", -1)
        fb.Key("6")
        fb.TypedVectorFromElements([18], element_type=flexbuffers.Type.INT)
        fb.Key("7")
        fb.VectorFromElements([])
    return bytes(fb.Finish())


@pytest.fixture(scope="session")
def compiled_pair(tiny_model: Path, tmp_path_factory) -> tuple[Path, Path]:
    """(X_edgetpu.tflite, X.tflite) side by side, as `edgeapp compile` leaves them."""
    folder = tmp_path_factory.mktemp("compiled")
    twin = folder / "colors.tflite"
    twin.write_bytes(tiny_model.read_bytes())
    twin.with_suffix(".json").write_bytes(tiny_model.with_suffix(".json").read_bytes())
    return make_edgetpu_stand_in(tiny_model, folder / "colors_edgetpu.tflite"), twin


@pytest.fixture(scope="session")
def color_images(tmp_path_factory) -> dict[str, Path]:
    """One 64x48 PNG per class (not the model's input size, so resizing is exercised)."""
    paths = make_images(tmp_path_factory.mktemp("color_images"), CLASSES, size=(64, 48), seed=7,
                        name="{colour}")
    return dict(zip(CLASSES, paths))


@pytest.fixture(scope="session")
def det_models(tmp_path_factory) -> dict:
    """Detection models of every output layout (tests/detection_models.py), built once."""
    import detection_models

    return detection_models.build(tmp_path_factory)
