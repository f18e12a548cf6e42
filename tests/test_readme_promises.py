"""What the README promises a reader: a first command that works with bullseye's pip, what a
Lite image needs for OpenCV, where the reference kernels match Coral's numbers.
"""

from __future__ import annotations

from conftest import ROOT


def readme_section(title: str, page: str = "README.md") -> str:
    text = (ROOT / page).read_text()
    return text.split(f"\n## {title}", 1)[1].split("\n## ", 1)[0]


def test_the_first_command_to_copy_works_with_bullseyes_pip():
    first = readme_section("Try it").split("```bash\n", 1)[1].split("\n", 1)[0]
    assert first.startswith("pip install . && edgeapp classify"), first
    assert "-e" not in first.split("&&")[0]  # pip 20.3 cannot install a setup.py-less project editable


def test_the_install_table_says_what_a_lite_image_needs_for_opencv():
    install = readme_section("Install").split("\n### ", 1)[0]  # the install table, not pip's report
    rows = [ln for ln in install.splitlines() if ln.startswith(("| Raspberry Pi OS", "| Debian 11"))]
    assert rows and all("libgl1" in row or "as for 64-bit" in row for row in rows), rows
    assert "opencv-python-headless" in install and "Lite" in install


def test_the_readme_says_where_reference_kernels_match_coral():
    text = " ".join(readme_section("CPU kernels", "docs/choosing-a-device.md").split())
    assert "reproduce Coral's numbers on x86-64" in text
    assert "On 64-bit ARM" in text and "NEON" in text and "0.285" in text


def test_try_it_says_the_shipped_models_run_on_the_cpu_and_shows_the_compiled_path():
    from edgeapp.core.tflite.model import load_model

    try_it = readme_section("Try it")
    text = " ".join(try_it.split())
    shipped = sorted(p.name for p in (ROOT / "models").glob("*.tflite"))
    assert shipped and all(not load_model(ROOT / "models" / name).is_edgetpu_compiled for name in shipped)
    assert all(f"`{name}`" in text for name in shipped), shipped  # each says what it is
    assert ("`digits_int8.tflite`, like every model here, is not compiled for the Edge TPU, so it always "
            "runs on the CPU") in text
    commands = [ln.split("#")[0].strip() for ln in try_it.splitlines()]
    assert "edgeapp compiler install && edgeapp compile models/digits_int8.tflite" in commands
    assert "edgeapp classify models/digits_int8_edgetpu.tflite models/samples" in commands


def test_try_it_shows_detect_and_retrain_on_what_ships():
    try_it = readme_section("Try it")
    commands = [ln.split("#")[0].strip() for ln in try_it.splitlines()]
    detect = next(c for c in commands if c.startswith("edgeapp detect "))
    retrain = next(c for c in commands if c.startswith("edgeapp retrain "))
    for command in (detect, retrain):
        paths = [w for w in command.split() if w.startswith("models/")]
        assert len(paths) == 2 and all((ROOT / p).exists() for p in paths), command


def test_the_readme_says_what_the_counts_look_like_without_chromium_mosquitto_and_shared():
    text = " ".join(readme_section("Run the tests").split())
    assert "Without Chromium" in text and "Mosquitto" in text and "`../shared`" in text
    assert "1127–1138 passed and 38–48 skipped" in text
