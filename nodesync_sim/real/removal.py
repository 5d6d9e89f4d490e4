"""Removing what a launcher made, and nothing else.

Every launcher keeps its files in a directory it made fresh (``tempfile.mkdtemp``, or a
``mkdir`` that fails when the directory exists) and removes it when it stops, through
:func:`remove_tree` only, which removes a tree:

- named by an absolute, normalised path below a top-level directory (never ``/``, ``/tmp``,
  ``/usr``), with no symlink on the way: the tree removed is the one the path names;
- inside the fresh directory its owner made (``made``; the tree itself by default);
- once nothing is mounted at or under it any more: what is mounted there is unmounted first
  (deepest first, each mount of a point on which mounts are stacked), then
  ``/proc/self/mountinfo`` is read again and the tree is left alone if a mount is still there.
  ``shutil.rmtree`` does not know mount points: a tree removed while a bind mount of the
  machine's files is still inside it takes those files with it.

Otherwise :class:`RemovalRefused` is raised and nothing is removed. Mounts of another mount
namespace are not seen here: a tree some program mounts into from its own namespace is removed
only once that namespace is gone (:class:`~nodesync_sim.real.node.RealNode` waits for that).
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
from pathlib import Path

_MNT_DETACH = 2
_EINVAL, _ENOENT = 22, 2
#: Unmount rounds before giving up (each round unmounts every mount seen in the previous one).
_UNMOUNT_ROUNDS = 5
_OCTAL_ESCAPE = re.compile(r"\\([0-7]{3})")


class RemovalRefused(RuntimeError):
    """The tree was not removed: removing it could remove something its owner did not make."""


def _decode(field: str) -> str:
    """A path as /proc/self/mountinfo writes it (space, tab, newline, backslash as ``\\ooo``)."""
    return _OCTAL_ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), field)


def mount_points() -> list[str]:
    """Every mount point of this process's mount namespace, once per mount (a point on which
    mounts are stacked appears as often as it is mounted)."""
    with open("/proc/self/mountinfo", encoding="utf-8") as mountinfo:
        return [_decode(line.split()[4]) for line in mountinfo if line.strip()]


def mounts_under(base: Path) -> list[str]:
    """The mounts at ``base`` or under it, deepest first, each mount once."""
    top = str(base).rstrip("/")
    found = [p for p in mount_points() if p == top or p.startswith(top + "/")]
    return sorted(found, key=lambda p: p.count("/"), reverse=True)


def unmount_detach(point: str) -> None:
    """Detach the top mount at ``point`` (``umount2(MNT_DETACH)``); a point that is no mount
    point (any more) or is gone is not an error."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.umount2(point.encode(), _MNT_DETACH) != 0:
        err = ctypes.get_errno()
        if err not in (_EINVAL, _ENOENT):
            raise OSError(err, os.strerror(err), point)


def refusal(path: Path, made: Path) -> str:
    """Why :func:`remove_tree` would refuse ``path`` by its name alone ("" when it would not)."""
    for name, candidate in (("path", path), ("its owner's directory", made)):
        text = str(candidate)
        if not os.path.isabs(text) or os.path.normpath(text) != text:
            return f"{name} {text!r} is not an absolute, normalised path"
        if len(candidate.parts) < 3:
            return f"{name} {text!r} is / or a top-level directory"
    if path != made and made not in path.parents:
        return f"{path} is not inside {made}, the directory its owner made"
    if os.path.lexists(path) and os.path.realpath(path) != str(path):
        return f"{path} passes through a symlink (it is {os.path.realpath(path)})"
    return ""


def remove_tree(path: Path, made: Path | None = None) -> None:
    """Remove the tree ``path`` inside ``made`` (the fresh directory its owner made; ``path``
    itself by default), its mounts unmounted first; see the module docstring. Files that cannot
    be removed are left (the owner's ``leftovers()`` reports them)."""
    reason = refusal(path, made or path)
    if reason:
        raise RemovalRefused(reason)
    if not os.path.lexists(path):
        return
    for _ in range(_UNMOUNT_ROUNDS):
        points = mounts_under(path)
        if not points:
            break
        for point in points:
            unmount_detach(point)
    still = mounts_under(path)
    if still:
        raise RemovalRefused(f"{path} not removed: still mounted there: {', '.join(still)}")
    shutil.rmtree(path, ignore_errors=True)
