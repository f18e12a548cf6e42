"""Ctrl-C: exit 130 with the summary, in the camera as in a batch; how many results were
written and how to resume; still Ctrl-C when an error is raised while it unwinds.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_run import default_sigint
from conftest import ROOT
from media import make_video

from edgeapp.errors import ExitCode


def test_ctrl_c_is_130_with_the_summary_in_camera_as_in_classify(tiny_model, color_images, tmp_path):
    video = make_video(tmp_path / "long.avi", ["red"] * 600, size=(64, 48))  # 20 s at its own rate
    proc = subprocess.Popen([sys.executable, "-m", "edgeapp", "camera", str(tiny_model), "--source",
                             str(video), "--no-display", "--drop-frames"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT, preexec_fn=default_sigint)
    assert proc.stdout.readline()  # running: one frame done
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == ExitCode.INTERRUPTED == 130, err
    assert "stop: interrupted" in err.strip().splitlines()[-1]

    # classify: the same image under many spellings of its path, stopped after the first result
    image = color_images["red"]
    listing = tmp_path / "paths.txt"
    spellings = (f"{image.parent}{'/.' * i}/{image.name}\n" for i in range(1, 1900))  # < PATH_MAX
    listing.write_text("".join(spellings))
    with listing.open() as stdin:
        proc = subprocess.Popen([sys.executable, "-m", "edgeapp", "classify", str(tiny_model), "-",
                                 "-f", "jsonl", "--workers", "0"], stdin=stdin,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                                preexec_fn=default_sigint)
    assert proc.stdout.readline()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1].startswith("edgeapp: interrupted: "), err  # + how to resume


def interrupted(tiny_model, image: Path, listing: Path, *args) -> tuple[str, Path]:
    spellings = (f"{image.parent}{'/.' * i}/{image.name}\n" for i in range(1, 1900))
    listing.write_text("".join(spellings))
    out = Path(args[args.index("-o") + 1]) if "-o" in args else None
    with listing.open() as stdin:
        proc = subprocess.Popen([sys.executable, "-m", "edgeapp", "classify", str(tiny_model), "-",
                                 "--workers", "0", *map(str, args)], stdin=stdin,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                                preexec_fn=default_sigint)
        if out is None:
            assert proc.stdout.readline()
        else:
            deadline = time.monotonic() + 60
            while not (out.exists() and out.read_text().count("\n") >= 2) and time.monotonic() < deadline:
                time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == ExitCode.INTERRUPTED, err
    return err.strip().splitlines()[-1], out


def test_ctrl_c_in_a_batch_says_how_many_results_and_how_to_resume(tiny_model, color_images, tmp_path):
    last, _ = interrupted(tiny_model, color_images["red"], tmp_path / "a.txt", "-f", "jsonl")
    assert re.match(r"edgeapp: interrupted: \d+ result\(s\) written to stdout; .*--output .*--resume",
                    last), last

    last, out = interrupted(tiny_model, color_images["red"], tmp_path / "b.txt", "-o", tmp_path / "r.jsonl")
    n = int(re.match(r"edgeapp: interrupted: (\d+) result\(s\) written to (\S+);", last).group(1))
    assert n == len(out.read_text().splitlines()) >= 2
    assert f"written to {out}; run the same command with --resume" in last


def test_an_error_raised_while_ctrl_c_unwinds_is_still_ctrl_c():
    """Python 3.9 can turn a KeyboardInterrupt landing inside a lock's wait into "RuntimeError:
    release unlocked lock" (seen once in the bullseye chroot): that is Ctrl-C, exit 130."""
    import typer

    from edgeapp.cli.command import exit_codes
    from edgeapp.errors import is_interrupt

    def broken_by_ctrl_c():
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise RuntimeError("release unlocked lock")

    try:
        broken_by_ctrl_c()
    except RuntimeError as e:
        assert is_interrupt(e)
    assert not is_interrupt(RuntimeError("a bug"))
    with pytest.raises(typer.Exit) as exit_, exit_codes():
        broken_by_ctrl_c()
    assert exit_.value.exit_code == 130


def test_the_resume_hint_survives_an_error_raised_while_it_unwinds(capsys):
    """Closing a runner as Ctrl-C unwinds can fail on Python 3.9 (seen in the bullseye chroot):
    the user still hears how many results were written and how to resume."""
    import typer

    from edgeapp.cli.command import exit_codes
    from edgeapp.cli.options import Interrupted

    def batch_then_a_broken_close():
        try:
            raise Interrupted("3 result(s) written to r.jsonl; run the same command with --resume")
        finally:
            raise RuntimeError("release unlocked lock")

    with pytest.raises(typer.Exit) as exit_, exit_codes():
        batch_then_a_broken_close()
    assert exit_.value.exit_code == 130
    assert "interrupted: 3 result(s) written to r.jsonl; run the same command with --resume" in \
        capsys.readouterr().err


def _interrupted_at(argv: list, stdin, ready) -> subprocess.CompletedProcess:
    """Run `argv` (Python's import times on stderr), Ctrl-C once a stderr line satisfies `ready`;
    the exit code and the stderr lines that are not import times."""
    proc = subprocess.Popen(argv, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=ROOT, preexec_fn=default_sigint)
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if ready(line):
            proc.send_signal(signal.SIGINT)
            break
    else:
        pytest.fail("".join(seen))
    err = proc.stderr.read()  # the rest, past what the line reader buffered
    out = proc.stdout.read()
    proc.wait(timeout=60)
    lines = [ln for ln in (seen + err.splitlines(True)) if ln.strip() and not ln.startswith("import time:")]
    return subprocess.CompletedProcess(argv, proc.returncode, out, "".join(lines))


@pytest.mark.parametrize("landing", ["typer", "edgeapp.cli.task_commands"])
def test_ctrl_c_while_edgeapp_starts_is_130_and_one_line(tiny_model, landing):
    """Ctrl-C while the app's modules import (`typer`), or while the command is being built
    (the task commands' modules): no traceback, no click "Aborted!", exit 130."""
    with subprocess.Popen(["sleep", "120"], stdout=subprocess.PIPE) as never:  # stdin with no paths yet
        done = _interrupted_at([sys.executable, "-X", "importtime", "-m", "edgeapp", "classify",
                                str(tiny_model), "-"], never.stdout,
                               lambda line: line.split("|")[-1].strip().startswith(landing))
        never.kill()
    assert done.returncode == ExitCode.INTERRUPTED, done.stderr
    assert "Traceback" not in done.stderr and "Aborted" not in done.stderr, done.stderr
    assert len(done.stderr.splitlines()) == 1 and done.stderr.startswith("edgeapp: interrupted"), done.stderr


def test_ctrl_c_caught_in_source_python_compiled_at_run_time_is_still_130(tiny_model, color_images, tmp_path):
    """CPython remembers a Ctrl-C that went through the last source it compiled at run time
    (every dataclass and namedtuple being defined: Dask's imports while its cluster starts) even
    when it was caught, and ends the process by SIGINT after exit 130 was asked for: the flaky
    -2 of test_cluster_interrupt.py. Here such a Ctrl-C lands as late as one can (an exit
    handler), after the batch was interrupted."""
    (tmp_path / "late_ctrl_c.py").write_text(  # run as `python -m`, as the tests run edgeapp
        "import atexit, runpy, sys\n"
        "def late_ctrl_c():\n"
        "    try:\n"
        "        exec('raise KeyboardInterrupt')  # as in a dataclass being defined\n"
        "    except KeyboardInterrupt:\n"
        "        pass\n"
        "atexit.register(late_ctrl_c)\n"
        "sys.argv = ['edgeapp'] + sys.argv[1:]\n"
        "runpy.run_module('edgeapp', run_name='__main__', alter_sys=True)\n")
    image = color_images["red"]
    listing = tmp_path / "paths.txt"
    listing.write_text("".join(f"{image.parent}{'/.' * i}/{image.name}\n" for i in range(1, 1900)))
    with listing.open() as stdin:
        proc = subprocess.Popen([sys.executable, "-m", "late_ctrl_c", "classify", str(tiny_model), "-",
                                 "-f", "jsonl", "--workers", "0"], stdin=stdin,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                                env={**os.environ, "PYTHONPATH": str(tmp_path)},
                                preexec_fn=default_sigint)
        assert proc.stdout.readline()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == ExitCode.INTERRUPTED, (proc.returncode, err)
    assert err.strip().splitlines()[-1].startswith("edgeapp: interrupted: "), err
