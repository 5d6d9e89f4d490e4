"""Real filesystems for the journal's fault tests, mounted by the test itself (as root):

- :func:`small_tmpfs`: a tmpfs of a few hundred KiB, which a test fills to get ENOSPC;
- :func:`freezable_ext4`: an ext4 image on a loop device, which ``fsfreeze`` can freeze (tmpfs
  cannot be frozen): every write to it blocks until it is thawed.

Each unmounts what it mounted when the test ends (a frozen filesystem is thawed first); a test
is skipped, saying why, where it cannot mount (not root, no loop devices, no mkfs.ext4 or
fsfreeze).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


def _need_root(what: str) -> None:
    if os.geteuid() != 0:
        pytest.skip(f"mounting {what} needs root")


def _unmount(where: Path) -> None:
    if _run("umount", str(where)).returncode != 0:
        _run("umount", "-l", str(where))  # busy: detach now, freed when the last user goes


@contextlib.contextmanager
def small_tmpfs(where: Path, size_kib: int = 512) -> Iterator[Path]:
    """A tmpfs of ``size_kib`` KiB mounted at ``where`` (created)."""
    _need_root("a tmpfs")
    where.mkdir(parents=True, exist_ok=True)
    mounted = _run("mount", "-t", "tmpfs", "-o", f"size={size_kib}k,mode=0755", "tmpfs", str(where))
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        _unmount(where)


def fill(directory: Path, name: str = "filler") -> Path:
    """Write zeros into ``directory/name`` until the filesystem has no space left."""
    path = directory / name
    chunk = b"\0" * 4096
    with open(path, "wb", buffering=0) as f:
        try:
            while True:
                f.write(chunk)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
        with contextlib.suppress(OSError):
            while True:
                f.write(b"\0")  # the last bytes of the last block
    return path


@dataclass(frozen=True)
class Freezable:
    """A mounted filesystem that :meth:`frozen` freezes."""

    mountpoint: Path

    @contextlib.contextmanager
    def frozen(self) -> Iterator[None]:
        """Frozen inside the block (writes to it block), thawed when it ends, whatever
        happens in it."""
        done = _run("fsfreeze", "--freeze", str(self.mountpoint))
        if done.returncode != 0:
            raise RuntimeError(f"fsfreeze --freeze: {done.stderr.strip()}")
        try:
            yield
        finally:
            _run("fsfreeze", "--unfreeze", str(self.mountpoint))


@contextlib.contextmanager
def freezable_ext4(image: Path, where: Path, size_mib: int = 16) -> Iterator[Freezable]:
    """An ext4 filesystem in the file ``image``, mounted at ``where`` through a loop device."""
    _need_root("a loop device")
    for tool in ("mkfs.ext4", "fsfreeze", "losetup"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")
    with open(image, "wb") as f:
        f.truncate(size_mib * 1024 * 1024)
    made = _run("mkfs.ext4", "-q", "-F", str(image))
    if made.returncode != 0:
        pytest.skip(f"mkfs.ext4: {made.stderr.strip()}")
    where.mkdir(parents=True, exist_ok=True)
    mounted = _run("mount", "-o", "loop", str(image), str(where))
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a loop device: {mounted.stderr.strip()}")
    try:
        yield Freezable(where)
    finally:
        _run("fsfreeze", "--unfreeze", str(where))  # in case; fails harmlessly when thawed
        _unmount(where)
        image.unlink(missing_ok=True)
