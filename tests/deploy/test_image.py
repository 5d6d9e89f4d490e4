"""The image, built from the Dockerfile by scripts/build-image (buildah, no Docker engine, no
registry) and run through the CRI of a real containerd the way kubelet runs the agent's
DaemonSet pod: host network, the user, groups, read-only root filesystem, capabilities,
seccomp profile and read-only host mounts exactly as deploy/base declares them. The agent
reads the runtime through the mounted socket directory and answers /metrics, /healthz and
/readyz; inside the image `pip check` is clean and there is no compiler or git.

The image is built once per session (minutes the first time on a machine, when the base is
made; the base is cached, see docs/testing.md).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import re
import subprocess
import tempfile
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc
import pytest

from exporter import __version__
from exporter.cri.pb import api_pb2, api_pb2_grpc
from nodesync_sim.real.containerd import LocalContainerd
from nodesync_sim.real.process import free_port
from tests.deploy.conftest import BuiltImage
from tests.deploy.manifests import BASE, ROOT, build, one
from tests.support.wait import until

pytestmark = [pytest.mark.containerd, pytest.mark.timeout(1800)]

CALL_TIMEOUT = 60.0
IMAGE = f"docker.io/library/nodesync:{__version__}"
NODE_NAME = "image-test-node"
POD_UID = "6f1c1f4e-0b7a-4a57-9d0e-3c2a1b0d9e8f"
INSTALL_DOC = ROOT / "docs" / "install.md"

CHECKS = """
import json, shutil, subprocess, sys
pip = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True)
tools = ["gcc", "cc", "c++", "g++", "clang", "make", "git", "curl", "wget"]
print(json.dumps({"pip_check": pip.returncode, "pip_output": pip.stdout.strip(),
                  "tools": [t for t in tools if shutil.which(t)]}))
"""


@functools.cache
def pod_security() -> ModuleType:
    """The CRI fields of tests/deploy/cri_pod_security.proto, compiled for this session."""
    from grpc_tools import protoc

    proto = Path(__file__).with_name("cri_pod_security.proto")
    with tempfile.TemporaryDirectory(prefix="nodesync-proto-") as out:
        status = protoc.main(["protoc", f"-I{proto.parent}", f"--python_out={out}", str(proto)])
        assert status == 0, f"protoc failed on {proto}"
        spec = importlib.util.spec_from_file_location(
            "cri_pod_security_pb2", Path(out) / f"{proto.stem}_pb2.py"
        )
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------------ the DaemonSet's pod


@dataclass(frozen=True)
class AgentPod:
    """The DaemonSet's pod template, read from the shipped manifest."""

    spec: dict[str, Any]
    container: dict[str, Any]

    @classmethod
    def shipped(cls) -> AgentPod:
        spec = one(build(BASE), "DaemonSet", "nodesync-agent")["spec"]["template"]["spec"]
        (container,) = spec["containers"]
        return cls(spec, container)

    @property
    def security(self) -> dict[str, Any]:
        security: dict[str, Any] = self.spec["securityContext"]
        return security

    @property
    def container_security(self) -> dict[str, Any]:
        security: dict[str, Any] = self.container["securityContext"]
        return security

    def host_paths(self) -> dict[str, str]:
        return {v["name"]: v["hostPath"]["path"] for v in self.spec["volumes"]}

    def mounts(self) -> list[tuple[str, str, bool]]:
        """(host path, container path, read-only) for each of the container's mounts."""
        paths = self.host_paths()
        return [
            (paths[m["name"]], m["mountPath"], bool(m.get("readOnly")))
            for m in self.container["volumeMounts"]
        ]

    def environment(self) -> dict[str, str]:
        found = {}
        for variable in self.container["env"]:
            if "value" in variable:
                found[variable["name"]] = variable["value"]
            elif variable["valueFrom"].get("fieldRef", {}).get("fieldPath") == "spec.nodeName":
                found[variable["name"]] = NODE_NAME
            elif variable["valueFrom"].get("fieldRef", {}).get("fieldPath") == "metadata.uid":
                found[variable["name"]] = POD_UID
            else:
                raise AssertionError(f"the test cannot provide {variable}")
        return found


def _profile(security: dict[str, Any], module: ModuleType) -> Any:
    kind = security["seccompProfile"]["type"]
    assert kind == "RuntimeDefault", f"the test runs RuntimeDefault only, not {kind}"
    return module.SecurityProfile(profile_type=module.SecurityProfile.RuntimeDefault)


def _namespaces(pod: AgentPod) -> api_pb2.NamespaceOption:
    assert pod.spec["hostNetwork"] is True
    return api_pb2.NamespaceOption(network=api_pb2.NODE, pid=api_pb2.CONTAINER, ipc=api_pb2.POD)


def sandbox_config(pod: AgentPod, containerd: LocalContainerd, uid: str) -> Any:
    """What kubelet asks RunPodSandbox for: the pod's user, groups and seccomp profile."""
    module = pod_security()
    security = pod.security
    log_directory = containerd.log_dir / uid
    log_directory.mkdir(parents=True)
    config = api_pb2.PodSandboxConfig(
        metadata=api_pb2.PodSandboxMetadata(name="nodesync-agent-x", uid=uid, namespace="nodesync"),
        log_directory=str(log_directory),
        linux=api_pb2.LinuxPodSandboxConfig(
            cgroup_parent=f"{containerd.cgroup_root}/pod{uid}",
            security_context=api_pb2.LinuxSandboxSecurityContext(
                namespace_options=_namespaces(pod)
            ),
        ),
    )
    extra = module.PodSandboxConfig()
    context = extra.linux.security_context
    context.run_as_user.value = security["runAsUser"]
    context.run_as_group.value = security["runAsGroup"]
    context.supplemental_groups.extend(security["supplementalGroups"])
    context.seccomp.CopyFrom(_profile(security, module))
    config.MergeFromString(extra.SerializeToString())
    return config


def container_config(
    pod: AgentPod,
    name: str,
    args: list[str],
    mounts: list[tuple[str, str, bool]],
    *,
    command: list[str] | None = None,
) -> api_pb2.ContainerConfig:
    """What kubelet asks CreateContainer for: the pod's and the container's securityContext."""
    module = pod_security()
    security, container = pod.security, pod.container_security
    assert security["runAsNonRoot"] is True
    config = api_pb2.ContainerConfig(
        metadata=api_pb2.ContainerMetadata(name=name),
        image=api_pb2.ImageSpec(image=IMAGE),
        command=command or [],
        args=args,
        envs=[api_pb2.KeyValue(key=k, value=v) for k, v in pod.environment().items()],
        log_path=f"{name}.log",
        linux=api_pb2.LinuxContainerConfig(
            security_context=api_pb2.LinuxContainerSecurityContext(
                namespace_options=_namespaces(pod),
                readonly_rootfs=container["readOnlyRootFilesystem"],
            )
        ),
    )
    extra = module.ContainerConfig()
    for host, path, read_only in mounts:
        extra.mounts.add(host_path=host, container_path=path, readonly=read_only)
    context = extra.linux.security_context
    context.run_as_user.value = security["runAsUser"]
    context.run_as_group.value = security["runAsGroup"]
    context.supplemental_groups.extend(security["supplementalGroups"])
    context.seccomp.CopyFrom(_profile(security, module))
    context.no_new_privs = container["allowPrivilegeEscalation"] is False
    context.capabilities.drop_capabilities.extend(container["capabilities"]["drop"])
    context.capabilities.add_capabilities.extend(container["capabilities"].get("add", []))
    config.MergeFromString(extra.SerializeToString())
    return config


# ------------------------------------------------------------------ helpers


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return 0, ""


def _proc_status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return dict(line.split(":\t", 1) for line in lines if ":\t" in line)


def _mount_options(pid: int) -> dict[str, set[str]]:
    """Mount point -> its per-mount options, as the process sees its mounts."""
    found = {}
    for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines():
        fields = line.split()
        found[fields[4]] = set(fields[5].split(","))
    return found


def _stdout(log: Path) -> list[str]:
    """The stdout lines of a CRI container log (``<time> <stream> <tag> <text>``)."""
    lines = []
    for line in log.read_text().splitlines():
        _, stream, _, text = line.split(" ", 3)
        if stream == "stdout":
            lines.append(text)
    return lines


def _import(containerd: LocalContainerd, archive: Path) -> None:
    result = subprocess.run(
        ["ctr", "-a", containerd.socket_path, "-n", "k8s.io", "images", "import", str(archive)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    with grpc.insecure_channel(containerd.endpoint) as channel:
        images = api_pb2_grpc.ImageServiceStub(channel)

        def listed() -> bool:
            found = images.ListImages(api_pb2.ListImagesRequest(), timeout=CALL_TIMEOUT).images
            return any(IMAGE in image.repo_tags for image in found)

        until(listed, timeout=60, what=f"the CRI lists {IMAGE}", detail=lambda: result.stdout)


# ------------------------------------------------------------------ the tests


def test_the_build_reports_the_size_docs_install_states(built_image: BuiltImage) -> None:
    match = re.search(r"(\d+) MB in (\d+) layers .*?, (\d+) MB compressed", built_image.report)
    assert match, built_image.report
    size, layers, compressed = (int(g) for g in match.groups())
    assert layers == 2, "the base and the application"
    assert built_image.archive.stat().st_size == pytest.approx(compressed * 1e6, rel=0.05)
    stated = re.search(r"The image is (\d+) MB \((\d+) MB compressed\)", INSTALL_DOC.read_text())
    assert stated, "docs/install.md states the image's size"
    assert int(stated.group(1)) == pytest.approx(size, rel=0.1), built_image.report
    assert int(stated.group(2)) == pytest.approx(compressed, rel=0.1), built_image.report


def test_the_image_runs_the_agent_as_the_daemonset_declares(
    built_image: BuiltImage, containerd: LocalContainerd, kubelet_root: Path
) -> None:
    pod = AgentPod.shipped()
    # The node's paths, here the private containerd's: its state directory is 0711 on a node,
    # and its socket is /run/containerd/containerd.sock.
    state = Path(containerd.socket_path).parent
    state.chmod(0o711)
    (state / "containerd.sock").symlink_to(Path(containerd.socket_path).name)
    node = {
        "/run/containerd": str(state),
        "/var/lib/kubelet": str(kubelet_root),
        "/var/lib/containerd": str(containerd.root),
    }
    assert sorted(pod.host_paths().values()) == sorted(node)
    mounts = [(node[host], path, read_only) for host, path, read_only in pod.mounts()]
    assert all(read_only for _, _, read_only in mounts)
    # Its port, free on this machine (the pod shares the host's network).
    port = free_port()
    args = [
        f"--web.listen-address=127.0.0.1:{port}" if a.startswith("--web.listen-address=") else a
        for a in pod.container["args"]
    ]
    assert args[0] == "agent"
    assert "--cri.endpoint=unix:///run/containerd/containerd.sock" in args

    _import(containerd, built_image.archive)
    uid = str(uuid.uuid4())
    sandbox = sandbox_config(pod, containerd, uid)
    with grpc.insecure_channel(containerd.endpoint) as channel:
        runtime = api_pb2_grpc.RuntimeServiceStub(channel)
        sandbox_id = runtime.RunPodSandbox(
            api_pb2.RunPodSandboxRequest(config=sandbox), timeout=CALL_TIMEOUT
        ).pod_sandbox_id

        def start(config: api_pb2.ContainerConfig) -> str:
            created = runtime.CreateContainer(
                api_pb2.CreateContainerRequest(
                    pod_sandbox_id=sandbox_id, config=config, sandbox_config=sandbox
                ),
                timeout=CALL_TIMEOUT,
            )
            runtime.StartContainer(
                api_pb2.StartContainerRequest(container_id=created.container_id),
                timeout=CALL_TIMEOUT,
            )
            return str(created.container_id)

        def status(container_id: str) -> api_pb2.ContainerStatusResponse:
            return runtime.ContainerStatus(
                api_pb2.ContainerStatusRequest(container_id=container_id, verbose=True),
                timeout=CALL_TIMEOUT,
            )

        agent = start(container_config(pod, "agent", args, mounts))
        log = Path(sandbox.log_directory) / "agent.log"

        def why() -> str:
            state = api_pb2.ContainerState.Name(status(agent).status.state)
            return f"container {state}; its log:\n" + (log.read_text() if log.exists() else "")

        metrics = f"http://127.0.0.1:{port}/metrics"
        until(
            lambda: re.search(r"^nodesync_cri_up 1(\.0)?$", _get(metrics)[1], re.MULTILINE),
            timeout=60,
            what="the agent reports nodesync_cri_up 1",
            detail=why,
        )
        until(
            lambda: _get(f"http://127.0.0.1:{port}/readyz")[0] == 200,
            timeout=60,
            what="/readyz 200",
            detail=why,
        )
        assert _get(f"http://127.0.0.1:{port}/healthz")[0] == 200

        # The process runs with exactly what the manifest declares.
        pid = int(json.loads(status(agent).info["info"])["pid"])
        proc = _proc_status(pid)
        security = pod.security
        assert proc["Uid"].split() == [str(security["runAsUser"])] * 4
        assert proc["Gid"].split() == [str(security["runAsGroup"])] * 4
        assert set(map(int, proc["Groups"].split())) == {
            security["runAsGroup"],
            *security["supplementalGroups"],
        }
        assert int(proc["CapEff"], 16) == int(proc["CapPrm"], 16) == 0
        assert proc["NoNewPrivs"] == "1"
        assert proc["Seccomp"] == "2", "a seccomp filter (RuntimeDefault)"
        options = _mount_options(pid)
        assert "ro" in options["/"], "read-only root filesystem"
        for _, path, _ in mounts:
            assert "ro" in options[path], f"{path} is mounted read-only"

        # The image's contents, checked by a second container of the pod, as the same user.
        checks = start(
            container_config(pod, "checks", [], mounts, command=["python3", "-c", CHECKS])
        )
        until(
            lambda: status(checks).status.state == api_pb2.CONTAINER_EXITED,
            timeout=120,
            what="the checks container exits",
            detail=lambda: (Path(sandbox.log_directory) / "checks.log").read_text(),
        )
        assert status(checks).status.exit_code == 0
        (report,) = _stdout(Path(sandbox.log_directory) / "checks.log")
        found = json.loads(report)
        assert found["pip_check"] == 0, found["pip_output"]
        assert found["tools"] == []
