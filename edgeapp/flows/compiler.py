"""`edgeapp compiler install|show|remove` as use cases: get Google's Edge TPU compiler into the
user's data folder (verified, or from a package the user has), say how it runs here, remove it.

The compiler `compile` runs is found by hw/compiler.find_compiler (--compiler,
$EDGETPU_COMPILER, PATH, then the newest installed here); `show` reports that choice too.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Tuple

from typing_extensions import TypedDict

from edgeapp.core.edgetpu import compiler_files as CF
from edgeapp.errors import EdgeappError, MissingDependency
from edgeapp.hw import compiler_install as CI
from edgeapp.hw.compiler import COMPILER_NAME, Compiler, find_compiler, read_version
from edgeapp.hw.compiler_host import bundle_at, choose_runner
from edgeapp.hw.download import Reporter


class InstalledCompiler(TypedDict):
    """One installed compiler as `compiler show` prints it."""
    version: Optional[str]
    version_from: Optional[str]
    path: str
    runs: str  # how it runs here, or why it cannot
    runnable: bool
    source: CI.InstallSource
    verification: Optional[str]
    sha256: Dict[str, Optional[str]]  # the compiler binary -> its sha256
    files: int
    installed_at: Optional[str]
    notices: List[str]


class CompilerUsed(TypedDict):
    path: str
    source: str
    version: Optional[str]


class CompilerShow(TypedDict, total=False):
    """`compiler show`: every installed version (newest first) and what `compile` runs now
    (None, and why in `missing`, when none is found)."""
    folder: str
    installed: List[InstalledCompiler]
    compile_uses: Optional[CompilerUsed]
    missing: str


def _version_of(env: Mapping[str, str]):
    """Run a staged compiler for its version: (version, "--version") or (None, why not)."""
    def version_of(folder: Path) -> Tuple[Optional[str], str]:
        try:
            return read_version(Compiler(str(folder), "staged", bundle_at(folder)), env), "--version"
        except MissingDependency as e:
            return None, f"not run here: {e}"
    return version_of


def install(from_path: Optional[Path] = None, env: Optional[Mapping[str, str]] = None,
            reporter: Optional[Reporter] = None) -> CI.InstallRecord:
    """Install Google's pinned files (verified by git blob id), or the compiler in `from_path`."""
    env = os.environ if env is None else env
    if from_path is not None:
        return CI.install_from(from_path, env, _version_of(env))
    return CI.fetch_google(env, reporter or Reporter(), _version_of(env))


def notices(record: CI.InstallRecord) -> list[Path]:
    """The NOTICE and LICENSES files of an install (shown before first use)."""
    return [Path(record["path"]) / n for n in record.get("notices", [])]


def describe_install(record: CI.InstallRecord, env: Mapping[str, str]) -> InstalledCompiler:
    """One installed compiler as `show` prints it: version, path, how it runs here, source,
    verification, and the sha256 of what was installed."""
    try:
        runs = choose_runner(env).describe()
        runnable = True
    except EdgeappError as e:
        runs, runnable = f"cannot run here: {e}", False
    files = record.get("files", {})
    main = f"{CF.BIN}/{CF.BINARY}"
    return {"version": record.get("version"), "version_from": record.get("version_from"),
            "path": record["path"], "runs": runs, "runnable": runnable,
            "source": record.get("source", {}), "verification": record.get("verification"),
            "sha256": {main: files.get(main)}, "files": len(files),
            "installed_at": record.get("installed_at"),
            "notices": [str(p) for p in notices(record)]}


def show(env: Optional[Mapping[str, str]] = None) -> CompilerShow:
    """Every installed version (newest first, the one used) and what `compile` would run now."""
    env = os.environ if env is None else env
    records = CI.installed(env)
    report: CompilerShow = {"folder": str(CI.compilers_dir(env)),
                            "installed": [describe_install(r, env) for r in records]}
    try:
        found = find_compiler(env=env)
        report["compile_uses"] = {"path": found.path, "source": found.source,
                                  "version": found.version}
    except EdgeappError as e:
        report["compile_uses"] = None
        report["missing"] = str(e)
    return report


def remove(version: Optional[str], env: Optional[Mapping[str, str]] = None) -> list[str]:
    return CI.remove_installed(version, os.environ if env is None else env)


__all__ = ["COMPILER_NAME", "describe_install", "install", "notices", "remove", "show"]
