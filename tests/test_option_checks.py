"""Options checked before any work: numbers out of range (--std, --threshold), an empty
--device, two options that contradict each other; one line and exit 2, or a warning.
"""

from __future__ import annotations

from typing import Optional

import pytest
import typer
from cli_run import IMAGE_COMMANDS, error_lines
from media import make_video

from edgeapp.errors import ExitCode


@pytest.mark.parametrize("std", ["0", "-1", "-0.5"])
@pytest.mark.parametrize("command", IMAGE_COMMANDS + ("camera",))
def test_std_zero_or_negative_is_a_usage_error(cli, tiny_model, color_images, tmp_path, command, std):
    if command == "camera":
        video = make_video(tmp_path / "v.avi", ["red"] * 3, size=(64, 48))
        args = ("camera", tiny_model, "--source", video, "--no-display")
    else:
        args = (command, tiny_model, color_images["red"])
    r = cli(*args, "--std", std)
    assert r.exit_code == ExitCode.USAGE, r.stderr
    (line,) = error_lines(r.stderr)
    assert f"--std must be greater than 0, not {float(std):g}" in line
    assert "internal error" not in r.stderr and not r.stdout


def test_empty_device_is_a_usage_error(cli, tiny_model, color_images):
    r = cli("classify", tiny_model, color_images["red"], "--device", "")
    assert r.exit_code == ExitCode.USAGE and "--device is empty" in r.stderr, r.stderr


@pytest.mark.parametrize("threshold, outcome",
                         [("2", "nothing will pass it"), ("-0.5", "everything passes it")])
def test_a_threshold_outside_0_to_1_is_warned_about(cli, tiny_model, color_images, threshold, outcome):
    r = cli("classify", tiny_model, color_images["red"], "--threshold", threshold)
    assert r.exit_code == 0, r.stderr
    assert f"warning: --threshold {float(threshold):g} is outside 0..1" in r.stderr and outcome in r.stderr


def test_two_options_that_contradict_each_other_are_a_usage_error():
    """For bench's --runs and --duration (cli/options.check_exclusive): only typed values count."""
    from typer.testing import CliRunner

    from edgeapp.cli.command import exit_codes
    from edgeapp.cli.options import check_exclusive

    app = typer.Typer()

    @app.command()
    def bench(ctx: typer.Context, runs: int = typer.Option(100, "--runs", "-n"),
              duration: Optional[float] = typer.Option(None, "--duration")) -> None:
        with exit_codes():
            check_exclusive(ctx, "runs", "duration", "--duration times the loop instead of --runs")
        typer.echo(f"runs={runs} duration={duration}")

    runner = CliRunner()
    r = runner.invoke(app, ["--runs", "5", "--duration", "0.5"])
    assert r.exit_code == ExitCode.USAGE
    assert "--runs and --duration contradict each other" in r.output
    for ok in (["--duration", "0.5"], ["-n", "5"], []):
        assert runner.invoke(app, ok).exit_code == 0


@pytest.mark.parametrize("case", ["resume without output", "resume a table", "labels not found",
                                  "another task's model", "camera that cannot be opened"])
def test_what_needs_no_model_is_checked_before_it_is_opened(cli, tiny_model, color_images, tmp_path, case):
    """The error is the only line: nothing says where the model runs (it was not opened for
    nothing), and no live view is announced for a camera that cannot be opened."""
    image = color_images["red"]
    args, said = {
        "resume without output": (("classify", tiny_model, image, "--resume"),
                                  "--resume needs --output FILE"),
        "resume a table": (("classify", tiny_model, image, "--resume", "-o", tmp_path / "r.txt"),
                           "--resume needs --format jsonl or csv"),
        "labels not found": (("classify", tiny_model, image, "-l", tmp_path / "nope.txt"),
                             "labels file not found"),
        "another task's model": (("detect", tiny_model, image), "use `edgeapp classify`"),
        "camera that cannot be opened": (("camera", tiny_model, "--source", "/dev/video63",
                                          "--serve", "127.0.0.1:0", "--no-display"),
                                         "cannot open /dev/video63"),
    }[case]
    r = cli(*args)
    assert r.exit_code in (ExitCode.USAGE, ExitCode.MODEL_INVALID, ExitCode.DEVICE_UNAVAILABLE), r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("edgeapp: error: ") and said in lines[0], r.stderr


def test_an_existing_results_file_is_not_replaced_unless_asked(cli, tiny_model, color_images, tmp_path):
    """Forgetting --resume after a Ctrl-C must not throw away the results: a results file that
    holds something is refused (naming --resume and --overwrite), before the model is opened."""
    out = tmp_path / "r.jsonl"
    out.write_text('{"path": "earlier.jpg"}\n')
    r = cli("classify", tiny_model, color_images["red"], "-o", out)
    assert r.exit_code == ExitCode.USAGE, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line == (f"edgeapp: error: {out} already holds results: add --resume to go on where "
                    "they stopped, or --overwrite to replace them")
    assert out.read_text() == '{"path": "earlier.jpg"}\n'

    r = cli("classify", tiny_model, color_images["red"], "-o", out, "--resume", "--overwrite")
    assert r.exit_code == ExitCode.USAGE and "contradict" in r.stderr, r.stderr

    r = cli("classify", tiny_model, color_images["red"], "-o", out, "--overwrite")
    assert r.exit_code == 0, r.stderr
    assert "earlier.jpg" not in out.read_text() and str(color_images["red"]) in out.read_text()

    empty = tmp_path / "empty.csv"
    empty.write_text("")  # nothing to lose: written without asking
    r = cli("classify", tiny_model, color_images["red"], "-o", empty)
    assert r.exit_code == 0, r.stderr


@pytest.mark.parametrize("args, says", [
    (("classify", "{model}", "{image}", "--then", "classify:x.tflite"), "No such option: --then"),
    (("classify",), "Missing argument 'MODEL'"),
    (("classify", "{model}", "{image}", "--threshold", "abc"), "'--threshold'"),
    (("detect", "{model}", "{image}", "--format", "bogus"), "bogus"),
    (("nosuchcommand",), "No such command"),
    (("models", "nosuchcommand"), "No such command"),
])
def test_a_flag_or_command_that_does_not_exist_is_one_line_and_exit_2(cli, tiny_model, color_images, args, says):
    """Click's own usage errors (three lines: usage, hint, error) read as every other error."""
    r = cli(*(a.format(model=tiny_model, image=color_images["red"]) for a in args))
    assert r.exit_code == ExitCode.USAGE and not r.stdout, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("edgeapp: error: ") and says in line and "--help" in line, line
