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

    from edgeapp.cli.options import check_exclusive, cli_errors

    app = typer.Typer()

    @app.command()
    @cli_errors
    def bench(ctx: typer.Context, runs: int = typer.Option(100, "--runs", "-n"),
              duration: Optional[float] = typer.Option(None, "--duration")) -> None:
        check_exclusive(ctx, "runs", "duration", "--duration times the loop instead of --runs")
        typer.echo(f"runs={runs} duration={duration}")

    runner = CliRunner()
    r = runner.invoke(app, ["--runs", "5", "--duration", "0.5"])
    assert r.exit_code == ExitCode.USAGE
    assert "--runs and --duration contradict each other" in r.output
    for ok in (["--duration", "0.5"], ["-n", "5"], []):
        assert runner.invoke(app, ok).exit_code == 0
