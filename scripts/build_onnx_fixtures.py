#!/usr/bin/env python3
"""Build the ONNX test fixtures under tests/fixtures/onnx/, and (``--bench DIR``) the larger
ONNX models and photo folders that scripts/bench_onnx_convert.py measures.

Run by hand in its OWN virtual environment (the test suite needs none of these tools; it reads
only the small .onnx files this script commits). The recipe that worked (x86_64, Python 3.11;
pip takes torch/torchvision from this machine's disk):

    python3 -m venv /work/venvs/onnx-torch
    /work/venvs/onnx-torch/bin/pip install torch==2.14.1 torchvision==0.29.1 onnx==1.23.2 \\
        onnxruntime==1.32.0 scikit-learn scikit-image==0.26.0 pillow
    /work/venvs/onnx-torch/bin/python scripts/build_onnx_fixtures.py            # the test fixtures
    /work/venvs/onnx-torch/bin/python scripts/build_onnx_fixtures.py --bench /work/onnx-bench

The fixtures (16x16 RGB input, 3 colour classes as in tests/conftest.py, trained here in a few
seconds, exported with the legacy TorchScript exporter, opset 13):
  * colors_nchw.onnx: Conv+BN+ReLU6, padded MaxPool, depthwise Conv+BN+ReLU6, 1x1 Conv+ReLU,
    GlobalAveragePool, Gemm: a static NCHW CNN with logits out.
  * colors_dynamic_batch.onnx: the same network, batch exported as a symbolic dim ("batch") and
    flattened with x.view(x.size(0), -1) (Shape/Gather/Concat/Reshape in the graph).
  * colors_softmax.onnx: the same network ending in Softmax (float probabilities out).
  * colors_hardswish.onnx: the same network with HardSwish in the first block and a
    squeeze-excite gate of HardSigmoid (MobileNetV3's activations), trained on its own.
  * colors_outlier.onnx: the same network plus a white-pixel detector added to the second
    block's output (node "outlier_add"): near-white pixels (R+G+B > 2.8) add up to 100 to that
    activation (the rest stays within 0..7), so its calibration range is set by rare outliers.
  * lppool.onnx: (onnx.helper) Conv then LpPool, an operator onnx2tf 1.28 has no converter for.
  * two_inputs.onnx, text_input.onnx: (onnx.helper) two image inputs; an int64 token input.
The bench set: torchvision architectures with random weights whose BatchNorm statistics are
re-estimated on photos (random init alone leaves outputs ~1e-9: nothing to compare), a small CNN
trained on scikit-learn's digits (upscaled to 32x32, 0..1 inputs), photos cropped from the real
photographs scikit-image, scikit-learn and /work/shared/coral ship, and held-out digit images
in class folders.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "onnx"
CLASSES = ("blue", "green", "red")  # tests/conftest.py's colour classes
CHANNEL = {"blue": 2, "green": 1, "red": 0}
SIZE = 16
OPSET = 13


def color_pixels(cls: int, rng: np.random.Generator, size: int = SIZE) -> np.ndarray:
    """tests/conftest.py's colour image: the class channel dominates."""
    a = rng.integers(0, 90, size=(size, size, 3))
    a[:, :, CHANNEL[CLASSES[cls]]] = rng.integers(150, 256, size=(size, size))
    return a.astype(np.uint8)


def color_data(n: int, seed: int):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, n)
    x = np.stack([color_pixels(int(c), rng) for c in y]).astype(np.float32) / 255.0
    return x.transpose(0, 3, 1, 2), y  # NCHW, 0..1


def colors_net(softmax: bool = False, outlier: bool = False, hard: bool = False):
    import torch
    from torch import nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.block1 = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU6(),
                                        nn.MaxPool2d(3, stride=1, padding=1))
            self.block2 = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False),
                                        nn.BatchNorm2d(8), nn.ReLU6(), nn.Conv2d(8, 16, 1), nn.ReLU())
            self.head = nn.Linear(16, 3)
            self.white = nn.Conv2d(3, 16, 1)  # near-white detector: the outlier source
            with torch.no_grad():
                self.white.weight.zero_()
                self.white.weight[0] = 500.0  # channel 0 only: 500 * (R + G + B) - 1400
                self.white.bias.zero_()
                self.white.bias[0] = -1400.0
            self.softmax, self.outlier, self.hard = softmax, outlier, hard
            if hard:  # MobileNetV3's activations: HardSwish, and a squeeze-excite gate of HardSigmoid
                self.block1[2] = nn.Hardswish()
                self.gate = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(16, 16, 1), nn.Hardsigmoid())

        def forward(self, x):
            y = self.block2(self.block1(x))
            if self.hard:
                y = y * self.gate(y)
            if self.outlier:
                y = y + torch.relu(self.white(x))  # exported as node "outlier_add" (renamed below)
            y = y.mean(dim=(2, 3), keepdim=True)
            y = self.head(y.view(y.size(0), -1))
            return torch.softmax(y, dim=1) if self.softmax else y

    return Net()


def train_colors(net, epochs: int = 30):
    import torch

    torch.manual_seed(0)
    x, y = color_data(600, seed=3)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    opt = torch.optim.Adam(net.parameters(), 1e-2)
    net.train()
    for _ in range(epochs):
        for i in range(0, len(xt), 32):
            opt.zero_grad()
            logits = net(xt[i:i + 32])
            loss = torch.nn.functional.cross_entropy(logits, yt[i:i + 32])
            loss.backward()
            opt.step()
    net.eval()
    with torch.no_grad():
        acc = (net(xt).argmax(1) == yt).float().mean().item()
    assert acc > 0.95, acc
    return net


def export(net, path: Path, shape=(1, 3, SIZE, SIZE), dynamic_batch: bool = False, output: str = "logits"):
    import torch

    kw = {"dynamic_axes": {"input": {0: "batch"}, output: {0: "batch"}}} if dynamic_batch else {}
    torch.onnx.export(net, torch.rand(*shape), str(path), opset_version=OPSET, dynamo=False,
                      input_names=["input"], output_names=[output], do_constant_folding=True, **kw)


def rename_node(path: Path, op_type: str, new_name: str, last: bool = True) -> None:
    """Give the exporter's node a stable name the tests can look for."""
    import onnx

    m = onnx.load(str(path))
    nodes = [n for n in m.graph.node if n.op_type == op_type]
    (nodes[-1] if last else nodes[0]).name = new_name
    onnx.save(m, str(path))


def build_colors() -> None:
    import torch

    torch.manual_seed(0)
    base = train_colors(colors_net())
    export(base, FIXTURES / "colors_nchw.onnx")
    export(base, FIXTURES / "colors_dynamic_batch.onnx", dynamic_batch=True)
    soft = colors_net(softmax=True)
    soft.load_state_dict(base.state_dict())
    export(soft.eval(), FIXTURES / "colors_softmax.onnx", output="probabilities")
    torch.manual_seed(2)
    export(train_colors(colors_net(hard=True)), FIXTURES / "colors_hardswish.onnx")
    torch.manual_seed(1)
    outlier = colors_net(outlier=True)
    state = {k: v for k, v in base.state_dict().items() if not k.startswith("white.")}
    outlier.load_state_dict(state, strict=False)
    export(outlier.eval(), FIXTURES / "colors_outlier.onnx")
    import onnx

    m = onnx.load(str(FIXTURES / "colors_outlier.onnx"))
    adds = [n for n in m.graph.node if n.op_type == "Add" and any("white" in i or "Relu" in i for i in n.input)]
    adds[0].name = "outlier_add"
    onnx.save(m, str(FIXTURES / "colors_outlier.onnx"))


def build_helper_models() -> None:
    """Models the exporters would not make on purpose: built node by node."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.normal(0, 0.3, (4, 3, 3, 3)).astype(np.float32), "conv_w")
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, SIZE, SIZE])
    y = helper.make_tensor_value_info("pooled", TensorProto.FLOAT, [1, 4, 8, 8])
    nodes = [helper.make_node("Conv", ["input", "conv_w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("LpPool", ["c"], ["pooled"], name="lp_pool", kernel_shape=[2, 2],
                              strides=[2, 2], p=2)]
    g = helper.make_graph(nodes, "lppool", [x], [y], [w])
    save(helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)]), "lppool.onnx")

    a = helper.make_tensor_value_info("left", TensorProto.FLOAT, [1, 3, SIZE, SIZE])
    b = helper.make_tensor_value_info("right", TensorProto.FLOAT, [1, 3, SIZE, SIZE])
    s = helper.make_tensor_value_info("sum", TensorProto.FLOAT, [1, 3, SIZE, SIZE])
    g = helper.make_graph([helper.make_node("Add", ["left", "right"], ["sum"], name="add")], "two_inputs",
                          [a, b], [s])
    save(helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)]), "two_inputs.onnx")

    emb = numpy_helper.from_array(rng.normal(0, 1, (100, 8)).astype(np.float32), "embedding")
    t = helper.make_tensor_value_info("tokens", TensorProto.INT64, [1, 12])
    e = helper.make_tensor_value_info("embedded", TensorProto.FLOAT, [1, 12, 8])
    g = helper.make_graph([helper.make_node("Gather", ["embedding", "tokens"], ["embedded"], name="embed")],
                          "text_input", [t], [e], [emb])
    save(helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)]), "text_input.onnx")


def save(model, name: str) -> None:
    import onnx

    onnx.checker.check_model(model)
    onnx.save(model, str(FIXTURES / name))


def check_fixtures() -> None:
    """Each fixture runs in ONNX Runtime; the colour models classify colour images."""
    import onnxruntime as ort

    x, y = color_data(90, seed=5)
    for name in ("colors_nchw", "colors_dynamic_batch", "colors_softmax", "colors_outlier", "colors_hardswish"):
        s = ort.InferenceSession(str(FIXTURES / f"{name}.onnx"))
        out = np.concatenate([s.run(None, {"input": x[i:i + 1]})[0] for i in range(len(x))])
        acc = float(np.mean(out.argmax(1) == y))
        print(f"{name}: ONNX Runtime accuracy {acc:.3f} on 90 colour images")
        assert acc > 0.95, name


# ----------------------------------------------------------------------------------- the bench set

BENCH_ARCHS = ("mobilenet_v2", "resnet18", "efficientnet_b0", "mobilenet_v3_large", "shufflenet_v2_x1_0",
               "squeezenet1_1", "regnet_x_400mf")


def photo_sources() -> list:
    import skimage
    import sklearn.datasets

    sk = Path(skimage.__file__).parent / "data"
    skl = Path(sklearn.datasets.__file__).parent / "images"
    coral = ROOT.parent / "shared" / "coral"
    names = ["astronaut.png", "chelsea.png", "coffee.png", "hubble_deep_field.jpg", "motorcycle_left.png",
             "retina.jpg", "rocket.jpg", "ihc.png", "camera.png", "coins.png", "moon.png", "brick.png",
             "grass.png", "gravel.png", "page.png", "horse.png"]
    paths = [sk / n for n in names] + [skl / "china.jpg", skl / "flower.jpg"]
    paths += [coral / n for n in ("cat.bmp", "cat_1080p.jpg", "grace_hopper.bmp")]
    return [p for p in paths if p.exists()]


def write_photos(out: Path, n: int, seed: int) -> list:
    """`n` 256x256 crops (random position, scale and flip) of real photographs."""
    from PIL import Image

    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    images = [Image.open(p).convert("RGB") for p in photo_sources()]
    paths = []
    for i in range(n):
        im = images[i % len(images)]
        w, h = im.size
        s = rng.uniform(0.35, 1.0) * min(w, h)
        x0, y0 = rng.uniform(0, w - s), rng.uniform(0, h - s)
        crop = im.crop((int(x0), int(y0), int(x0 + s), int(y0 + s))).resize((256, 256), Image.LANCZOS)
        if rng.random() < 0.5:
            crop = crop.transpose(Image.FLIP_LEFT_RIGHT)
        paths.append(out / f"photo_{i:03d}.jpg")
        crop.save(paths[-1], quality=92)
    return paths


def bench_torchvision(out: Path, photos: list, size: int = 224) -> None:
    import torch
    import torchvision
    from PIL import Image

    x = torch.from_numpy(np.stack([np.asarray(Image.open(p).resize((size, size), Image.LANCZOS), np.float32)
                                   for p in photos]).transpose(0, 3, 1, 2) / 255.0)
    for arch in BENCH_ARCHS:
        torch.manual_seed(0)
        net = getattr(torchvision.models, arch)(weights=None)
        for m in net.modules():  # cumulative averages over the photos, not a running momentum
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                m.momentum = None
        net.train()
        with torch.no_grad():
            for i in range(0, len(x), 16):
                net(x[i:i + 16])
        net.eval()
        torch.onnx.export(net, x[:1], str(out / f"{arch}.onnx"), opset_version=OPSET, dynamo=False,
                          input_names=["input"], output_names=["logits"])
        print(f"exported {arch}")


def bench_digits(out: Path, size: int = 32) -> None:
    """A small CNN trained on scikit-learn's 8x8 digits upscaled to 32x32 RGB (0..1 inputs);
    held-out digits as PNGs in class folders."""
    import torch
    from PIL import Image
    from sklearn.datasets import load_digits
    from torch import nn

    d = load_digits()
    imgs = np.stack([np.asarray(Image.fromarray((im * 255 / 16).astype(np.uint8)).resize((size, size), Image.BILINEAR))
                     for im in d.images])
    rng = np.random.default_rng(0)
    order = rng.permutation(len(imgs))
    train, held = order[:1300], order[1300:]
    for i in held:
        folder = out / "digits_val" / str(d.target[i])
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(imgs[i]).convert("RGB").save(folder / f"{i:04d}.png")
    x = torch.from_numpy(np.repeat(imgs[train][:, None], 3, axis=1).astype(np.float32) / 255.0)
    y = torch.from_numpy(d.target[train])
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
                        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))
    opt = torch.optim.Adam(net.parameters(), 3e-3)
    for _ in range(25):
        net.train()
        perm = torch.randperm(len(x))
        for i in range(0, len(x), 64):
            idx = perm[i:i + 64]
            opt.zero_grad()
            nn.functional.cross_entropy(net(x[idx]), y[idx]).backward()
            opt.step()
    net.eval()
    torch.onnx.export(net, x[:1], str(out / "digits_cnn.onnx"), opset_version=OPSET, dynamo=False,
                      input_names=["input"], output_names=["logits"])
    xh = torch.from_numpy(np.repeat(imgs[held][:, None], 3, axis=1).astype(np.float32) / 255.0)
    with torch.no_grad():
        acc = (net(xh).argmax(1).numpy() == d.target[held]).mean()
    (out / "digits_cnn.json").write_text(json.dumps({"torch_heldout_accuracy": float(acc),
                                                     "heldout": int(len(held))}) + "\n")
    print(f"digits CNN: held-out accuracy {acc:.4f} on {len(held)} images (PyTorch)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", type=Path, help="also write the bench set (torchvision, digits, photos) here")
    ap.add_argument("--only-bench", action="store_true", help="skip the test fixtures")
    args = ap.parse_args()
    if not args.only_bench:
        FIXTURES.mkdir(parents=True, exist_ok=True)
        build_colors()
        build_helper_models()
        check_fixtures()
    if args.bench:
        args.bench.mkdir(parents=True, exist_ok=True)
        photos = write_photos(args.bench / "photos", 250, seed=0)
        bench_digits(args.bench)
        bench_torchvision(args.bench, photos[:64])


if __name__ == "__main__":
    main()
