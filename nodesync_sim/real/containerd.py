"""A private, real containerd (CRI v1) for tests and the demo.

``LocalContainerd`` runs the distribution's ``containerd`` binary as a background process with its
own version-2 config: private root, state, gRPC and ttrpc sockets in a short fresh directory, the
overlayfs snapshotter, runc v2 with cgroupfs, and a locally built busybox image as the sandbox
(pause) image, so nothing is ever pulled from a registry.

Pods started through :mod:`nodesync_sim.real.runtime_pods` put their cgroups under
``LocalContainerd.cgroup_root``; :meth:`LocalContainerd.cleanup` removes every trace: pods,
containerd itself, leftover shims and container processes, mounts, cgroups, directories and
the shim sockets containerd always puts under /run/containerd/s (that shared directory stays).

Needs root, and the binaries containerd, containerd-shim-runc-v2, runc, ctr and a static busybox.
A ``bin_dir`` (e.g. a newer release unpacked by scripts/setup-containerd) puts its containerd,
shim and ctr first on the PATH of containerd and ctr; runc is always the machine's.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc

from exporter.cri.pb import api_pb2, api_pb2_grpc
from nodesync_sim.real.process import ChildProcess, ChildProcessFailed, log_tail
from nodesync_sim.real.removal import mounts_under, remove_tree

IMAGE_REF = "docker.io/nodesync/busybox:local"
"""Name of the locally built image; it serves as the sandbox image and the workload image."""

BUSYBOX_PATH = "/bin/busybox"
"""Static busybox (Debian package busybox-static) copied into the image."""

REQUIRED_BINARIES = ("containerd", "containerd-shim-runc-v2", "runc", "ctr")

BUSYBOX_APPLETS = (
    "sh", "sleep", "true", "false", "head", "tail", "dd", "cat", "echo", "ls", "ps", "kill",
    "yes", "env", "mkdir", "rm", "touch", "wc", "grep", "seq", "date", "hostname", "id",
)  # fmt: skip

_CGROUP_FS = Path("/sys/fs/cgroup")
_START_TIMEOUT = 30.0
_STOP_TIMEOUT = 10.0


class ContainerdError(RuntimeError):
    """The local containerd could not be started or prepared."""


def search_path(bin_dir: str | None = None) -> str:
    """The PATH containerd and ctr run with: ``bin_dir`` (when given) before the process's."""
    inherited = os.environ.get("PATH", os.defpath)
    return inherited if bin_dir is None else f"{bin_dir}{os.pathsep}{inherited}"


def missing_binaries(bin_dir: str | None = None) -> list[str]:
    """Names of the binaries a LocalContainerd needs that are not installed."""
    path = search_path(bin_dir)
    missing = [name for name in REQUIRED_BINARIES if shutil.which(name, path=path) is None]
    if not Path(BUSYBOX_PATH).is_file():
        missing.append(BUSYBOX_PATH)
    return missing


def release_of(version_output: str) -> str:
    """``1.7.24`` from ``containerd --version`` output such as
    ``containerd github.com/containerd/containerd 1.7.24~ds1 1.7.24~ds1-6+deb13u1``."""
    words = version_output.split()
    if len(words) < 3:
        raise ContainerdError(f"cannot read a version from {version_output!r}")
    return re.split(r"[~+-]", words[2].removeprefix("v"), maxsplit=1)[0]


def cgroup_root_for(endpoint: str) -> str:
    """The cgroup parent under which pods of the containerd at ``endpoint`` put their cgroups.

    Derived from the name of the directory holding the socket, so it is unique per instance.
    """
    sock = Path(endpoint.removeprefix("unix://"))
    return f"/nodesync-{sock.parent.name}"


# ---------------------------------------------------------------------------------------------
# The image, built by hand as an OCI image layout archive.


def _tar_info(name: str, kind: bytes, *, size: int = 0, mode: int = 0o755) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.size = size
    info.mode = mode
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def _layer_tar(busybox: bytes) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for directory in ("bin", "dev", "etc", "proc", "sys", "tmp", "root", "var"):
            mode = 0o1777 if directory == "tmp" else 0o755
            tar.addfile(_tar_info(directory, tarfile.DIRTYPE, mode=mode))
        tar.addfile(
            _tar_info("bin/busybox", tarfile.REGTYPE, size=len(busybox)), io.BytesIO(busybox)
        )
        for applet in BUSYBOX_APPLETS:
            link = _tar_info(f"bin/{applet}", tarfile.SYMTYPE, mode=0o777)
            link.linkname = "busybox"
            tar.addfile(link)
        passwd = b"root:x:0:0:root:/root:/bin/sh\n"
        tar.addfile(_tar_info("etc/passwd", tarfile.REGTYPE, size=len(passwd), mode=0o644),
                    io.BytesIO(passwd))  # fmt: skip
        group = b"root:x:0:\n"
        tar.addfile(_tar_info("etc/group", tarfile.REGTYPE, size=len(group), mode=0o644),
                    io.BytesIO(group))  # fmt: skip
    return buf.getvalue()


def _descriptor(media_type: str, blob: bytes) -> dict[str, object]:
    return {
        "mediaType": media_type,
        "digest": "sha256:" + hashlib.sha256(blob).hexdigest(),
        "size": len(blob),
    }


def _json_blob(obj: object) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


@functools.cache
def busybox_image_archive(image_ref: str = IMAGE_REF) -> bytes:
    """An OCI image layout tar with one layer: static busybox and its applet symlinks.

    The config's command is ``/bin/sleep inf`` so the image also works as the pause image.
    Built once per process (and per name).
    """
    busybox = Path(BUSYBOX_PATH).read_bytes()
    layer = _layer_tar(busybox)
    layer_digest = "sha256:" + hashlib.sha256(layer).hexdigest()
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(os.uname().machine, os.uname().machine)
    config = _json_blob(
        {
            "architecture": arch,
            "os": "linux",
            "config": {
                "Cmd": ["/bin/sleep", "inf"],
                "Env": ["PATH=/bin"],
                "WorkingDir": "/",
            },
            "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
            "history": [{"created_by": "nodesync test image: static busybox"}],
        }
    )
    manifest = _json_blob(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": _descriptor("application/vnd.oci.image.config.v1+json", config),
            "layers": [_descriptor("application/vnd.oci.image.layer.v1.tar", layer)],
        }
    )
    manifest_desc = _descriptor("application/vnd.oci.image.manifest.v1+json", manifest)
    manifest_desc["platform"] = {"architecture": arch, "os": "linux"}
    manifest_desc["annotations"] = {
        "io.containerd.image.name": image_ref,
        "org.opencontainers.image.ref.name": image_ref.rsplit(":", 1)[-1],
    }
    index = _json_blob({"schemaVersion": 2, "manifests": [manifest_desc]})

    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:

        def add(name: str, data: bytes) -> None:
            tar.addfile(_tar_info(name, tarfile.REGTYPE, size=len(data), mode=0o644),
                        io.BytesIO(data))  # fmt: skip

        add("oci-layout", _json_blob({"imageLayoutVersion": "1.0.0"}))
        add("index.json", index)
        tar.addfile(_tar_info("blobs", tarfile.DIRTYPE))
        tar.addfile(_tar_info("blobs/sha256", tarfile.DIRTYPE))
        for blob in (layer, config, manifest):
            add(f"blobs/sha256/{hashlib.sha256(blob).hexdigest()}", blob)
    return out.getvalue()


# ---------------------------------------------------------------------------------------------
# containerd itself.


@dataclass(frozen=True)
class ContainerdLayout:
    """Where a containerd keeps its files and sockets (paths as containerd sees them)."""

    root: str
    state: str
    socket: str
    ttrpc_socket: str
    opt: str
    cni_bin_dir: str
    cni_conf_dir: str
    runc_root: str | None = None
    """None: runc's default under the state directory."""
    cri_options: tuple[str, ...] = ()
    """More ``key = value`` lines of the CRI plugin."""

    @classmethod
    def private(cls, base: Path) -> ContainerdLayout:
        """Everything in one short fresh directory (:class:`LocalContainerd`)."""
        return cls(
            root=f"{base}/root",
            state=f"{base}/state",
            socket=f"{base}/c.sock",
            ttrpc_socket=f"{base}/t.sock",
            opt=f"{base}/opt",
            cni_bin_dir=f"{base}/cni/bin",
            cni_conf_dir=f"{base}/cni/conf",
            runc_root=f"{base}/runc",
        )


def config_toml(layout: ContainerdLayout, image_ref: str) -> str:
    """A version-2 config: the layout's paths, the CRI plugin with ``image_ref`` as the sandbox
    image, overlayfs, runc v2 with cgroupfs."""
    cri = '[plugins."io.containerd.grpc.v1.cri"]'
    options = "".join(f"  {line}\n" for line in layout.cri_options)
    runc_root = f'  Root = "{layout.runc_root}"\n' if layout.runc_root else ""
    return f"""\
version = 2
root = "{layout.root}"
state = "{layout.state}"
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp",
]

[grpc]
  address = "{layout.socket}"

[ttrpc]
  address = "{layout.ttrpc_socket}"

[debug]
  level = "info"

[plugins."io.containerd.internal.v1.opt"]
  path = "{layout.opt}"

{cri}
  sandbox_image = "{image_ref}"
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
{options}
{cri[:-1]}.cni]
  bin_dir = "{layout.cni_bin_dir}"
  conf_dir = "{layout.cni_conf_dir}"

{cri[:-1]}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

{cri[:-1]}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

{cri[:-1]}.containerd.runtimes.runc.options]
  SystemdCgroup = false
{runc_root}"""


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def _pid_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _all_threads_stopped(pid: int) -> bool:
    """Every thread of ``pid`` is in state T (stopped), per /proc."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as stat:
                # the state follows the parenthesised command name, which may hold spaces
                state = stat.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue  # a thread that just exited
        if state not in ("T", "t"):
            return False
    return True


def _wait_until(condition: Callable[[], bool], timeout: float, interval: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


class LocalContainerd:
    """A containerd process with private state, for tests and the demo.

    Every instance uses a fresh short directory (unix socket paths are limited to 108 bytes),
    so state a previous run left behind never interferes.
    """

    def __init__(
        self, image_ref: str = IMAGE_REF, base_dir: str = "/tmp", bin_dir: str | None = None
    ) -> None:
        self._image_ref = image_ref
        self._base_parent = base_dir
        self._bin_dir = bin_dir
        self._env = {**os.environ, "PATH": search_path(bin_dir)}
        self._dir: Path | None = None
        self._last_dir: Path | None = None
        self._proc: ChildProcess | None = None
        self._frozen = False
        self._shim_sockets: set[str] = set()

    # -- properties --------------------------------------------------------------------------

    @property
    def directory(self) -> Path:
        if self._dir is None:
            raise ContainerdError("LocalContainerd has not been started")
        return self._dir

    @property
    def socket_path(self) -> str:
        return str(self.directory / "c.sock")

    @property
    def endpoint(self) -> str:
        return "unix://" + self.socket_path

    @property
    def root(self) -> Path:
        return self.directory / "root"

    @property
    def state(self) -> Path:
        return self.directory / "state"

    @property
    def log_dir(self) -> Path:
        """Where pods created by runtime_pods put their container logs."""
        return self.directory / "logs"

    @property
    def cgroup_root(self) -> str:
        """Cgroup parent of this instance's pods (see :func:`cgroup_root_for`)."""
        directory = self._dir or self._last_dir
        if directory is None:
            raise ContainerdError("LocalContainerd has not been started")
        return cgroup_root_for(f"unix://{directory}/c.sock")

    @property
    def image_ref(self) -> str:
        return self._image_ref

    @property
    def bin_dir(self) -> str | None:
        """Where containerd, its shim and ctr come from; None: the machine's PATH."""
        return self._bin_dir

    def _binary(self, name: str) -> str:
        found = shutil.which(name, path=self._env["PATH"])
        if found is None:
            raise ContainerdError(f"{name} not found on {self._env['PATH']}")
        return found

    def version(self) -> str:
        """The release of this instance's containerd binary, e.g. ``1.7.24`` (from --version)."""
        out = subprocess.run(
            [self._binary("containerd"), "--version"],
            capture_output=True, text=True, timeout=10, check=True, env=self._env,
        ).stdout  # fmt: skip
        return release_of(out)

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def log_path(self) -> Path:
        return self.directory / "containerd.log"

    def log_tail(self, lines: int = 30) -> str:
        return log_tail(self.log_path, lines)

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Create fresh dirs, start containerd, wait for the CRI, import the busybox image."""
        missing = missing_binaries(self._bin_dir)
        if missing:
            raise ContainerdError(
                "cannot run a local containerd, missing: " + ", ".join(missing)
                + " (install the packages containerd, runc and busybox-static)"
            )  # fmt: skip
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix="ns-", dir=self._base_parent))
            self._last_dir = self._dir
            for sub in ("root", "state", "runc", "opt", "cni/bin", "cni/conf", "logs"):
                (self._dir / sub).mkdir(parents=True, exist_ok=True)
            (self._dir / "config.toml").write_text(self._config())
        self._spawn()
        try:
            self.wait_ready()
            self._import_image()
        except BaseException:
            self.cleanup()
            raise

    def _spawn(self) -> None:
        if self.pid is not None:
            raise ContainerdError("containerd is already running")
        self._proc = ChildProcess(self._command(), log_path=self.log_path, env=self._env)
        self._proc.start()
        self._frozen = False

    def _config(self) -> str:
        """The text of config.toml (a real node's containerd has its own, nodesync_sim.real)."""
        return config_toml(ContainerdLayout.private(self.directory), self._image_ref)

    def _command(self) -> list[str]:
        return [self._binary("containerd"), "--config", str(self.directory / "config.toml")]

    def wait_ready(self, timeout: float = _START_TIMEOUT) -> None:
        """Poll the CRI Version call until it answers, or raise with the log's tail."""
        if self._proc is None:
            raise ContainerdError("containerd is not running")
        with grpc.insecure_channel(self.endpoint) as channel:
            stub = api_pb2_grpc.RuntimeServiceStub(channel)

            def answers() -> bool:
                try:
                    stub.Version(api_pb2.VersionRequest(version="v1"), timeout=0.5)
                except grpc.RpcError:
                    return False
                return True

            try:
                self._proc.wait_until(answers, timeout=timeout, what="answering CRI calls")
            except ChildProcessFailed as exc:
                raise ContainerdError(str(exc)) from None

    def _import_image(self) -> None:
        archive = self.directory / "image.tar"
        archive.write_bytes(busybox_image_archive(self._image_ref))
        result = subprocess.run(
            [self._binary("ctr"), "-a", self.socket_path, "-n", "k8s.io", "images", "import",
             str(archive)],
            capture_output=True,
            timeout=60,
            check=False,
            env=self._env,
        )  # fmt: skip
        archive.unlink()
        if result.returncode != 0:
            raise ContainerdError(
                "ctr images import failed: " + result.stderr.decode(errors="replace")
            )
        # The CRI plugin learns about the image from an event; wait until it lists it.
        with grpc.insecure_channel(self.endpoint) as channel:
            stub = api_pb2_grpc.ImageServiceStub(channel)

            def listed() -> bool:
                images = stub.ListImages(api_pb2.ListImagesRequest(), timeout=2.0).images
                return any(self._image_ref in image.repo_tags for image in images)

            if not _wait_until(listed, 10.0):
                raise ContainerdError(f"CRI does not list the imported image {self._image_ref}")

    def stop(self, timeout: float = _STOP_TIMEOUT) -> None:
        """Stop containerd (by PID: SIGTERM, then SIGKILL). Its shims and pods keep running."""
        if self._proc is None:
            return
        if self._frozen:
            self.thaw()
        self._proc.stop(timeout)
        self._proc = None
        self._frozen = False

    def freeze(self) -> None:
        """SIGSTOP containerd: its sockets accept connections but nothing answers."""
        pid = self.pid
        if self._proc is None or pid is None:
            raise ContainerdError("containerd is not running")
        self._proc.signal(signal.SIGSTOP)
        self._frozen = True
        # The signal is delivered asynchronously: a thread busy on another CPU may still answer
        # a request sent right after kill() returns. Frozen means every thread has stopped.
        if not _wait_until(lambda: _all_threads_stopped(pid), _STOP_TIMEOUT, interval=0.005):
            raise ContainerdError(f"containerd (pid {pid}) did not stop on SIGSTOP")

    def thaw(self) -> None:
        """SIGCONT a frozen containerd."""
        if self._proc is not None:
            self._proc.signal(signal.SIGCONT)
        self._frozen = False

    def restart(self) -> None:
        """Stop containerd and start it again on the same state; pods survive."""
        self.stop()
        self._spawn()
        self.wait_ready()

    # -- teardown ----------------------------------------------------------------------------

    def _remember_shim_sockets(self) -> None:
        task_dir = self.state / "io.containerd.runtime.v2.task"
        # 1.x writes the shim's address alone to "address"; 2.x to "bootstrap.json".
        for address_file in task_dir.glob("*/*/address"):
            with contextlib.suppress(OSError):
                self._remember_shim_socket(address_file.read_text().strip())
        for bootstrap in task_dir.glob("*/*/bootstrap.json"):
            with contextlib.suppress(OSError, ValueError, AttributeError):
                self._remember_shim_socket(str(json.loads(bootstrap.read_text()).get("address")))

    def _remember_shim_socket(self, address: str) -> None:
        if address.startswith("unix://"):
            self._shim_sockets.add(address.removeprefix("unix://"))

    def _remove_pods(self) -> None:
        """Stop and remove every pod sandbox through the CRI (best effort, bounded)."""
        try:
            with grpc.insecure_channel(self.endpoint) as channel:
                stub = api_pb2_grpc.RuntimeServiceStub(channel)
                items = stub.ListPodSandbox(api_pb2.ListPodSandboxRequest(), timeout=5.0).items
                for sandbox in items:
                    with contextlib.suppress(grpc.RpcError):
                        stub.StopPodSandbox(
                            api_pb2.StopPodSandboxRequest(pod_sandbox_id=sandbox.id), timeout=10.0
                        )
                        stub.RemovePodSandbox(
                            api_pb2.RemovePodSandboxRequest(pod_sandbox_id=sandbox.id),
                            timeout=10.0,
                        )
        except grpc.RpcError:
            pass

    def _own_shim_pids(self) -> list[int]:
        directory = self._dir or self._last_dir
        if directory is None:
            return []
        address = str(directory / "c.sock")
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            args = _cmdline(int(entry.name))
            if args and args[0].endswith("containerd-shim-runc-v2") and address in args:
                pids.append(int(entry.name))
        return pids

    def _cgroup_dirs(self) -> Iterator[Path]:
        """Every cgroup directory under this instance's cgroup root, deepest first."""
        relative = self.cgroup_root.lstrip("/")
        for hierarchy in _CGROUP_FS.iterdir():
            top = hierarchy / relative
            if not top.is_dir():
                continue
            found = [Path(dirpath) for dirpath, _, _ in os.walk(top)]
            yield from sorted(found, key=lambda p: len(p.parts), reverse=True)

    def _kill_cgroup_processes(self) -> None:
        def pids() -> set[int]:
            found: set[int] = set()
            for cgroup in self._cgroup_dirs():
                with contextlib.suppress(OSError):
                    for line in (cgroup / "cgroup.procs").read_text().split():
                        found.add(int(line))
            return {pid for pid in found if _pid_alive(pid)}

        for _ in range(3):
            remaining = pids()
            if not remaining:
                return
            for pid in remaining:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            _wait_until(lambda: not pids(), 5.0)

    def cleanup(self) -> None:
        """Remove every trace of this instance. Safe to call more than once."""
        if self._dir is None:
            return
        self._remember_shim_sockets()
        if self.pid is not None:
            self.thaw()
            self._remove_pods()
            self._remember_shim_sockets()
        self.stop()
        for pid in self._own_shim_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self._kill_cgroup_processes()
        _wait_until(lambda: not [p for p in self._own_shim_pids() if _pid_alive(p)], 5.0)
        for cgroup in self._cgroup_dirs():
            with contextlib.suppress(OSError):
                cgroup.rmdir()
        for sock in self._shim_sockets:
            with contextlib.suppress(OSError):
                os.unlink(sock)
        # /run/containerd/s itself stays: shims of any containerd on the host share it, and
        # removing it could race with another instance starting a shim.
        remove_tree(self._dir)  # what is mounted in it (pods' root filesystems, shm) first
        self._dir = None

    def leftovers(self) -> list[str]:
        """What of the last cleaned-up (or current) instance still exists; empty when clean."""
        if self._last_dir is None:
            return []
        found = []
        if self._last_dir.exists():
            found.append(f"directory {self._last_dir}")
            if self._dir is not None:
                self._remember_shim_sockets()
        found.extend(
            f"shim socket {sock}" for sock in sorted(self._shim_sockets) if os.path.exists(sock)
        )
        found.extend(f"mount {point}" for point in mounts_under(self._last_dir))
        found.extend(f"cgroup {path}" for path in self._cgroup_dirs())
        found.extend(f"shim pid {pid}" for pid in self._own_shim_pids() if _pid_alive(pid))
        if self.pid is not None:
            found.append(f"containerd pid {self.pid}")
        return found

    def __enter__(self) -> LocalContainerd:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()
