"""JPEGs decoded at the scale the model needs (core/vision/preprocess.decode_image, --decode): never
below the pixels the fit takes, EXIF turns included; other formats and small JPEGs decoded as
a full decode does; results on the whole photo; calibration decodes as inference does."""

import json
import shutil

import numpy as np
import pytest
from PIL import Image

from edgeapp import tasks
from edgeapp.core.vision.boxes import make_fit
from edgeapp.core.vision.preprocess import dct_scale, decode_image, fit_pixels, load_image, scaled_decode_size
from edgeapp.errors import UsageError


def photo(tmp_path, name, size, orientation=None, fmt="JPEG"):
    """A smooth photo-like image (gradients and a few shapes), saved as `fmt`."""
    w, h = size
    y, x = np.mgrid[0:h, 0:w]
    rgb = np.dstack([(x * 255 // max(1, w - 1)), (y * 255 // max(1, h - 1)),
                     ((x + y) * 127 // max(1, w + h))]).astype(np.uint8)
    rgb[h // 4:h // 2, w // 3:w // 2] = (250, 30, 30)
    img = Image.fromarray(rgb)
    p = tmp_path / name
    kw = {}
    if orientation is not None:
        exif = Image.Exif()
        exif[0x0112] = orientation
        kw["exif"] = exif.tobytes()
    img.save(p, fmt, quality=92, **kw) if fmt == "JPEG" else img.save(p, fmt)
    return p


@pytest.mark.parametrize("fit", ["stretch", "letterbox"])
def test_the_scale_never_gives_fewer_pixels_than_the_fit_takes(fit):
    rng = np.random.default_rng(0)
    for _ in range(3000):
        stored = (int(rng.integers(1, 5000)), int(rng.integers(1, 5000)))
        size = (int(rng.integers(1, 700)), int(rng.integers(1, 700)))
        need = scaled_decode_size(stored, size, fit)
        k = dct_scale(stored, need)
        decoded = (-(-stored[0] // k), -(-stored[1] // k))
        # and the largest such scale: the next one would be short of pixels
        if k < 8:
            nxt = (-(-stored[0] // (2 * k)), -(-stored[1] // (2 * k)))
            assert nxt[0] < need[0] or nxt[1] < need[1]
        if k == 1:
            continue  # decoded whole: a photo smaller than the input is what it is
        assert decoded[0] >= need[0] and decoded[1] >= need[1]
        # the fit made on the decoded image never enlarges it
        f = make_fit(fit, decoded, size)
        assert f.content_w <= decoded[0] and f.content_h <= decoded[1]


@pytest.mark.parametrize("size,fit,scale", [((224, 224), "stretch", 4), ((160, 120), "stretch", 8),
                                            ((640, 640), "stretch", 1), ((640, 640), "letterbox", 2),
                                            ((320, 320), "stretch", 2), ((320, 320), "letterbox", 4),
                                            ((1400, 1000), "stretch", 1)])
def test_a_large_jpeg_decodes_at_the_smallest_scale_that_holds_the_input(tmp_path, size, fit, scale):
    p = photo(tmp_path, "p.jpg", (1440, 1080))
    d = decode_image(p, 3, size, fit)
    assert d.scale == scale and d.size == (1440, 1080)
    assert d.image.size == (-(-1440 // scale), -(-1080 // scale))
    need = scaled_decode_size(d.size, size, fit)
    assert d.image.width >= need[0] and d.image.height >= need[1]


@pytest.mark.parametrize("orientation", [1, 3, 5, 6, 7, 8])
def test_exif_turns_are_counted_before_choosing_the_scale(tmp_path, orientation):
    """A sideways phone photo: stored 1600x400, upright 400x1600 for 5-8. A wide input (300x100)
    needs 300 upright columns, which the stored rows give, not the stored columns."""
    p = photo(tmp_path, f"o{orientation}.jpg", (1600, 400), orientation)
    d = decode_image(p, 3, (300, 100))
    full = load_image(p)
    upright = (400, 1600) if orientation >= 5 else (1600, 400)
    assert full.size == upright and d.size == upright
    assert d.image.width >= 300 and d.image.height >= 100
    assert d.image.size == (-(-upright[0] // d.scale), -(-upright[1] // d.scale))
    assert d.scale == (1 if orientation >= 5 else 4)


def test_a_phones_mpo_is_a_jpeg(tmp_path):
    """Many phones write MPO files (a JPEG with a second picture after it): decoded scaled too."""
    p = photo(tmp_path, "p.jpg", (1600, 1200))
    img = Image.open(p)
    img.load()
    mpo = tmp_path / "mpo.jpg"
    img.save(mpo, "MPO", save_all=True, append_images=[img.resize((320, 240))], quality=92)
    assert Image.open(mpo).format == "MPO"
    d = decode_image(mpo, 3, (224, 224))
    assert d.scale == 4 and d.size == (1600, 1200) and d.image.size == (400, 300)


@pytest.mark.parametrize("fmt,name", [("PNG", "p.png"), ("BMP", "p.bmp"), ("TIFF", "p.tif")])
def test_other_formats_decode_as_a_full_decode(tmp_path, fmt, name):
    p = photo(tmp_path, name, (1200, 900), fmt=fmt)
    d = decode_image(p, 3, (64, 64))
    assert d.scale == 1
    assert np.array_equal(np.asarray(d.image), np.asarray(load_image(p)))


def test_a_jpeg_with_no_scale_to_spare_is_the_full_decode(tmp_path):
    p = photo(tmp_path, "small.jpg", (400, 300))
    d = decode_image(p, 3, (224, 224))  # 1/2 would give 200x150 < 224
    assert d.scale == 1
    assert np.array_equal(np.asarray(d.image), np.asarray(load_image(p)))
    grey = decode_image(p, 1, (224, 224))
    assert np.array_equal(np.asarray(grey.image), np.asarray(load_image(p, 1)))


def test_scaled_and_full_decode_differ_only_slightly_on_a_photo(tmp_path):
    p = photo(tmp_path, "p.jpg", (2000, 1500))
    scaled, _ = fit_pixels(load_image(p, 3, (224, 224)), (224, 224))
    full, _ = fit_pixels(load_image(p), (224, 224))
    diff = np.abs(scaled.astype(int) - full.astype(int))
    assert 0 < diff.max() and diff.mean() < 3


def test_results_map_onto_the_whole_photo(tmp_path, tiny_model):
    """The fit of a scaled decode describes the photo, not the smaller decoded image: boxes,
    keypoints and masks land on the photo's pixels."""
    from edgeapp.hw.runtime import open_engine
    from edgeapp.tasks.base import bind
    from edgeapp.tasks.model import image_model

    p = photo(tmp_path, "p.jpg", (1600, 1200))
    model = image_model(open_engine(tiny_model, "cpu"), tiny_model, decode="scaled")
    task = bind("classify", model)
    tensor, prepared = task.prepare(str(p), keep_image=True)
    assert (prepared.fit.src_w, prepared.fit.src_h) == (1600, 1200)
    assert not np.array_equal(tensor, bind("classify", image_model(
        open_engine(tiny_model, "cpu"), tiny_model, decode="full")).prepare(str(p))[0])
    assert prepared.image.size == (1600, 1200)  # what --annotate draws on: the photo itself


def test_calibration_decodes_as_inference_does(tmp_path, tiny_model):
    """convert's calibration and agreement images (flows/convert/data.py) are the pixels
    classify feeds the model, with either --decode; and the two decodes differ, so this
    would notice one path ignoring the choice."""
    from edgeapp.flows.convert.data import Sources, load_dataset
    from edgeapp.hw.runtime import open_engine
    from edgeapp.tasks.base import prepare_image
    from edgeapp.tasks.model import image_model

    paths = [photo(tmp_path, f"{i}.jpg", (1200 + 160 * i, 900)) for i in range(3)]
    engine = open_engine(tiny_model, "cpu")
    w, h = engine.input_shape[2], engine.input_shape[1]
    found = Sources(tmp_path, [str(p) for p in paths])
    seen = {}
    for decode in ("scaled", "full"):
        spec = image_model(engine, tiny_model, decode=decode).spec
        raw = type(spec)(spec.width, spec.height, spec.channels, np.dtype(np.uint8), 0.0, 0, 0.0,
                         1.0, decode)  # identity quantization: the tensor is the pixels
        inference = np.stack([prepare_image(str(p), raw, "stretch")[0][0] for p in paths])
        calibration = load_dataset(found, (w, h), spec.channels, decode=decode).x
        assert np.array_equal(calibration, inference)
        seen[decode] = calibration
    assert not np.array_equal(seen["scaled"], seen["full"])


def test_the_sidecar_says_how_calibration_decoded_and_inference_follows(tmp_path, tiny_model):
    from edgeapp.core.meta import read_meta
    from edgeapp.core.naming import sidecar_path
    from edgeapp.hw.runtime import open_engine
    from edgeapp.tasks.model import image_model

    assert read_meta(tiny_model).decode == "full"  # what `edgeapp convert` wrote by default
    model = tmp_path / "m.tflite"
    shutil.copy(tiny_model, model)
    meta = json.loads(sidecar_path(tiny_model).read_text())
    meta["preprocessing"]["decode"] = "scaled"
    sidecar_path(model).write_text(json.dumps(meta))
    engine = open_engine(model, "cpu")
    assert image_model(engine, model).spec.decode == "scaled"
    assert image_model(engine, model, decode="full").spec.decode == "full"  # the flag wins
    del meta["preprocessing"]["decode"]  # a sidecar that does not say: the task decides
    sidecar_path(model).write_text(json.dumps(meta))
    assert image_model(engine, model).spec.decode is None
    for name, decode in (("classify", "full"), ("detect", "scaled"), ("pose", "scaled"),
                         ("segment", "scaled"), ("embed", "full")):
        assert tasks.kind(name).decode == decode
    with pytest.raises(UsageError, match="--decode"):
        image_model(engine, model, decode="fast")


def test_the_decode_option_and_its_old_name(cli, tiny_model, tmp_path):
    """classify decodes whole unless told (and its model's sidecar says full); --fast-decode
    is --decode scaled; both are as the API's decode= gives."""
    import edgeapp

    p = photo(tmp_path, "p.jpg", (1600, 1200))
    runs = {name: cli("classify", tiny_model, p, "-f", "jsonl", *args)
            for name, args in [("default", ()), ("scaled", ("--decode", "scaled")),
                               ("old", ("--fast-decode",)), ("full", ("--decode", "full"))]}
    for r in runs.values():
        assert r.exit_code == 0, r.stderr

    def scores(name):
        return [c["score"] for c in json.loads(runs[name].stdout)["classes"]]
    assert scores("default") == scores("full") and scores("scaled") == scores("old")
    for decode in ("scaled", "full"):
        with edgeapp.open_model(tiny_model, "cpu", decode=decode) as model:
            assert [c["score"] for c in model.classify(str(p))] == scores(decode)
    both = cli("classify", tiny_model, p, "--decode", "full", "--fast-decode")
    assert both.exit_code == 2 and "--fast-decode" in both.stderr
    assert "--fast-decode" not in cli("classify", "--help").stdout
