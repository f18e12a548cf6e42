"""`edgeapp compile` on ARM Linux for real: scripts/arm64_chroot.sh runs it in an arm64 Debian
bookworm chroot, through Debian's qemu-user, with the stand-in x86-64 compiler installed from a
Coral-like .deb; and without QEMU, where it must exit 7 naming the install line.

Needs root and the cached chroot (the script builds it in about 10 minutes the first time).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "arm64_chroot.sh"
CHROOT = Path(os.environ.get("EDGEAPP_ARM64_CHROOT", "/var/cache/edgeapp/bookworm-arm64"))
BUILD = "sudo scripts/arm64_chroot.sh (builds the arm64 chroot once, then runs this scenario)"


@pytest.mark.skipif(not (CHROOT / "opt/edgeapp-venv/bin/typer").exists() or os.geteuid() != 0,
                    reason=f"no arm64 chroot at {CHROOT} (or not root): {BUILD}")
def test_compile_in_the_arm64_chroot_runs_through_qemu_and_without_it_names_the_install_line(tmp_path):
    report = tmp_path / "report.txt"
    proc = subprocess.run(["bash", str(SCRIPT), "--report", str(report)], capture_output=True,
                          text=True, timeout=1800, env={**os.environ, "EDGEAPP_STANDIN_WORK": "2"})
    facts = dict(ln.split("=", 1) for ln in report.read_text().splitlines() if "=" in ln)
    assert facts.get("machine") == "aarch64", proc.stderr[-2000:]
    assert facts["compile_without_qemu_exit"] == "7"
    assert "sudo apt-get install qemu-user" in facts["compile_without_qemu_says"]
    assert facts["compile_with_qemu_exit"] == "0" and "QEMU" in facts["show_runs"]
    assert facts["expectations_held"] == "1" and proc.returncode == 0
