"""A private mount namespace in which a node's processes see their own machine.

A holder process (``unshare --mount --propagation private sleep infinity``) keeps the namespace;
every mount is made inside it (``nsenter``) and none propagates to the machine. Processes started
with :meth:`MountNamespace.command` as the prefix of their argv run in it (nsenter execs them:
their PID is the one of the ChildProcess). When the last process in it exits the namespace and
its mounts are gone; nothing has to be unmounted on the machine.

What a node needs hidden or private:

- files carrying kubelet's wanted values bind-mounted over the ``/proc/sys`` entries it would
  otherwise write (it writes only what differs; a write would land in the file);
- ``/var/lib`` and ``/var/log`` as overlays of the machine's (its content readable, every write
  in the node's directory), with the node's own directories bind-mounted over
  ``/var/lib/kubelet``, ``/var/lib/containerd``, ``/var/log/pods`` and ``/var/log/containers``;
- a tmpfs on ``/run/containerd``: the node's containerd socket, its state and the shim sockets.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from nodesync_sim.real.process import ChildProcess

#: The /proc/sys entries kubelet 1.20 sets when they differ (setupKernelTunables), with the value
#: it wants: the bind-mounted file carries that value, so it writes nothing.
KUBELET_SYSCTLS: dict[str, str] = {
    "vm/overcommit_memory": "1",
    "vm/panic_on_oom": "0",
    "kernel/panic": "10",
    "kernel/panic_on_oops": "1",
    "kernel/keys/root_maxkeys": "1000000",
    "kernel/keys/root_maxbytes": "25000000",
}

_TIMEOUT = 30.0


class NamespaceError(RuntimeError):
    """The namespace could not be made, or a mount in it failed."""


def _mnt_ns(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:
        return None


def _private(pid: int) -> bool:
    """Whether ``pid`` runs ``sleep`` (unshare is done) and no mount it sees propagates
    (no ``shared:`` or ``master:`` tag in its mountinfo)."""
    try:
        if Path(f"/proc/{pid}/comm").read_text().strip() != "sleep":
            return False
        lines = Path(f"/proc/{pid}/mountinfo").read_text().splitlines()
    except OSError:
        return False
    tags = (field for line in lines for field in line.split(" - ", 1)[0].split()[6:])
    return not any(tag.startswith(("shared:", "master:")) for tag in tags)


class MountNamespace:
    """The namespace of one node; its files live in ``directory``."""

    def __init__(self, directory: Path, *, network: bool = False) -> None:
        self.directory = directory
        self.network = network
        """Whether the namespace has a network namespace of its own too (``unshare --net``)."""
        self._holder: ChildProcess | None = None
        self._ns: str | None = None
        self._fd: int | None = None

    @property
    def pid(self) -> int:
        """The holder's PID (its ``/proc/<pid>/root`` is the namespace's view of the files)."""
        pid = self._holder.pid if self._holder is not None else None
        if pid is None:
            raise NamespaceError("the namespace is not running")
        return pid

    @property
    def identity(self) -> str | None:
        """``mnt:[inode]`` of the namespace (stays known after it is gone)."""
        return self._ns

    def path(self, inside: str) -> str:
        """A path of the namespace as the machine reaches it (through the holder's root)."""
        return f"/proc/{self.pid}/root{inside}"

    @property
    def netns(self) -> str:
        """The network namespace of the node's processes (the machine's, unless ``network``)."""
        return f"/proc/{self.pid}/ns/net" if self.network else "/proc/self/ns/net"

    def command(self) -> list[str]:
        """The argv prefix that runs a program in the namespace."""
        network = [f"--net=/proc/{self.pid}/ns/net"] if self.network else []
        return ["nsenter", f"--mount=/proc/{self.pid}/ns/mnt", *network, "--"]

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        unshare = ["unshare", "--mount", "--propagation", "private"]
        if self.network:
            unshare.append("--net")
        holder = ChildProcess(
            [*unshare, "sleep", "infinity"],
            log_path=self.directory / "namespace.log",
            name="namespace",
        )
        holder.start()
        self._holder = holder
        mine = _mnt_ns(os.getpid())
        # unshare makes the namespace, then its mounts private, then runs sleep: a mount made in
        # between would still propagate to the machine's peers of a shared mount.
        holder.wait_until(
            lambda: _mnt_ns(self.pid) not in (None, mine) and _private(self.pid),
            timeout=_TIMEOUT,
            what="unshared, with every mount private",
        )
        self._ns = _mnt_ns(self.pid)
        # Held open until release(): the namespace's inode number cannot be reused meanwhile,
        # so processes() never mistakes another program's new namespace for this one.
        self._fd = os.open(f"/proc/{self.pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)

    def run(self, *argv: str) -> None:
        """Run a command in the namespace; fail with its output."""
        result = subprocess.run(
            [*self.command(), *argv], capture_output=True, text=True, timeout=_TIMEOUT, check=False
        )
        if result.returncode != 0:
            raise NamespaceError(f"{' '.join(argv)}: {result.stderr.strip()}")

    def tmpfs(self, target: str, mode: str = "0711") -> None:
        self.run("mount", "-t", "tmpfs", "-o", f"mode={mode},size=64m", "tmpfs", target)

    def bind(self, source: Path, target: str) -> None:
        self.run("mount", "--bind", str(source), target)

    def overlay(self, target: str) -> None:
        """``target`` as an overlay of the machine's: readable, every write in our directory."""
        base = self.directory / "overlay" / target.strip("/").replace("/", "-")
        upper, work = base / "upper", base / "work"
        upper.mkdir(parents=True)
        work.mkdir()
        options = f"lowerdir={target},upperdir={upper},workdir={work}"
        self.run("mount", "-t", "overlay", "-o", options, "overlay", target)

    def mask_sysctls(self, values: dict[str, str] = KUBELET_SYSCTLS) -> None:
        """A file with the wanted value over each /proc/sys entry."""
        files = self.directory / "sysctl"
        files.mkdir(exist_ok=True)
        for entry, value in values.items():
            source = files / entry.replace("/", ".")
            source.write_text(value + "\n")
            self.bind(source, f"/proc/sys/{entry}")

    def processes(self) -> list[int]:
        """PIDs of every process in the namespace (the holder included); none once released."""
        if self._ns is None or self._fd is None:
            return []
        found = []
        for entry in os.listdir("/proc"):
            if entry.isdigit() and _mnt_ns(int(entry)) == self._ns:
                found.append(int(entry))
        return found

    def stop(self) -> None:
        """Stop the holder by PID; the namespace goes with the last process in it, once
        :meth:`release`d."""
        if self._holder is not None:
            self._holder.stop()

    def release(self) -> bool:
        """Let the namespace go, if no process is left in it; whether it was let go."""
        if self._fd is None:
            return True
        if self.processes():
            return False
        os.close(self._fd)
        self._fd = None
        return True
