"""Installing Google's Edge TPU compiler into the user's data folder, one folder per version.

Two sources: Google's own files (core/edgetpu/compiler_files.py: fetched by exact commit with the
resumable downloader, each verified against its pinned git blob id; one mismatch removes the
whole download), or what the user already has (`--from`: Coral's edgetpu-compiler_*.deb read as
an `ar` archive + tar in Python, its .tar.gz, or an unpacked folder). Whatever the source, the
files are staged in a hidden folder beside the installed ones and renamed into place only when
complete, with `install.json` (version, source, verification, sha256 of every file) written
last: a folder without it is never used, so nothing half-installed runs.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import stat
import tarfile
import tempfile
from pathlib import Path
from typing import BinaryIO, Callable, Dict, List, Mapping, Optional, Tuple
from urllib.parse import quote

from typing_extensions import TypedDict

from edgeapp.core.edgetpu import compiler_files as CF
from edgeapp.core.registry import digests, file_sha256
from edgeapp.core.userdirs import data_dir
from edgeapp.errors import MissingDependency, UsageError, VerificationError
from edgeapp.hw.compiler_host import bundle_at
from edgeapp.hw.download import Reporter, download, timeout_from_env, write_error

RECORD = "install.json"


class InstallSource(TypedDict, total=False):
    """Where an installed compiler came from: Google's pinned files (url, repository, commit,
    folder) or the user's own package or folder (path, and its sha256 for a file)."""
    kind: str  # google, deb, tar, folder
    url: str
    repository: str
    commit: str
    folder: str
    path: str
    sha256: str


class InstallRecord(TypedDict, total=False):
    """An install's install.json (and, read back, the folder it is in: `path`)."""
    edgeapp_compiler: int  # the record's format
    version: str
    version_from: str  # how the version was read
    source: InstallSource
    verification: str
    files: Dict[str, str]  # relative path -> sha256
    notices: List[str]
    installed_at: str  # ISO 8601, UTC
    path: str
AR_MAGIC = b"!<arch>\n"


def compilers_dir(env: Optional[Mapping[str, str]] = None) -> Path:
    return data_dir(os.environ if env is None else env) / "compiler"


def installed(env: Optional[Mapping[str, str]] = None) -> List[InstallRecord]:
    """Every complete install (a version folder with its install.json), newest first."""
    base = compilers_dir(env)
    found = []
    for d in sorted(base.iterdir()) if base.is_dir() else []:
        if d.name.startswith(".") or not d.is_dir():
            continue
        try:
            record = json.loads((d / RECORD).read_text())
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and bundle_at(d) is not None:
            record["path"] = str(d)
            found.append(record)
    return sorted(found, key=lambda r: CF.version_key(str(r.get("version", ""))), reverse=True)


def newest_installed(env: Optional[Mapping[str, str]] = None) -> Optional[InstallRecord]:
    found = installed(env)
    return found[0] if found else None


def remove_installed(version: Optional[str], env: Optional[Mapping[str, str]] = None) -> List[str]:
    """Remove one installed version (all when None); the folders removed."""
    records = installed(env)
    chosen = [r for r in records if version is None or r.get("version") == version]
    if version is not None and not chosen:
        have = ", ".join(str(r.get("version")) for r in records) or "none"
        raise UsageError(f"compiler version {version} is not installed (installed: {have})")
    for r in chosen:
        shutil.rmtree(r["path"], ignore_errors=True)
    return [r["path"] for r in chosen]


# ----------------------------------------------------------------------------- Google's files


def source_url(env: Mapping[str, str]) -> str:
    base = env.get(CF.URL_ENV) or CF.DEFAULT_URL
    return base if base.endswith("/") else base + "/"


def fetch_google(env: Mapping[str, str], rep: Reporter,
                 version_of: Callable[[Path], Tuple[Optional[str], str]]) -> InstallRecord:
    """Download every pinned file, verify each by its git blob id, install. `version_of(folder)`
    runs the staged compiler: (version or None, how it was read or why not)."""
    base = source_url(env)
    root = compilers_dir(env)
    parts = root / f".download-{CF.COMMIT[:12]}"  # kept across runs: a cut download resumes
    timeout = timeout_from_env(env)
    try:
        parts.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise write_error(parts, e) from None
    for ref in CF.PINNED:
        part = parts / (ref.path + ".part")
        part.parent.mkdir(parents=True, exist_ok=True)
        url = base + quote(ref.path, safe="/")
        download(url, part, ref.path, ref.size, rep, timeout, mirror=(CF.URL_ENV, "docs/compiler.md"))
        _, _, got = digests(part)
        if got != ref.git_blob_sha1:
            shutil.rmtree(parts, ignore_errors=True)
            raise VerificationError(
                f"{ref.path} from {url} has git blob id {got}, not the pinned "
                f"{ref.git_blob_sha1}: the whole download was removed and nothing was installed")
    staging = _staging(root)
    try:
        for ref in CF.PINNED:
            target = staging / ref.path
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(parts / (ref.path + ".part"), target)
        _make_runnable(staging / CF.BIN)
        version, how = version_of(staging)
        source: InstallSource = {"kind": "google", "url": base, "repository": CF.REPOSITORY, "commit": CF.COMMIT,
                                 "folder": CF.FOLDER}
        verification = (f"git blob ids of all {len(CF.PINNED)} files match the ones pinned in "
                        f"edgeapp (commit {CF.COMMIT[:12]})")
        record = _finish(staging, root, version or CF.PINNED_VERSION,
                         how if version else f"pinned ({how})", source, verification)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    shutil.rmtree(parts, ignore_errors=True)
    return record


# ----------------------------------------------------------------------------- what the user has


def install_from(path: Path, env: Mapping[str, str],
                 version_of: Callable[[Path], Tuple[Optional[str], str]]) -> InstallRecord:
    """Install from Coral's .deb, its .tar.gz, or an unpacked folder."""
    path = Path(os.path.expanduser(str(path)))
    if not path.exists():
        raise UsageError(f"--from {path}: no such file or folder")
    root = compilers_dir(env)
    staging = _staging(root)
    try:
        kind, package_version = _unpack(path, staging / CF.BIN)
        if bundle_at(staging) is None:
            raise UsageError(f"--from {path}: no {CF.BIN}/{CF.BINARY} with its loader {CF.LOADER} "
                             f"inside (Coral's edgetpu-compiler package has them under usr/bin/)")
        _make_runnable(staging / CF.BIN)
        version, how = version_of(staging)
        if version is None and package_version:
            version, how = package_version, f"the package's control file ({how})"
        if version is None:
            raise MissingDependency(f"cannot read the version of the compiler in {path}: {how}")
        source: InstallSource = {"kind": kind, "path": str(path.resolve())}
        if path.is_file():
            source["sha256"] = file_sha256(path)
        record = _finish(staging, root, version, how, source,
                         "none by edgeapp (your own copy): the sha256 of every installed file is "
                         "recorded")
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return record


def _unpack(path: Path, dest: Path) -> Tuple[str, Optional[str]]:
    """(kind, version from a .deb's control file) after copying the compiler files to `dest`."""
    dest.mkdir(parents=True, exist_ok=True)
    if path.is_dir():
        bundle = bundle_at(path)
        if bundle is None:
            raise UsageError(f"--from {path}: a folder without {CF.BIN}/{CF.BINARY} and its loader")
        for f in bundle.bin_dir.iterdir():
            if f.is_file():
                shutil.copy2(f, dest / f.name)
        return "folder", None
    with open(path, "rb") as fh:
        head = fh.read(len(AR_MAGIC))
    if head == AR_MAGIC:
        return "deb", _unpack_deb(path, dest)
    if tarfile.is_tarfile(str(path)):
        with tarfile.open(path, "r:*") as tar:
            _extract(tar, dest)
        return "tar", None
    raise UsageError(f"--from {path}: not a .deb, a .tar.gz or a folder")


def _ar_members(fh: BinaryIO) -> List[Tuple[str, int, int]]:
    """(name, offset, size) of each member of an `ar` archive (a .deb)."""
    fh.seek(len(AR_MAGIC))
    members = []
    while True:
        header = fh.read(60)
        if len(header) < 60:
            return members
        if header[58:60] != b"`\n":
            raise UsageError("not a valid .deb (ar member header)")
        name = header[:16].decode("ascii", "replace").strip().rstrip("/")
        size = int(header[48:58].decode("ascii").strip() or 0)
        members.append((name, fh.tell(), size))
        fh.seek(size + (size % 2), os.SEEK_CUR)


class _Slice:
    """The bytes of one ar member, read as a stream (tarfile's "r|*" mode)."""

    def __init__(self, fh: BinaryIO, offset: int, size: int) -> None:
        fh.seek(offset)
        self.fh, self.left = fh, size

    def read(self, n: int = -1) -> bytes:
        n = self.left if n is None or n < 0 else min(n, self.left)
        data = self.fh.read(n)
        self.left -= len(data)
        return data


def _unpack_deb(path: Path, dest: Path) -> Optional[str]:
    with open(path, "rb") as fh:
        members = {name: (off, size) for name, off, size in _ar_members(fh)}
        data = next((n for n in members if n.startswith("data.tar")), None)
        if data is None:
            raise UsageError(f"--from {path}: a .deb without data.tar")
        if data.endswith(".zst"):
            raise UsageError(f"--from {path}: its data.tar.zst needs zstd: unpack it with "
                             "`dpkg-deb -x FILE.deb DIR` and pass --from DIR/usr/bin")
        try:
            with tarfile.open(fileobj=_Slice(fh, *members[data]), mode="r|*") as tar:  # type: ignore[call-overload]
                _extract(tar, dest)
        except (tarfile.TarError, EOFError, OSError) as e:
            raise UsageError(f"--from {path}: cannot read its {data}: {e}") from None
        control = next((n for n in members if n.startswith("control.tar")), None)
        return _control_version(fh, members[control]) if control else None


def _control_version(fh: BinaryIO, where: Tuple[int, int]) -> Optional[str]:
    try:
        with tarfile.open(fileobj=_Slice(fh, *where), mode="r|*") as tar:  # type: ignore[call-overload]
            for m in tar:
                if m.name.lstrip("./") == "control" and m.isfile():
                    text = tar.extractfile(m).read().decode("utf-8", "replace")  # type: ignore[union-attr]
                    for line in text.splitlines():
                        if line.startswith("Version:"):
                            return line.split(":", 1)[1].strip()
    except (tarfile.TarError, EOFError, OSError):
        return None
    return None


def _extract(tar: tarfile.TarFile, dest: Path) -> None:
    """Copy the members under edgetpu_compiler_bin/ (regular files, and symlinks that stay
    inside it) to `dest`; nothing else in the archive is written anywhere."""
    for m in tar:
        rel = CF.safe_member(m.name)
        if rel is None or "/" in rel:
            continue
        target = dest / rel
        if m.issym():
            link = m.linkname
            if "/" in link.replace("\\", "/") or link in ("", ".", ".."):
                continue
            if target.is_symlink() or target.exists():
                target.unlink()
            os.symlink(link, target)
        elif m.isfile():
            src = tar.extractfile(m)
            if src is None:
                continue
            with open(target, "wb") as out:
                shutil.copyfileobj(src, out)
            os.chmod(target, 0o755 if m.mode & 0o111 else 0o644)


# ----------------------------------------------------------------------------- placing


def _staging(root: Path) -> Path:
    try:
        root.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=".staging-", dir=root))
    except OSError as e:
        raise write_error(root, e) from None


def _make_runnable(bin_dir: Path) -> None:
    """The loader, the binary and the libraries executable (git keeps the binary 0644)."""
    for f in bin_dir.iterdir():
        if f.is_file() and not f.is_symlink() and f.name not in CF.NOTICES:
            f.chmod(f.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def _finish(staging: Path, root: Path, version: str, version_from: str, source: InstallSource,
            verification: str) -> InstallRecord:
    """Write install.json last, then rename the staged folder to its version's name."""
    files = {str(p.relative_to(staging)): file_sha256(p)
             for p in sorted(staging.rglob("*")) if p.is_file() and not p.is_symlink()}
    record: InstallRecord = {"edgeapp_compiler": 1, "version": version, "version_from": version_from,
                             "source": source, "verification": verification, "files": files,
                             "notices": [f"{CF.BIN}/{n}" for n in CF.NOTICES if (staging / CF.BIN / n).is_file()],
                             "installed_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    (staging / RECORD).write_text(json.dumps(record, indent=2))
    target = root / _folder_name(version)
    old = None
    if target.exists():
        old = Path(tempfile.mkdtemp(prefix=".old-", dir=root))
        os.replace(target, old / "replaced")
    os.replace(staging, target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    record["path"] = str(target)
    return record


def _folder_name(version: str) -> str:
    safe = "".join(c if c.isalnum() or c in "._-+" else "_" for c in version)
    return safe.lstrip(".") or "unknown"
