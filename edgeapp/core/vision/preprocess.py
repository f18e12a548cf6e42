"""Image loading and input quantization: plain functions over Pillow images and numpy arrays.

`convert` calibrates with exactly these functions, so a model sees at inference the same pixels
it was calibrated on. The resize (Pillow LANCZOS after conversion to RGB) and the mean/std rule
match Coral's classify_image.py, so top-1 results agree with Coral's reference outputs.
"""

from __future__ import annotations

import io
import os
import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Tuple, Union

import numpy as np

from edgeapp.core.vision.boxes import make_fit
from edgeapp.errors import InputError, UsageError

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage

    from edgeapp.core.vision.boxes import Fit

ImageSource = Union[str, Path, bytes, "np.ndarray", "PILImage"]  # a file, its bytes, an HxW(xC) uint8 array
CORAL_MEAN = 128.0  # Coral's defaults for models without preprocessing metadata
CORAL_STD = 128.0
MAX_PIXELS_ENV = "EDGEAPP_MAX_PIXELS"
# 50 megapixels (a 48 MP phone photo passes): a 164 KB PNG can declare 13000x13000 and decode
# to 0.5 GB; over the limit an image is a record error, before any pixel is decoded.
DEFAULT_MAX_PIXELS = 50_000_000
_quiet = False


def max_pixels() -> int:
    text = os.environ.get(MAX_PIXELS_ENV, "").strip()
    if not text:
        return DEFAULT_MAX_PIXELS
    try:
        value = int(float(text))
    except ValueError:
        value = 0
    if value <= 0:
        raise UsageError(f"{MAX_PIXELS_ENV} must be a number of pixels > 0, not {text!r}")
    return value


def allow_pixels(limit: int) -> int:
    """Pillow refuses images over its own MAX_IMAGE_PIXELS (89 megapixels, an error at twice
    that) before edgeapp could say anything: raise Pillow's limit to ours, never lower it (a
    program using the API may have raised it further), so EDGEAPP_MAX_PIXELS decides and the
    refusal is edgeapp's."""
    from PIL import Image

    if Image.MAX_IMAGE_PIXELS is not None and Image.MAX_IMAGE_PIXELS < limit:
        Image.MAX_IMAGE_PIXELS = limit
    return limit


def _pixels_in(pillow_message: str) -> str:
    """"Image size (400000000 pixels) exceeds ..." -> "a 400-megapixel image "."""
    import re

    m = re.search(r"\((\d+) pixels\)", pillow_message)
    return f"a {int(m.group(1)) / 1e6:.0f}-megapixel image " if m else "the image "


def _quiet_pillow() -> None:
    """Pillow's warnings (decompression bomb, odd EXIF or palettes) and log records ("More
    samples per pixel than can be decoded: 13827", logged before it raises) never reach
    stderr: the pixel limit above makes the bomb a record error, a file Pillow cannot decode is
    one (the error names it), the rest change nothing we output. One process-wide filter and
    handler, set once (warnings.catch_warnings is not thread-safe). libtiff's own messages, from
    native code, are kept off by hw/native_stderr.quiet_libtiff."""
    global _quiet
    if not _quiet:
        import logging

        warnings.filterwarnings("ignore", module=r"PIL(\.|$)")
        from PIL import Image

        warnings.filterwarnings("ignore", category=Image.DecompressionBombWarning)
        pil_log = logging.getLogger("PIL")
        if not pil_log.handlers:  # a handler of its own: Python's last-resort one stays unused
            pil_log.addHandler(logging.NullHandler())
        _quiet = True


DECODES = ("scaled", "full")  # --decode: JPEGs at the smallest DCT scale the model needs, or whole
_SWAPPED = (5, 6, 7, 8)  # EXIF orientations that turn the stored image by 90 degrees
# Pillow's names for JPEG files: MPO is a JPEG with more pictures after it (many phones' photos)
JPEG_FORMATS = ("JPEG", "MPO")


@dataclass(frozen=True)
class Decoded:
    """A decoded image and the size of the photo it shows (upright), which is larger than the
    image when a JPEG was decoded at a reduced scale (1/`scale`)."""

    image: Any  # Pillow, RGB or L
    size: Tuple[int, int]  # (width, height) of the whole photo, upright
    scale: int = 1

    def fit_of_photo(self, fit: Fit) -> Fit:
        """A Fit made on the decoded image, mapping results onto the whole photo instead."""
        if self.scale == 1:
            return fit
        return replace(fit, src_w=self.size[0], src_h=self.size[1])


def dct_scale(stored: Tuple[int, int], needed: Tuple[int, int]) -> int:
    """The largest JPEG DCT scale 1/k (k = 8, 4, 2) whose decoded size, ceil(side / k), is still
    at least `needed` in both dimensions; 1 (a full decode) when none is: never upsampled."""
    (w, h), (nw, nh) = stored, needed
    for k in (8, 4, 2):
        if -(-w // k) >= nw and -(-h // k) >= nh:
            return k
    return 1


def scaled_decode_size(photo: Tuple[int, int], size: Tuple[int, int], fit: str = "stretch") -> Tuple[int, int]:
    """What `--decode scaled` must still decode of the photo: the pixels the model input takes
    (width, height), all of `size` when stretched, the content part of it when letterboxed."""
    f = make_fit(fit, photo, size)
    return f.content_w, f.content_h


def load_image(source: ImageSource, channels: int = 3, decode_size: Optional[Tuple[int, int]] = None,
               fit: str = "stretch"):
    """Open any Pillow-readable image as RGB (or L for 1-channel models); see `decode_image`."""
    return decode_image(source, channels, decode_size, fit).image


def decode_image(source: ImageSource, channels: int = 3,
                 decode_size: Optional[Tuple[int, int]] = None, fit: str = "stretch") -> Decoded:
    """Open any Pillow-readable image as RGB (or L for 1-channel models), upright.

    `decode_size` (--decode scaled; None: --decode full): the model input (width, height) the
    image will be fitted to (`fit`). A JPEG is then decoded at the smallest DCT scale (libjpeg's
    1/2, 1/4, 1/8) that still gives at least the pixels the fit takes (`scaled_decode_size`),
    which is several times faster on camera-sized photos;
    other formats, and a JPEG with no smaller scale to spare, are decoded whole.
    """
    from PIL import Image, UnidentifiedImageError

    mode = "RGB" if channels == 3 else "L"
    if not isinstance(source, (str, bytes, os.PathLike)):  # already decoded (Python API callers)
        img = to_mode(_decoded(source), mode)
        return Decoded(img, img.size)
    _quiet_pillow()
    limit = allow_pixels(max_pixels())
    name = "<bytes>" if isinstance(source, bytes) else str(source)
    if not isinstance(source, bytes) and os.path.exists(source) and not os.path.isfile(source):
        # a FIFO or device would block the reader thread in open(), beyond Ctrl-C's reach
        raise InputError(f"{name}: not a regular file")
    try:
        img = Image.open(io.BytesIO(source) if isinstance(source, bytes) else source)
        w, h = img.size
        if w * h > limit:
            raise InputError(f"{name}: {w}x{h} image ({w * h / 1e6:.0f} megapixels) is over the "
                             f"{limit / 1e6:g}-megapixel limit; set {MAX_PIXELS_ENV} to allow it")
        orientation = _orientation(img)
        photo = (h, w) if orientation in _SWAPPED else (w, h)
        k = 1
        if decode_size is not None and img.format in JPEG_FORMATS:
            need = scaled_decode_size(photo, decode_size, fit)
            k = dct_scale((w, h), need[::-1] if orientation in _SWAPPED else need)
            if k > 1:  # (w // k, h // k) makes Pillow pick exactly 1/k (the next scale would be < it)
                img.draft(mode, (w // k, h // k))
        img.load()
        if img.size == (w, h):  # Pillow declined (a JPEG in several tiles): decoded whole
            k = 1
        img = upright(img, orientation)
    except Image.DecompressionBombError as e:  # only past twice the limit: Pillow's own check
        raise InputError(f"{name}: {_pixels_in(str(e))}is over the {limit / 1e6:g}-megapixel limit; "
                         f"set {MAX_PIXELS_ENV} to allow it") from None
    except FileNotFoundError:
        raise InputError(f"{name}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{name}: is a folder") from None
    except UnidentifiedImageError:
        raise InputError(f"{name}: not an image (or a format Pillow cannot read)") from None
    except (OSError, SyntaxError, ValueError) as e:
        raise InputError(f"{name}: cannot decode image ({e})") from None
    try:
        return Decoded(to_mode(img, mode), photo, k)
    except InputError as e:  # pixels no image has (NaN)
        raise InputError(f"{name}: {e}") from None


def _orientation(img) -> int:
    try:
        return int(img.getexif().get(0x0112, 1))  # 0x0112: Orientation
    except (TypeError, ValueError):
        return 1


_TRANSPOSED = (2, 3, 4, 5, 6, 7, 8)  # EXIF orientations other than 1 (upright)


def image_size(path: ImageSource) -> Optional[tuple[int, int]]:
    """(width, height) of an image file as `load_image` turns it upright, read from its header
    only; None when it cannot be read (the run that decodes it says why)."""
    from PIL import Image

    _quiet_pillow()
    if isinstance(path, (str, os.PathLike)) and not os.path.isfile(path):
        return None  # missing, or a FIFO or device that would block open()
    try:
        with Image.open(path) as img:
            w, h = img.size
            turned = _orientation(img) in _SWAPPED  # a quarter turn swaps them
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError):
        return None
    return (h, w) if turned else (w, h)


def upright(img, orientation: Optional[int] = None):
    """The image turned as its EXIF orientation says (a phone photo taken sideways), as
    ImageOps.exif_transpose does, but an image already upright is kept, not copied: that copy
    cost a batch about a tenth of each image's decoding."""
    if (_orientation(img) if orientation is None else orientation) in _TRANSPOSED:
        from PIL import ImageOps

        return ImageOps.exif_transpose(img)
    return img


def to_mode(img, mode: str):
    """Convert to RGB or L; 16-bit and float images are scaled to 8 bits, not clipped."""
    from PIL import Image

    if img.mode in ("I;16", "I;16B", "I;16L", "I;16N", "I"):
        a = np.asarray(img, dtype=np.float64)
        if img.mode.startswith("I;16") or a.max(initial=0) > 255:
            a = a / 257.0  # 65535 -> 255
        img = Image.fromarray(np.clip(np.rint(a), 0, 255).astype(np.uint8))  # 2-D uint8: "L"
    elif img.mode == "F":
        a = np.asarray(img, dtype=np.float64)
        if not np.isfinite(a).all():  # casting NaN to uint8 is undefined (numpy warns)
            bad = int(np.count_nonzero(~np.isfinite(a)))
            raise InputError(f"float image with {bad} NaN or infinite pixel value(s): no pixels "
                             "to classify")
        if a.max(initial=0) <= 1.0:
            a = a * 255.0
        img = Image.fromarray(np.clip(np.rint(a), 0, 255).astype(np.uint8))  # 2-D uint8: "L"
    return img if img.mode == mode else img.convert(mode)


def resize(img, size: tuple[int, int]):
    """Resize to (width, height) with LANCZOS, as Coral's examples do."""
    from PIL import Image

    return img if img.size == size else img.resize(size, Image.LANCZOS)


def resize_bilinear(pixels: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Resize uint8 (H, W, C) pixels to (width, height) as libcoral's `CopyResizedImage` does:
    TFLite's float RESIZE_BILINEAR kernel with half-pixel centres (no antialiasing), the four
    corner terms summed in its order, the float result truncated to uint8. Coral's MoveNet
    reference keypoints were produced this way.
    """
    w, h = size
    src_h, src_w = pixels.shape[:2]
    if (src_w, src_h) == (w, h):
        return pixels

    def taps(n_out: int, n_in: int):
        scale = np.float32(n_in) / np.float32(n_out)
        pos = (np.arange(n_out, dtype=np.float32) + np.float32(0.5)) * scale - np.float32(0.5)
        lo = np.maximum(np.floor(pos).astype(np.intp), 0)
        hi = np.minimum(np.ceil(pos).astype(np.intp), n_in - 1)
        return lo, hi, (pos - lo.astype(np.float32)).astype(np.float32)

    y0, y1, dy = taps(h, src_h)
    x0, x1, dx = taps(w, src_w)
    one = np.float32(1)
    dy, dx = dy[:, None, None], dx[None, :, None]
    a = pixels.reshape(src_h, src_w, -1)
    rows0, rows1 = a[y0], a[y1]  # the taps gathered as uint8: only they become float, not the photo

    def tap(rows: np.ndarray, x: np.ndarray) -> np.ndarray:
        return rows[:, x].astype(np.float32)

    out = tap(rows0, x0) * ((one - dy) * (one - dx))
    out += tap(rows0, x1) * ((one - dy) * dx)
    out += tap(rows1, x0) * (dy * (one - dx))
    out += tap(rows1, x1) * (dy * dx)
    return np.clip(out, 0, 255).astype(np.uint8).reshape((h, w) + pixels.shape[2:])


def input_affine(dtype: np.dtype, scale: float, zero_point: int, mean: float, std: float
                 ) -> tuple[float, float]:
    """(a, b) such that model input = a·pixel + b, for pixel values 0..255.

    Float models take (pixel − mean)/std. Quantized models take that divided by the input
    scale, plus the zero point: q = (pixel − mean)/(std·scale) + zero_point. An integer input
    without quantization parameters takes the pixels themselves (uint8; int8: pixel − 128): the
    model converts them (MoveNet's uint8 input feeds a CAST).
    """
    if np.dtype(dtype).kind == "f":
        return 1.0 / std, -mean / std
    if scale == 0:
        return 1.0, (-128.0 if np.dtype(dtype) == np.int8 else 0.0)
    a = 1.0 / (std * scale)
    return a, zero_point - mean * a


def quantize_input(pixels: np.ndarray, dtype: np.dtype, scale: float, zero_point: int,
                   mean: float = CORAL_MEAN, std: float = CORAL_STD) -> np.ndarray:
    """Turn uint8 pixels (H, W, C) into the model's input tensor values (without batch)."""
    dtype = np.dtype(dtype)
    a, b = input_affine(dtype, scale, zero_point, mean, std)
    if dtype == np.uint8 and abs(a - 1) < 1e-5 and abs(b) < 1e-5:
        return pixels  # the model takes raw pixels: Coral's "skip normalization" rule
    if dtype == np.int8 and abs(a - 1) < 1e-5 and abs(b + 128) < 1e-5:
        return (pixels ^ np.uint8(0x80)).view(np.int8)  # pixel − 128, without a float pass
    values = pixels.astype(np.float32) * np.float32(a) + np.float32(b)
    if dtype.kind == "f":
        return values.astype(dtype)
    info = np.iinfo(dtype)
    return np.clip(np.rint(values), info.min, info.max).astype(dtype)


def _decoded(image):
    """A Pillow image from a Pillow image or a uint8 array (H×W grey, H×W×3 RGB, H×W×4 RGBA)."""
    from PIL import Image

    if isinstance(image, Image.Image):
        return image
    arr = np.asarray(image)
    if arr.dtype != np.uint8 or arr.ndim not in (2, 3) or (arr.ndim == 3 and arr.shape[2] not in (1, 3, 4)):
        raise InputError(f"array of shape {list(arr.shape)} and type {arr.dtype} is not an image "
                         "(uint8, H×W, H×W×3 RGB or H×W×4 RGBA)")
    return Image.fromarray(arr[:, :, 0] if arr.ndim == 3 and arr.shape[2] == 1 else arr)


def fit_pixels(img, size: tuple[int, int], mode: str = "stretch", resample: str = "lanczos",
               fill: int = 0) -> tuple[np.ndarray, Any]:
    """A decoded Pillow image fitted into (width, height): uint8 (H, W, C) pixels and the `Fit`.

    Stretch, or letterbox (one scale, centred, padded with `fill`); resized with LANCZOS, as
    Coral's classification and detection examples do, or with libcoral's bilinear (what Coral's
    pose references were made with)."""
    fit = make_fit(mode, img.size, size)
    content = (fit.content_w, fit.content_h)
    if resample == "bilinear":
        pixels = np.asarray(img, dtype=np.uint8)
        pixels = resize_bilinear(pixels[:, :, None] if pixels.ndim == 2 else pixels, content)
    else:
        pixels = np.asarray(resize(img, content), dtype=np.uint8)
    if pixels.ndim == 2:
        pixels = pixels[:, :, None]
    if content != tuple(size):
        canvas = np.full((size[1], size[0], pixels.shape[2]), fill, np.uint8)
        canvas[fit.pad_y:fit.pad_y + fit.content_h, fit.pad_x:fit.pad_x + fit.content_w] = pixels
        pixels = canvas
    return pixels, fit


def load_input_tensor(source: ImageSource, size: tuple[int, int], channels: int, dtype: np.dtype,
                  scale: float, zero_point: int, mean: float = CORAL_MEAN,
                  std: float = CORAL_STD, decode: str = "full") -> np.ndarray:
    """Load, convert, resize (stretch) and quantize one image into a (1, H, W, C) input tensor."""
    pixels, _ = fit_pixels(load_image(source, channels, size if decode == "scaled" else None), size)
    return quantize_input(pixels, dtype, scale, zero_point, mean, std)[None]
