"""`edgeapp compile`: the parsers on recorded compiler outputs, and the whole command through a
stand-in edgetpu_compiler (the real one is x86-64 Linux only and not installable here).

The stand-in is written into tmp_path by `fake_compiler`: it prints a recorded output (with the
model's name), writes X_edgetpu.tflite and X_edgetpu.log into --out_dir as the compiler names
them (X_segment_I_of_N_edgetpu.* with --num_segments), honours --timeout_sec in its banner,
can hang, and can print each recorded failure.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from compiler_fixtures import DIGITS, FIX
from conftest import ROOT

from edgeapp.core.edgetpu import compiler_output as CO
from edgeapp.core.naming import compiler_outputs
from edgeapp.errors import ExitCode, MissingDependency
from edgeapp.hw import compiler as C


def fixture(name: str) -> str:
    return (FIX / name).read_text()


# ----------------------------------------------------------------------------- parsers


def test_parse_partial_stdout_verbatim():
    r = CO.parse_stdout(fixture("partial_stdout.txt"))
    assert r.compiler_version == "16.0.384591198"
    assert r.timeout_s == 180 and r.compile_ms == 1524
    assert r.input_model == "efficientdet_coral_v2.tflite"
    assert r.output_model == "efficientdet_coral_v2_edgetpu.tflite"
    assert r.input_size_bytes == round(4.24 * 1024 ** 2)
    assert r.output_size_bytes == round(5.57 * 1024 ** 2)
    assert r.on_chip_used_bytes == round(4.21 * 1024 ** 2)
    assert r.on_chip_remaining_bytes == round(3.29 * 1024 ** 2)
    assert r.off_chip_bytes == 0
    assert (r.subgraphs, r.total_ops, r.ops_tpu, r.ops_cpu) == (1, 267, 264, 3)
    assert r.operation_log == "efficientdet_coral_v2_edgetpu.log"
    assert r.compiled and r.succeeded and r.partial_notice
    assert r.failures == [] and r.segments == []


def test_parse_log_table_verbatim():
    rows = CO.parse_operator_table(fixture("mnist4_edgetpu.log"))
    assert [(o.operator, o.count, o.status, o.mapped) for o in rows] == [
        ("RESHAPE", 1, "Mapped to Edge TPU", True),
        ("QUANTIZE", 1, "Operation is otherwise supported, but not mapped due to some "
                        "unspecified limitation", False),
        ("DEQUANTIZE", 1, "Operation is working on an unsupported data type", False)]


def test_log_table_one_operator_on_several_rows():
    rows = CO.parse_operator_table(fixture("tiny_yolo_edgetpu.log"))
    quant = [(o.count, o.status) for o in rows if o.operator == "QUANTIZE"]
    assert quant == [(1, "Operation is otherwise supported, but not mapped due to some unspecified "
                         "limitation"), (1, "More than one subgraph is not supported"),
                     (2, "Mapped to Edge TPU")]
    assert sum(o.count for o in rows if o.mapped) == 6 + 11 + 2
    assert ("RESIZE_NEAREST_NEIGHBOR", "Operation version not supported") in \
        [(o.operator, o.status) for o in rows]


def test_stdout_with_show_operations_has_the_table():
    text = fixture("partial_stdout.txt") + "\n" + fixture("partial_edgetpu.log").split("\n", 3)[3]
    r = CO.parse_stdout(text)
    assert len(r.operators) == 9 and r.cpu_operators[-1].operator == "TFLite_Detection_PostProcess"
    assert (r.ops_tpu, r.ops_cpu) == (264, 3)  # the printed counts win


@pytest.mark.parametrize("text,expected", [("4.24MiB", 4445962), ("0.00B", 0), ("175.00KiB", 179200),
                                           ("1.5GiB", 1610612736), ("12B", 12), ("n/a", None)])
def test_parse_size(text, expected):
    assert CO.parse_size(text) == expected


def test_fully_mapped_counts_are_derived_and_judged_ok():
    r = CO.parse_stdout(fixture("fully_mapped_stdout.txt"))
    assert (r.subgraphs, r.total_ops, r.ops_tpu, r.ops_cpu) == (1, 72, 72, 0)
    j = CO.judge(r, 0)
    assert (j.verdict, j.exit_code, j.errors, j.warnings) == ("fully_mapped", 0, [], [])


def test_counts_derived_from_the_log_when_stdout_has_none():
    r = CO.parse_stdout(fixture("fully_mapped_stdout.txt").replace("Total number", "Total  number"))
    CO.apply_log(r, fixture("fully_mapped_edgetpu.log"))
    assert r.ops_tpu == 72


def test_partial_is_a_warning_listing_cpu_operations_with_reasons():
    r = CO.parse_stdout(fixture("partial_stdout.txt"))
    CO.apply_log(r, fixture("partial_edgetpu.log"))
    j = CO.judge(r, 0)
    assert j.verdict == "partially_mapped" and j.exit_code == ExitCode.NOT_MAPPABLE
    assert j.errors == []
    (w,) = j.warnings
    assert "3 of 267 operation(s) run on the CPU" in w
    assert "DEQUANTIZE×2 (Operation is working on an unsupported data type)" in w
    assert "TFLite_Detection_PostProcess×1 (Operation not supported)" in w


def test_zero_subgraphs_fails_even_though_the_compiler_succeeded():
    r = CO.parse_stdout(fixture("zero_subgraphs_stdout.txt"))
    assert r.compiled and (r.subgraphs, r.ops_tpu, r.ops_cpu) == (0, 0, 69)
    j = CO.judge(r, 0)
    assert j.verdict == "not_mapped" and j.exit_code == ExitCode.NOT_MAPPABLE
    assert "nothing runs on the Edge TPU" in j.errors[0]


def test_zero_mapped_without_counts_is_a_failure_too():
    text = fixture("fully_mapped_stdout.txt").replace("Number of Edge TPU subgraphs: 1",
                                                      "Number of Edge TPU subgraphs: 0")
    j = CO.judge(CO.parse_stdout(text), 0)
    assert j.verdict == "not_mapped"


def test_streamed_parameters_are_a_performance_warning():
    r = CO.parse_stdout(fixture("streamed_stdout.txt"))
    assert r.off_chip_bytes == 175 * 1024
    j = CO.judge(r, 0)
    assert j.verdict == "fully_mapped" and j.exit_code == 0
    assert any("175.00 KiB" in w and "streamed" in w for w in j.warnings)


@pytest.mark.parametrize("name,kind,words", [
    ("not_quantized_stdout.txt", "not_quantized", ["Invalid model", "Model not quantized",
                                                   "edgeapp convert"]),
    ("op_version_stdout.txt", "op_version", ["CONV_2D version 6", "TensorFlow 2.8"]),
    ("internal_error_stdout.txt", "internal_error", ["Internal compiler error",
                                                     "--search-delegate"]),
    ("timeout_stdout.txt", "timeout", ["Compilation timeout", "--timeout"]),
    ("dynamic_stdout.txt", "dynamic_tensors", ["static-sized", "batch of 1"]),
])
def test_failures_are_recognised_and_explained(name, kind, words):
    r = CO.parse_stdout(fixture(name))
    assert [f.kind for f in r.failures] == [kind]
    assert r.succeeded is False
    for returncode in (1, 0):  # exit codes are undocumented: the text decides
        j = CO.judge(r, returncode)
        assert j.verdict == "failed" and j.exit_code == ExitCode.COMPILE_FAILED
        assert len(j.errors) == 1 and "\n" not in j.errors[0]
        for w in words:
            assert w in j.errors[0]


def test_unknown_failure_with_nonzero_exit():
    j = CO.judge(CO.parse_stdout("Edge TPU Compiler version 16.0.384591198\nsomething new\n"), 3)
    assert j.verdict == "failed" and "exit status 3" in j.errors[0]


def test_segments_are_parsed_per_block_and_summed():
    r = CO.parse_stdout(fixture("segments_stdout.txt"))
    assert [s.input_model for s in r.segments] == ["efficientdet_coral_v2_segment_0_of_2.tflite",
                                                   "efficientdet_coral_v2_segment_1_of_2.tflite"]
    assert [s.total_ops for s in r.segments] == [40, 32]
    assert (r.total_ops, r.ops_tpu, r.ops_cpu, r.subgraphs) == (72, 72, 0, 2)
    assert CO.judge(r, 0).verdict == "fully_mapped"


def test_output_naming_as_the_compiler_does_it(tmp_path):
    assert compiler_outputs("a/b/X.tflite", tmp_path) == [
        (tmp_path / "X_edgetpu.tflite", tmp_path / "X_edgetpu.log")]
    assert [p.name for p, _ in compiler_outputs("X.tflite", tmp_path, 3)] == [
        "X_segment_0_of_3_edgetpu.tflite", "X_segment_1_of_3_edgetpu.tflite",
        "X_segment_2_of_3_edgetpu.tflite"]


def test_argv_is_a_list_with_every_flag():
    argv = C.build_argv("/opt/edgetpu_compiler", "m dir/x.tflite", "out dir", segments=2,
                        min_runtime=13, timeout=60, search_delegate=True)
    assert argv == ["/opt/edgetpu_compiler", "--out_dir", "out dir", "--show_operations",
                    "--min_runtime_version", "13", "--num_segments", "2", "--timeout_sec", "60",
                    "--search_delegate", "m dir/x.tflite"]


# --------------------------------------------------------- the stand-in compiler (compiler_fixtures.py)


def test_compile_full_json(cli, fake_compiler, model_copy, tmp_path):
    out = tmp_path / "out"
    res = cli("compile", model_copy, "-o", out, "--format", "json")
    assert res.exit_code == 0, res.stderr
    report = json.loads(res.stdout)
    argv = fake_compiler.recorded()
    assert argv[1:] == ["--out_dir", str(out), "--show_operations", "--timeout_sec", "180",
                        str(model_copy)]
    assert report["command"] == [str(fake_compiler.path)] + argv[1:]
    assert "running: " + str(fake_compiler.path) in res.stderr  # the exact command is logged
    assert report["verdict"] == "fully_mapped" and report["exit_code"] == 0
    assert report["outputs"] == [{"model": str(out / "digits_edgetpu.tflite"),
                                  "log": str(out / "digits_edgetpu.log"), "exists": True}]
    assert (out / "digits_edgetpu.tflite").is_file() and (out / "digits_edgetpu.log").is_file()
    # the CPU twin (and its sidecar) stays beside the compiled model, for classify's fallback
    assert report["cpu_model"] == str(out / "digits.tflite")
    assert (out / "digits.tflite").read_bytes() == DIGITS.read_bytes()
    assert (out / "digits.json").is_file()
    r = report["result"]
    assert (r["compiler_version"], r["total_ops"], r["ops_tpu"], r["ops_cpu"]) == \
        ("16.0.384591198", 72, 72, 0)
    assert r["output_model"] == f"{out}/digits_edgetpu.tflite"
    assert len(r["operators"]) == 8 and all(o["mapped"] for o in r["operators"])
    assert str(out / "digits_edgetpu.log") in report["logs"]
    assert report["stdout"].startswith("Edge TPU Compiler version")


def test_compile_default_out_dir_is_beside_the_model(cli, fake_compiler, model_copy):
    res = cli("compile", model_copy)
    assert res.exit_code == 0, res.stderr
    assert (model_copy.parent / "digits_edgetpu.tflite").is_file()
    assert "fully mapped to the Edge TPU" in res.stdout
    assert "digits_edgetpu.tflite" in res.stdout and "operator" in res.stdout


def test_compile_flags_reach_the_compiler(cli, fake_compiler, model_copy, tmp_path):
    res = cli("compile", model_copy, "-o", tmp_path / "o", "--min-runtime", "13", "--timeout", "30",
              "--search-delegate")
    assert res.exit_code == 0, res.stderr
    argv = fake_compiler.recorded()
    assert argv[argv.index("--min_runtime_version") + 1] == "13"
    assert argv[argv.index("--timeout_sec") + 1] == "30" and "--search_delegate" in argv


def test_compile_segments(cli, fake_compiler, model_copy, tmp_path):
    out = tmp_path / "seg"
    res = cli("compile", model_copy, "-o", out, "--segments", "2", "-f", "json")
    assert res.exit_code == 0, res.stderr
    report = json.loads(res.stdout)
    assert "--num_segments" in fake_compiler.recorded()
    assert [Path(o["model"]).name for o in report["outputs"]] == [
        "digits_segment_0_of_2_edgetpu.tflite", "digits_segment_1_of_2_edgetpu.tflite"]
    assert all(o["exists"] for o in report["outputs"])
    assert len(report["result"]["segments"]) == 2 and report["result"]["total_ops"] == 72


def test_compile_partial_exit_8_with_warning(cli, fake_compiler, model_copy):
    fake_compiler.mode("partial")
    res = cli("compile", model_copy, "-f", "json")
    assert res.exit_code == ExitCode.NOT_MAPPABLE
    report = json.loads(res.stdout)
    assert report["verdict"] == "partially_mapped"
    assert (report["result"]["ops_tpu"], report["result"]["ops_cpu"]) == (264, 3)
    assert "warning: 3 of 267 operation(s) run on the CPU" in res.stderr
    assert "TFLite_Detection_PostProcess" in res.stderr


def test_compile_zero_subgraphs_is_not_mapped(cli, fake_compiler, model_copy):
    fake_compiler.mode("zero")
    res = cli("compile", model_copy)
    assert res.exit_code == ExitCode.NOT_MAPPABLE
    assert "nothing runs on the Edge TPU" in res.stderr


def test_compile_streamed_warning(cli, fake_compiler, model_copy):
    fake_compiler.mode("streamed")
    res = cli("compile", model_copy)
    assert res.exit_code == 0
    assert "streamed from host memory" in res.stderr


def test_compile_success_without_output_file_fails(cli, fake_compiler, model_copy):
    fake_compiler.mode("nooutput")
    res = cli("compile", model_copy)
    assert res.exit_code == ExitCode.COMPILE_FAILED
    assert "did not write" in res.stderr


@pytest.mark.parametrize("mode,exit_code,words", [
    ("not_quantized", 1, ["Model not quantized", "edgeapp convert"]),
    ("not_quantized", 0, ["Model not quantized"]),  # exit 0 but the text says it failed
    ("op_version", 1, ["CONV_2D version 6", "TensorFlow 2.8"]),
    ("internal_error", 1, ["Internal compiler error", "--search-delegate"]),
    ("timeout", 1, ["Compilation timeout", "--timeout"]),
])
def test_compile_failures_exit_9_with_one_line_fix(cli, fake_compiler, model_copy, mode,
                                                   exit_code, words):
    fake_compiler.mode(mode, exit_code)
    res = cli("compile", model_copy, "-f", "json")
    assert res.exit_code == ExitCode.COMPILE_FAILED
    report = json.loads(res.stdout)
    assert report["verdict"] == "failed" and report["returncode"] == exit_code
    errors = [line for line in res.stderr.splitlines() if line.startswith("edgeapp: error:")]
    assert len(errors) == 1
    for w in words:
        assert w in errors[0]


def running(pid: int) -> bool:
    """Whether process `pid` still runs (a zombie, killed and not yet reaped, does not)."""
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return stat_line.rsplit(")", 1)[1].split()[0] != "Z"


def test_compile_timeout_kills_a_hanging_compiler(cli, fake_compiler, model_copy):
    fake_compiler.mode("hang")  # it would sleep 600 s, then compile
    res = cli("compile", model_copy, "--timeout", "1", "-f", "json")
    pid = int(fake_compiler.argv.with_name("hanging.pid").read_text())
    assert not running(pid)  # killed, not waited for nor left behind
    assert res.exit_code == ExitCode.COMPILE_FAILED
    report = json.loads(res.stdout)
    assert report["timed_out"] is True and report["returncode"] is None
    assert "did not finish within 1 s" in res.stderr and "--timeout" in res.stderr


def test_compile_missing_compiler(cli, model_copy, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing there
    monkeypatch.delenv("EDGETPU_COMPILER", raising=False)
    res = cli("compile", model_copy)
    assert res.exit_code == ExitCode.MISSING_DEPENDENCY
    msg = res.stderr.strip()
    assert len(msg.splitlines()) == 1
    assert "edgetpu_compiler not found" in msg and "edgeapp check" in msg
    assert "`edgeapp compiler install`" in msg


def test_compile_compiler_option_and_env(cli, fake_compiler, model_copy, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # not on PATH any more
    res = cli("compile", model_copy, "--compiler", fake_compiler.path)
    assert res.exit_code == 0, res.stderr
    monkeypatch.setenv("EDGETPU_COMPILER", str(fake_compiler.path))
    assert cli("compile", model_copy).exit_code == 0
    monkeypatch.setenv("EDGETPU_COMPILER", str(tmp_path / "nope"))
    res = cli("compile", model_copy)
    assert res.exit_code == ExitCode.MISSING_DEPENDENCY and "$EDGETPU_COMPILER" in res.stderr


def test_find_compiler_order(fake_compiler, tmp_path):
    assert C.find_compiler().path == str(fake_compiler.path)  # PATH
    other = tmp_path / "other_compiler"
    shutil.copy(fake_compiler.path, other)
    assert C.find_compiler(env={"EDGETPU_COMPILER": str(other), "PATH": ""}).path == str(other)
    assert C.find_compiler(fake_compiler.path, env={"EDGETPU_COMPILER": str(other)}).path == \
        str(fake_compiler.path)
    with pytest.raises(MissingDependency):
        C.find_compiler(env={"PATH": str(tmp_path / "empty"), "EDGEAPP_DATA_DIR": str(tmp_path / "data")})


def test_compile_rejects_invalid_model(cli, fake_compiler, tmp_path):
    bad = tmp_path / "bad.tflite"
    bad.write_text("hello")
    res = cli("compile", bad)
    assert res.exit_code == ExitCode.MODEL_INVALID
    assert not fake_compiler.argv.exists()  # the compiler never ran


@pytest.mark.shared
def test_compile_rejects_compiled_model(cli, fake_compiler):
    res = cli("compile", ROOT.parent / "shared" / "coral" / "mobilenet_v1_0.25_128_quant_edgetpu.tflite")
    assert res.exit_code == ExitCode.USAGE and "already compiled" in res.stderr


# ----------------------------------------------------------------------------- convert --compile


def _report(path: Path) -> dict:
    return {"model": str(path), "size_bytes": path.stat().st_size, "io": "uint8",
            "input_shape": [1, 32, 32, 1], "sidecar": str(path.with_suffix(".json")),
            "calibration_samples": 1, "agreement": 1.0, "samples": 1, "float_accuracy": None,
            "int8_accuracy": None, "ops": {}}


def test_convert_compile_step(fake_compiler, model_copy, capsys):
    from edgeapp.cli.convert import finish_report

    report = _report(model_copy)
    assert finish_report(model_copy, report, "json", compile_=True) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["edgetpu_check"]["verdict"] == "fully_mapped"
    assert out["compile"]["verdict"] == "fully_mapped"
    assert (model_copy.parent / "digits_edgetpu.tflite").is_file()
    fake_compiler.mode("partial")
    assert finish_report(model_copy, _report(model_copy), "table", compile_=True) == \
        ExitCode.NOT_MAPPABLE
    text = capsys.readouterr().out
    assert "Edge TPU check" in text and "partially mapped" in text


def test_convert_compile_without_compiler_is_exit_7_with_the_install_line(model_copy, tmp_path, monkeypatch,
                                                                         capsys):
    """The user asked for a compiled model: a script must be able to tell that nothing was
    compiled (the converted model and its report are still there)."""
    from edgeapp.cli.convert import finish_report

    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("EDGEAPP_DATA_DIR", str(tmp_path / "data"))  # no compiler installed by edgeapp
    monkeypatch.delenv("EDGETPU_COMPILER", raising=False)
    report = _report(model_copy)
    assert finish_report(model_copy, report, "json", compile_=True) == ExitCode.MISSING_DEPENDENCY
    captured = capsys.readouterr()
    (line,) = [ln for ln in captured.err.splitlines() if ln.startswith("edgeapp: error:")]
    assert f"--compile: {model_copy} was converted but not compiled: edgetpu_compiler not found" in line
    assert "`edgeapp compiler install`" in line
    assert "skipped" in json.loads(captured.out)["compile"]


def test_output_folder_that_is_a_file_is_a_usage_error(cli, tiny_model, tmp_path):
    target = tmp_path / "not_a_folder"
    target.write_text("x")
    r = cli("compile", tiny_model, "-o", target, "--compiler", "/bin/true")
    assert r.exit_code == 2 and "is a file" in r.stderr
