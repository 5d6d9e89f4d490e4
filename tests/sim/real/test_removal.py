"""remove_tree removes only the tree its owner made, and never through a mount; a node's mount
namespace propagates nothing to the machine.

The mount cases run in a private mount namespace of their own (``unshare``), where a stand-in
for the machine's root (a directory with ``bin -> usr/bin`` and ``usr/bin/sh``) is bind-mounted
inside the tree to be removed, as a node's root built from bind mounts of the machine would be.
A plain ``shutil.rmtree`` there removes the stand-in's files through the mount; nothing of the
machine itself is ever named.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nodesync_sim.real.namespace import MountNamespace
from nodesync_sim.real.node import NodeSpec, RealNode
from nodesync_sim.real.pki import ClientCA
from nodesync_sim.real.removal import RemovalRefused, mounts_under, refusal, remove_tree
from tests.support.wait import until

REPO = Path(__file__).resolve().parents[3]

#: In a private mount namespace: bind-mount argv[2] (the stand-in) ``stacked`` times at one
#: point inside argv[1] (the tree), then remove the tree; with "no-unmount", unmounting fails
#: silently, as a busy or foreign mount would.
SCENARIO = r"""
import json, subprocess, sys
from pathlib import Path
from nodesync_sim.real import removal

tree, machine, stacked, mode = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
point = tree / "rootfs" / "machine"
point.mkdir(parents=True)
for _ in range(stacked):
    subprocess.run(["mount", "--bind", str(machine), str(point)], check=True)
if mode == "no-unmount":
    removal.unmount_detach = lambda point: None
refused = ""
try:
    removal.remove_tree(tree)
except removal.RemovalRefused as error:
    refused = str(error)
print(json.dumps({"refused": refused, "tree": tree.exists(), "mounts": removal.mounts_under(tree)}))
"""


def _machine(where: Path) -> Path:
    """A stand-in for the machine's root: ``bin -> usr/bin``, ``usr/bin/sh``."""
    (where / "usr" / "bin").mkdir(parents=True)
    (where / "usr" / "bin" / "sh").write_text("#!\n")
    (where / "bin").symlink_to("usr/bin")
    return where


def _intact(machine: Path) -> bool:
    return os.readlink(machine / "bin") == "usr/bin" and (machine / "usr/bin/sh").is_file()


def _in_private_namespace(tree: Path, machine: Path, stacked: int, mode: str) -> dict[str, Any]:
    result = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", sys.executable, "-c", SCENARIO,
         str(tree), str(machine), str(stacked), mode],
        capture_output=True, text=True, timeout=60, check=False, cwd=REPO,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    found: dict[str, Any] = json.loads(result.stdout)
    return found


@pytest.mark.parametrize("stacked", [1, 2], ids=["one-mount", "two-stacked-mounts"])
def test_a_tree_with_the_machine_bind_mounted_inside_is_removed_without_touching_it(
    tmp_path: Path, stacked: int
) -> None:
    machine = _machine(tmp_path / "machine")
    tree = tmp_path / "tree"
    found = _in_private_namespace(tree, machine, stacked, "unmount")
    assert found == {"refused": "", "tree": False, "mounts": []}
    assert _intact(machine)


def test_a_tree_whose_mount_cannot_be_unmounted_is_not_removed(tmp_path: Path) -> None:
    machine = _machine(tmp_path / "machine")
    tree = tmp_path / "tree"
    found = _in_private_namespace(tree, machine, 1, "no-unmount")
    assert "still mounted" in found["refused"]
    assert found["tree"] is True
    assert _intact(machine)


@pytest.mark.parametrize(
    ("path", "made", "reason"),
    [
        ("/", "/", "top-level"),
        ("/tmp", "/tmp", "top-level"),
        ("/usr", "/usr", "top-level"),
        ("", "", "absolute"),
        ("tmp/x", "tmp/x", "absolute"),
        ("/tmp/x/../y", "/tmp/x", "absolute"),
        ("/tmp/other/bin", "/tmp/mine", "not inside"),
    ],
)
def test_paths_that_are_never_removed(path: str, made: str, reason: str) -> None:
    assert reason in refusal(Path(path), Path(made))


def test_a_path_through_a_symlink_is_refused_and_its_target_kept(tmp_path: Path) -> None:
    machine = _machine(tmp_path / "machine")
    (tmp_path / "tree").symlink_to(machine)
    with pytest.raises(RemovalRefused, match="symlink"):
        remove_tree(tmp_path / "tree" / "usr")
    assert _intact(machine)


def test_a_fresh_tree_is_removed(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "a" / "b").mkdir(parents=True)
    (tree / "a" / "b" / "file").write_text("x")
    remove_tree(tree / "a", made=tree)
    assert not (tree / "a").exists()
    assert tree.is_dir()
    assert mounts_under(tree) == []


def test_a_node_that_could_not_make_its_directory_leaves_what_was_there(tmp_path: Path) -> None:
    spec = NodeSpec(name="127.0.0.9")
    existing = tmp_path / "node-127.0.0.9"
    existing.mkdir()
    (existing / "someone-elses").write_text("kept")
    node = RealNode(
        spec,
        kubelet="/nonexistent/kubelet",
        server_url="https://127.0.0.1:1",
        server_ca=tmp_path / "ca.crt",
        client_ca=ClientCA(tmp_path / "pki"),
        base_dir=tmp_path,
    )
    with pytest.raises(FileExistsError):
        node.start()
    assert (existing / "someone-elses").read_text() == "kept"


def test_a_node_namespace_propagates_no_mount_to_the_machine(tmp_path: Path) -> None:
    namespace = MountNamespace(tmp_path / "ns")
    namespace.start()
    try:
        # unshare has made every mount private before the first mount is made in it ...
        for line in Path(f"/proc/{namespace.pid}/mountinfo").read_text().splitlines():
            tags = line.split(" - ", 1)[0].split()[6:]
            assert not [t for t in tags if t.startswith(("shared:", "master:"))], line
        # ... so a mount in it stays there.
        inside = tmp_path / "inside"
        inside.mkdir()
        namespace.tmpfs(str(inside))
        assert mounts_under(inside) == []
    finally:
        namespace.stop()
    until(namespace.release, timeout=10, what="the namespace to be let go")
