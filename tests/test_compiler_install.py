"""`edgeapp compiler install|show|remove` and the one compiler lookup, end to end.

Google's files come from a loopback HTTP server ($EDGEAPP_COMPILER_URL); what a user already
has is the stand-in compiler of tests/compiler_standin.py (a C program laid out as Google's
folder with this host's own loader and libc), packed as Coral's .deb, a .tar.gz or a folder.
QEMU and Docker are stand-ins on PATH that record their argv and run the command; the real
QEMU path runs in scripts/arm64_chroot.sh (tests/test_compiler_arm64.py).
"""

from __future__ import annotations

import http.server
import json
import os
import re
import shutil
import socket
import sys
import threading
from pathlib import Path

import compiler_standin as standin
import pytest

from edgeapp.core.edgetpu import compiler_files as CF
from edgeapp.core.registry import git_blob_sha1
from edgeapp.errors import ExitCode
from edgeapp.hw.compiler_host import CompilerRunner, binfmt_x86_64, choose_runner

ROOT = Path(__file__).resolve().parent.parent
DIGITS = ROOT / "models" / "digits_int8.tflite"

# The pins as the issue quotes them from `git ls-tree -r -l 3b625cd compiler/x86_64`.
ISSUE_PINS = {
    "edgetpu_compiler": "2b4f6e538fbd4edaddf99b80433f7e66cee4691e",
    "edgetpu_compiler_bin/edgetpu_compiler": "ee1bd4ac60819666cb711c176a4cc2fbc1697503",
    "edgetpu_compiler_bin/ld-linux-x86-64.so.2": "6586b459f7be1abefa0fcde92892829d6ab7d49c",
    "edgetpu_compiler_bin/libc++.so.1": "5464d59b1972fdb014fd7e3e967b1585929b7ea7",
    "edgetpu_compiler_bin/libc++abi.so.1": "a02ced52ee3436af97cb16bda7376da65496210b",
    "edgetpu_compiler_bin/libc.so.6": "305b599a6afe2e8bf2f8a7f7986a97323bf3aa73",
    "edgetpu_compiler_bin/libdl.so.2": "1f6d98946211ce92a08ef23c4885f11655e230f1",
    "edgetpu_compiler_bin/libm.so.6": "6b4fd5586651c4da3361b22b6652abcb2b90eb50",
    "edgetpu_compiler_bin/libpthread.so.0": "6511291b2de9c7dbe786f55d1a49932b07f14f2f",
    "edgetpu_compiler_bin/libresolv.so.2": "36a157d5f56bce77ff5fe4d3ea3912ee42a6459c",
    "edgetpu_compiler_bin/librt.so.1": "c710eed5591db870a1acaf9582afa32117d18b49",
}


@pytest.fixture()
def data(tmp_path, monkeypatch) -> Path:
    """The user's data folder for this test; no edgetpu_compiler on PATH but the system's tools."""
    folder = tmp_path / "data"
    monkeypatch.setenv("EDGEAPP_DATA_DIR", str(folder))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.delenv("EDGETPU_COMPILER", raising=False)
    monkeypatch.delenv("EDGEAPP_COMPILER_RUN", raising=False)
    return folder


@pytest.fixture(scope="module")
def bundles(tmp_path_factory) -> dict:
    """Stand-in compilers 16.0 (as Coral's .deb) and 14.1 (as a .tar.gz and a folder)."""
    why = standin.why_not()
    if why:
        pytest.skip(why)
    base = tmp_path_factory.mktemp("standin")
    b16 = standin.build_bundle(base / "b16")
    b14 = standin.build_bundle(base / "b14", version="14.1.317412892")
    return {"deb": standin.make_deb(b16, base / "edgetpu-compiler_16.0_amd64.deb"),
            "tgz": standin.make_tar_gz(b14, base / "edgetpu_compiler-14.1.tar.gz"),
            "folder16": b16, "folder14": b14}


@pytest.fixture()
def model(tmp_path) -> Path:
    d = tmp_path / "models"
    d.mkdir()
    shutil.copy(DIGITS, d / "digits.tflite")
    return d / "digits.tflite"


def test_the_pins_are_the_published_tree():
    pins = {f.path: f.git_blob_sha1 for f in CF.PINNED}
    assert {k: pins[k] for k in ISSUE_PINS} == ISSUE_PINS
    assert {"edgetpu_compiler_bin/LICENSES", "edgetpu_compiler_bin/NOTICE"} <= set(pins)
    assert CF.COMMIT == "3b625cddfe8886f15978221a02cda2e52044b24c"
    assert CF.DEFAULT_URL.startswith("https://raw.githubusercontent.com/google-coral/edgetpu/" + CF.COMMIT)
    assert git_blob_sha1(standin.WRAPPER.encode()) == pins["edgetpu_compiler"]  # Google's wrapper, verbatim


class Served:
    """A loopback HTTP server for a folder laid out as compiler/x86_64."""

    def __init__(self, folder: Path) -> None:
        handler = lambda *a, **k: http.server.SimpleHTTPRequestHandler(*a, directory=str(folder), **k)  # noqa: E731
        http.server.SimpleHTTPRequestHandler.log_message = lambda *a: None
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/compiler/x86_64/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_files_that_do_not_match_their_pins_exit_13_and_nothing_is_installed(cli, data, tmp_path, monkeypatch):
    tree = tmp_path / "mirror" / "compiler" / "x86_64"
    (tree / "edgetpu_compiler_bin").mkdir(parents=True)
    (tree / "edgetpu_compiler").write_text(standin.WRAPPER)  # the right bytes: verifies
    wrong = b"\x7fELF not Google's compiler\n"
    (tree / "edgetpu_compiler_bin" / "edgetpu_compiler").write_bytes(wrong)
    server = Served(tmp_path / "mirror")
    try:
        monkeypatch.setenv("EDGEAPP_COMPILER_URL", server.url)
        res = cli("compiler", "install")
    finally:
        server.close()
    assert res.exit_code == ExitCode.VERIFY_FAILED, res.stderr
    line = res.stderr.strip().splitlines()[-1]
    assert "edgetpu_compiler_bin/edgetpu_compiler" in line
    assert git_blob_sha1(wrong) in line and "ee1bd4ac60819666cb711c176a4cc2fbc1697503" in line
    assert [p.name for p in (data / "compiler").iterdir()] == []  # the download is gone too
    shown = json.loads(cli("compiler", "show", "--format", "json").stdout)
    assert shown["installed"] == [] and shown["compile_uses"] is None


def test_a_missing_file_on_the_mirror_is_a_download_error_and_resumable(cli, data, tmp_path, monkeypatch):
    (tmp_path / "mirror" / "compiler" / "x86_64").mkdir(parents=True)
    (tmp_path / "mirror" / "compiler" / "x86_64" / "edgetpu_compiler").write_text(standin.WRAPPER)
    server = Served(tmp_path / "mirror")
    try:
        monkeypatch.setenv("EDGEAPP_COMPILER_URL", server.url)
        res = cli("compiler", "install")
    finally:
        server.close()
    assert res.exit_code == ExitCode.DOWNLOAD_FAILED and "HTTP 404" in res.stderr
    kept = list((data / "compiler").glob(".download-*/edgetpu_compiler.part"))
    assert len(kept) == 1 and kept[0].read_text() == standin.WRAPPER  # verified bytes kept for the next run
    assert json.loads(cli("compiler", "show", "--format", "json").stdout)["installed"] == []


def test_no_network_names_the_compilers_own_mirror_variable(cli, data, monkeypatch):
    with socket.socket() as s:  # a port nobody listens on: connection refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("EDGEAPP_COMPILER_URL", f"http://127.0.0.1:{port}/")
    res = cli("compiler", "install")
    assert res.exit_code == ExitCode.DOWNLOAD_FAILED, res.stderr
    line = res.stderr.strip().splitlines()[-1]
    assert "connection refused" in line and "EDGEAPP_COMPILER_URL" in line and "docs/compiler.md" in line
    assert "EDGEAPP_MODELS_URL" not in line  # the models' mirror cannot serve the compiler


def test_corals_deb_installs_into_the_data_folder_and_compile_uses_it(cli, data, bundles, model):
    res = cli("compiler", "install", "--from", bundles["deb"], "--format", "json")
    assert res.exit_code == 0, res.stderr
    record = json.loads(res.stdout)
    assert record["version"] == "16.0.384591198" and record["version_from"] == "--version"
    assert Path(record["path"]) == data / "compiler" / "16.0.384591198"
    assert record["source"]["kind"] == "deb" and len(record["source"]["sha256"]) == 64
    assert "Stand-in NOTICE" in res.stderr and "LICENSES" in res.stderr  # shown before first use
    out = cli("compile", model, "--format", "json")
    assert out.exit_code == 0, out.stderr
    report = json.loads(out.stdout)
    assert (report["compiler_source"], report["compiler_version"], report["runtime_needed"]) == \
        ("installed", "16.0.384591198", 14)
    assert report["command"][:2] == [str(data / "compiler/16.0.384591198/edgetpu_compiler_bin/"
                                         "ld-linux-x86-64.so.2"), "--library-path"]
    assert Path(report["outputs"][0]["model"]).read_bytes() == model.read_bytes()
    table = cli("compile", model)
    assert "needs runtime        Edge TPU runtime 14 (libedgetpu 16.0 or newer)" in table.stdout


def test_doctor_and_show_report_the_installed_compiler(cli, data, bundles, tmp_path):
    assert cli("compiler", "install", "--from", bundles["deb"]).exit_code == 0
    doctor = json.loads(cli("doctor", "--format", "json").stdout)
    (check,) = [c for c in doctor["checks"] if c["name"] == "edgetpu_compiler"]
    assert check["status"] == "ok" and check["detail"].startswith("16.0.384591198 at ")
    assert "(installed)" in check["detail"]
    shown = cli("compiler", "show")
    assert re.search(r"^runs\s+natively \(x86-64 Linux\)$", shown.stdout, re.M)
    assert "compile uses: " + str(data / "compiler" / "16.0.384591198") + " (installed)" in shown.stdout


def test_newest_version_is_used_and_remove_falls_back(cli, data, bundles, model):
    assert cli("compiler", "install", "--from", bundles["tgz"]).exit_code == 0
    assert cli("compiler", "install", "--from", bundles["folder16"]).exit_code == 0
    shown = json.loads(cli("compiler", "show", "--format", "json").stdout)
    assert [c["version"] for c in shown["installed"]] == ["16.0.384591198", "14.1.317412892"]
    assert shown["installed"][1]["source"]["kind"] == "tar"
    assert cli("compiler", "remove", "16.0.384591198").exit_code == 0
    report = json.loads(cli("compile", model, "--format", "json").stdout)
    assert (report["compiler_version"], report["runtime_needed"]) == ("14.1.317412892", 13)
    check = json.loads(cli("check", model, "--format", "json").stdout)
    assert check["summary"]["compiler_version"] == 14 and check["summary"]["runtime_needed"] == 13
    res = cli("compiler", "remove", "16.0.384591198")
    assert res.exit_code == ExitCode.USAGE and "14.1.317412892" in res.stderr


def test_a_folder_that_is_not_a_compiler_is_refused(cli, data, tmp_path):
    (tmp_path / "empty").mkdir()
    res = cli("compiler", "install", "--from", tmp_path / "empty")
    assert res.exit_code == ExitCode.USAGE and "edgetpu_compiler_bin" in res.stderr
    (tmp_path / "notes.txt").write_text("hello")
    res = cli("compiler", "install", "--from", tmp_path / "notes.txt")
    assert res.exit_code == ExitCode.USAGE and "not a .deb" in res.stderr
    assert not any(p for p in (data / "compiler").iterdir())  # no staging folder left behind


def _recorder(path: Path, body: str) -> Path:
    """A stand-in tool on PATH: records its argv as JSON lines, then runs `body` (Python)."""
    path.write_text(f"#!{sys.executable}\nimport json, os, sys\n"
                    f"with open(os.environ['STANDIN_LOG'], 'a') as f:\n"
                    f"    f.write(json.dumps(sys.argv) + '\\n')\n{body}")
    path.chmod(0o755)
    return path


QEMU = "os.execv(sys.argv[1], sys.argv[1:])\n"
# docker run ... -v HOST:CONTAINER[:ro] ... IMAGE CMD...: run CMD here with container paths mapped back
DOCKER = """args = sys.argv[2:]
mounts, i = [], 0
while not args[i].startswith('debian:'):
    if args[i] == '-v':
        host, inside = args[i + 1].split(':')[:2]
        mounts.append((inside, host))
        i += 2
    elif args[i] in ('--platform', '--user', '-w'):
        i += 2
    else:
        i += 1
def back(a):
    for inside, host in mounts:
        if a.startswith(inside):
            return host + a[len(inside):]
    return a
cmd = [back(a) for a in args[i + 1:]]
os.execv(cmd[0], cmd)
"""


def test_qemu_on_path_runs_the_installed_files(cli, data, bundles, model, tmp_path, monkeypatch):
    assert cli("compiler", "install", "--from", bundles["folder16"]).exit_code == 0
    tools = tmp_path / "tools"
    tools.mkdir()
    qemu = _recorder(tools / "qemu-x86_64", QEMU)
    monkeypatch.setenv("STANDIN_LOG", str(tmp_path / "argv.jsonl"))
    monkeypatch.setenv("PATH", f"{tools}:/usr/bin:/bin")
    monkeypatch.setenv("EDGEAPP_COMPILER_RUN", "qemu")  # what an ARM Linux machine chooses itself
    res = cli("compile", model, "--format", "json")
    assert res.exit_code == 0, res.stderr
    report = json.loads(res.stdout)
    (argv,) = [json.loads(ln) for ln in (tmp_path / "argv.jsonl").read_text().splitlines()]
    bin_dir = data / "compiler" / "16.0.384591198" / "edgetpu_compiler_bin"
    assert argv[:4] == [str(qemu), str(bin_dir / "ld-linux-x86-64.so.2"), "--library-path", str(bin_dir)]
    assert report["runs"] == "qemu" and report["command"][0] == str(qemu)
    assert argv[argv.index("--timeout_sec") + 1] == "900"  # the default, scaled for emulation


def test_docker_runs_the_linux_files_in_an_amd64_container(cli, data, bundles, model, tmp_path, monkeypatch):
    assert cli("compiler", "install", "--from", bundles["deb"]).exit_code == 0
    tools = tmp_path / "tools"
    tools.mkdir()
    docker = _recorder(tools / "docker", DOCKER)
    monkeypatch.setenv("STANDIN_LOG", str(tmp_path / "argv.jsonl"))
    monkeypatch.setenv("PATH", f"{tools}:/usr/bin:/bin")
    monkeypatch.setenv("EDGEAPP_COMPILER_RUN", "docker")  # what macOS chooses itself
    out = tmp_path / "compiled"
    res = cli("compile", model, "-o", out)
    assert res.exit_code == 0, res.stderr
    (argv,) = [json.loads(ln) for ln in (tmp_path / "argv.jsonl").read_text().splitlines()]
    bin_dir = data / "compiler" / "16.0.384591198" / "edgetpu_compiler_bin"
    assert argv[:5] == [str(docker), "run", "--rm", "--platform", "linux/amd64"]
    assert f"{bin_dir}:/opt/edgetpu_compiler_bin:ro" in argv
    assert f"{model.parent}:{model.parent}" in argv and f"{out}:{out}" in argv
    assert argv[argv.index("debian:bookworm-slim") + 1] == "/opt/edgetpu_compiler_bin/ld-linux-x86-64.so.2"
    assert (out / "digits_edgetpu.tflite").is_file() and "run through docker" in res.stdout


def test_arm_linux_without_qemu_names_the_install_line(cli, data, bundles, model, tmp_path, monkeypatch):
    assert cli("compiler", "install", "--from", bundles["deb"]).exit_code == 0
    root = tmp_path / "pi"
    (root / "etc").mkdir(parents=True)
    (root / "etc/os-release").write_text('PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\n'
                                         'VERSION_CODENAME=bookworm\n')
    (root / "proc/sys/fs/binfmt_misc").mkdir(parents=True)
    monkeypatch.setenv("EDGEAPP_SYSROOT", str(root))
    monkeypatch.setenv("EDGEAPP_COMPILER_RUN", "qemu")
    monkeypatch.setenv("PATH", str(tmp_path / "no-tools"))  # no qemu-x86_64 anywhere
    res = cli("compile", model)
    assert res.exit_code == ExitCode.MISSING_DEPENDENCY
    assert len(res.stderr.strip().splitlines()) == 1
    assert "`sudo apt-get install qemu-user`" in res.stderr and "apt repositor" not in res.stderr
    res = cli("compile", model, "--format", "json")
    assert json.loads(res.stdout)["exit_code"] == ExitCode.MISSING_DEPENDENCY


def test_a_binfmt_registration_for_x86_64_counts_as_an_emulator(tmp_path):
    reg = tmp_path / "proc/sys/fs/binfmt_misc"
    reg.mkdir(parents=True)
    (reg / "status").write_text("enabled\n")
    (reg / "qemu-aarch64").write_text("enabled\ninterpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P\n"
                                      "flags: PF\noffset 0\nmagic 7f454c460201010000000000000000000200b700\n"
                                      "mask ffffffffffffff00fffffffffffffffffeffffff\n")
    assert binfmt_x86_64(tmp_path) is None
    env = {"PATH": str(tmp_path / "nothing")}
    with pytest.raises(Exception, match="not installed"):
        choose_runner(env, tmp_path, system="Linux", machine="aarch64")
    (reg / "qemu-x86_64").write_text("enabled\ninterpreter /usr/bin/qemu-x86_64\nflags: OCF\noffset 0\n"
                                     "magic 7f454c4602010100000000000000000002003e00\n"
                                     "mask fffffffffffefe00fffffffffffffffffeffffff\n")
    assert binfmt_x86_64(tmp_path) == "qemu-x86_64"
    assert choose_runner(env, tmp_path, system="Linux", machine="aarch64") == \
        CompilerRunner("binfmt", None, "registration qemu-x86_64")
    assert choose_runner(env, tmp_path, system="Linux", machine="x86_64").mode == "native"
    with pytest.raises(Exception, match="Docker Desktop"):
        choose_runner(env, tmp_path, system="Darwin", machine="arm64")


def test_compile_without_a_compiler_writes_a_json_error(cli, data, model):
    res = cli("compile", model, "--format", "json")
    assert res.exit_code == ExitCode.MISSING_DEPENDENCY
    error = json.loads(res.stdout)
    assert error["exit_code"] == 7 and "edgeapp compiler install" in error["error"]
    for text in (res.stdout, res.stderr, cli("compile", "--help").stdout):
        assert "apt" not in text.lower().replace("adapt", "")


def test_a_compiler_that_prints_nothing_is_not_promised_last_lines(cli, data, model):
    res = cli("compile", model, "--compiler", "/bin/false")
    assert res.exit_code == ExitCode.COMPILE_FAILED
    assert "last lines follow" not in res.stderr and "printed nothing" in res.stderr


def test_the_package_names_no_coral_apt_source():
    """The project's own rule, as its before-stop hook reads it: outside comments."""
    bad = re.compile(r"packages\.cloud\.google\.com|coral-edgetpu-stable|coral'?s apt repositor", re.I)
    found = []
    for path in (ROOT / "edgeapp").rglob("*.py"):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if bad.search(line.split("#", 1)[0]):
                found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert found == []


@pytest.mark.skipif(not os.environ.get("EDGETPU_COMPILER") and not shutil.which("edgetpu_compiler"),
                    reason="no real edgetpu_compiler here ($EDGETPU_COMPILER or PATH): "
                           "`edgeapp compiler install` on an x86-64 Linux machine with network")
def test_a_real_compiler_reports_its_version_and_runtime(cli, model):
    report = json.loads(cli("compile", model, "--format", "json").stdout)
    assert report["compiler_version"] and report["runtime_needed"] in (13, 14)
