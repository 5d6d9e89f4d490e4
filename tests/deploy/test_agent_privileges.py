"""What the agent's securityContext claims, checked against a real containerd and the kernel.

The DaemonSet runs the agent as a non-root user with root's group as a supplementary group,
and mounts containerd's state directory and kubelet's root read-only. Here a process with
exactly that user and those groups (setpriv) reads what the agent reads on a node laid out like
a real one: containerd's socket (root:root, 0660, as containerd creates it) in its state
directory (0711), kubelet's root and pod directories (root:root, 0750), containerd's root. Without
root's group it cannot; and a read-only mount of the socket's directory does not stop it.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest

from nodesync_sim.real.containerd import LocalContainerd
from tests.deploy.manifests import BASE, build, one

pytestmark = pytest.mark.containerd

PYTHON = "/usr/bin/python3"  # the system's: the test's own may live where the user cannot read
PROBE = """
import json, os, socket, sys
socket_path, kubelet_root, containerd_root = sys.argv[1:4]
result = {"uid": os.getuid(), "groups": sorted(os.getgroups())}
def attempt(name, action):
    try:
        result[name] = action()
    except OSError as exc:
        result[name] = "error: " + os.strerror(exc.errno)
def connect():
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(socket_path)
    finally:
        s.close()
    return "ok"
attempt("connect", connect)
attempt("pod_dirs", lambda: sorted(os.listdir(os.path.join(kubelet_root, "pods"))))
attempt("nodefs", lambda: os.statvfs(kubelet_root).f_blocks > 0)
attempt("imagefs", lambda: os.statvfs(containerd_root).f_blocks > 0)
print(json.dumps(result))
"""


def _tool(name: str) -> str:
    found = shutil.which(name) or (name if Path(name).exists() else None)
    if found is None:
        pytest.fail(f"{name} is required (Debian: util-linux, python3)", pytrace=False)
    return found


def _agent_identity() -> tuple[int, int, list[int]]:
    agent = one(build(BASE), "DaemonSet", "nodesync-agent")
    security = agent["spec"]["template"]["spec"]["securityContext"]
    return security["runAsUser"], security["runAsGroup"], security["supplementalGroups"]


def _probe(
    containerd: LocalContainerd, kubelet: Path, groups: list[int], *, socket_dir: str = ""
) -> dict[str, Any]:
    uid, gid, _ = _agent_identity()
    socket_path = containerd.socket_path
    setpriv = [
        _tool("setpriv"),
        f"--reuid={uid}",
        f"--regid={gid}",
        f"--groups={','.join(map(str, groups))}" if groups else "--clear-groups",
    ]
    command = [*setpriv, _tool(PYTHON), "-c", PROBE]
    if socket_dir:
        # A private mount namespace: the socket's directory bind-mounted read-only elsewhere,
        # as the DaemonSet mounts /run/containerd.
        socket_path = f"{socket_dir}/{Path(containerd.socket_path).name}"
        # Root cannot write there either (the mount is really read-only), then the probe runs.
        script = (
            'mount --bind "$1" "$2" && mount -o remount,bind,ro "$2" && '
            '! touch "$2/.written" 2>/dev/null && shift 2 && exec "$@"'
        )
        command = [
            _tool("unshare"),
            "--mount",
            "sh",
            "-c",
            script,
            "sh",
            str(Path(containerd.socket_path).parent),
            socket_dir,
            *command,
        ]
    command += [socket_path, str(kubelet), str(containerd.root)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 0, result.stderr
    found: dict[str, Any] = json.loads(result.stdout)
    return found


def test_containerd_makes_its_socket_root_owned_0660(containerd: LocalContainerd) -> None:
    st = os.stat(containerd.socket_path)
    assert stat.S_ISSOCK(st.st_mode)
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, 0, 0o660)


def test_the_agents_user_and_groups_read_what_the_agent_reads(
    containerd: LocalContainerd, kubelet_root: Path
) -> None:
    # containerd's state directory (here: the private instance's) is 0711 on a node.
    Path(containerd.socket_path).parent.chmod(0o711)
    uid, _, groups = _agent_identity()
    assert uid != 0
    assert groups == [0]
    found = _probe(containerd, kubelet_root, groups)
    assert found["uid"] == uid
    assert found["connect"] == "ok"
    assert found["pod_dirs"] == ["0b1c2d3e-pod"]
    assert found["nodefs"] is True
    assert found["imagefs"] is True
    # Without root's group: neither the socket nor the pod directories.
    without = _probe(containerd, kubelet_root, [])
    assert without["connect"] == "error: Permission denied"
    assert without["pod_dirs"] == "error: Permission denied"


def test_a_read_only_mount_does_not_stop_connecting(
    containerd: LocalContainerd, kubelet_root: Path
) -> None:
    Path(containerd.socket_path).parent.chmod(0o711)
    mount_point = Path(tempfile.mkdtemp(prefix="nodesync-run-"))
    try:
        mount_point.chmod(0o711)
        _, _, groups = _agent_identity()
        found = _probe(containerd, kubelet_root, groups, socket_dir=str(mount_point))
        assert found["connect"] == "ok"
    finally:
        mount_point.rmdir()
