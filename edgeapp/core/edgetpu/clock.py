"""The Edge TPU's clock as libedgetpu sets it: performance levels, std and max builds.

libedgetpu takes a `Performance` option (`Low`, `Medium`, `High`, `Max`; libedgetpu
tflite/edgetpu_delegate_for_custom_op_tflite_plugin.cc), forwarded only with an indexed device
(`usb:0`, `pci:1`, `:0`). Each level halves the clock of the one above (the apex driver's
divider 0..3: 500, 250, 125, 62.5 MHz). Coral ships two builds of the library: `max`
(libedgetpu1-max, the "direct" build) runs a USB Accelerator at `Max`; `std` (libedgetpu1-std,
built with THROTTLE_EDGE_TPU, the "throttled" build) caps USB at `High` and quietly drops a
`Max` request to `High` (tflite/edgetpu_driver_wrapper.cc). PCIe cards are not capped by the
build; their driver lowers the clock with temperature instead (core/edgetpu/thermal.py).
Pure data and functions: hw/ reads the package database and the library.
"""

from __future__ import annotations

from typing import Optional, Tuple

from typing_extensions import TypedDict

PERFORMANCE_LEVELS = ("low", "medium", "high", "max")
DELEGATE_VALUES = {"low": "Low", "medium": "Medium", "high": "High", "max": "Max"}
MAX_CLOCK_MHZ = 500.0
STD, MAX = "std", "max"
MAX_PACKAGE = "libedgetpu1-max"
USB_QUEUE_RANGE = (0, 255)  # Usb.MaxBulkInQueueLength: libedgetpu's documented range

# The delegate options libedgetpu reads (their names are not identifiers: the functional form)
DelegateOptions = TypedDict("DelegateOptions", {"Performance": str, "Usb.MaxBulkInQueueLength": str},
                            total=False)


def clock_at(level: str) -> float:
    """MHz of a performance level: max 500, high 250, medium 125, low 62.5."""
    steps_down = len(PERFORMANCE_LEVELS) - 1 - PERFORMANCE_LEVELS.index(level)
    return MAX_CLOCK_MHZ / (2 ** steps_down)


def delegate_options(performance: Optional[str] = None, usb_queue: Optional[int] = None) -> DelegateOptions:
    """The option keys and values libedgetpu reads, for what the user asked (nothing: none)."""
    options: DelegateOptions = {}
    if performance is not None:
        options["Performance"] = DELEGATE_VALUES[performance]
    if usb_queue is not None:
        options["Usb.MaxBulkInQueueLength"] = str(int(usb_queue))
    return options


def build_mode(package: Optional[str], path: Optional[str] = None,
               label: Optional[str] = None) -> Tuple[Optional[str], str]:
    """(`std`, `max` or None, how we know) of a libedgetpu build: its Debian package name
    (libedgetpu1-std, libedgetpu1-max, also the -legacy- ones), else the folder Coral's archives
    and pycoral's wheels keep it in (`throttled` / `direct`), else its build label."""
    if package:
        name = package.lower()
        if name.endswith("-max"):
            return MAX, f"Debian package {package}"
        if name.endswith("-std"):
            return STD, f"Debian package {package}"
    parts = (path or "").replace("\\", "/").lower().split("/")
    if "throttled" in parts:
        return STD, f"{path} (Coral's throttled build)"
    if "direct" in parts:
        return MAX, f"{path} (Coral's direct build)"
    text = (label or "").lower()
    if "throttle" in text:
        return STD, "edgetpu_version() build label"
    return None, "no Debian package or folder says std or max"


def usb_level(mode: Optional[str], requested: Optional[str] = None) -> Optional[str]:
    """The level a USB Accelerator really runs at: the request, capped at `high` by std builds;
    without a request, the build's default. None when the build is unknown and nothing asked."""
    if requested is not None:
        return "high" if mode == STD and requested == "max" else requested
    if mode == STD:
        return "high"
    if mode == MAX:
        return "max"
    return None


def refusal(mode: Optional[str], requested: Optional[str], evidence: str) -> Optional[str]:
    """One line when `--performance max` cannot be honoured (a std build on USB), else None."""
    if requested != "max" or mode != STD:
        return None
    return (f"--performance max: the installed libedgetpu is the std build ({evidence}), which "
            f"runs a USB Accelerator at most at high ({clock_at('high'):g} MHz) and drops max "
            f"silently; install {MAX_PACKAGE} (sudo apt-get install {MAX_PACKAGE}; it runs hotter) "
            "or ask for --performance high")


def check_usb_queue(value: Optional[int]) -> Optional[str]:
    """Why a Usb.MaxBulkInQueueLength is refused, or None."""
    low, high = USB_QUEUE_RANGE
    if value is not None and not low <= value <= high:
        return f"--usb-queue must be between {low} and {high}, not {value}"
    return None
