"""The committed CRI stubs are exactly what scripts/gen-cri-stubs makes of api.proto."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
COMMITTED = REPO / "exporter" / "cri" / "pb"
GENERATED_FILES = (
    "__init__.py",
    "api_pb2.py",
    "api_pb2.pyi",
    "api_pb2_grpc.py",
    "keys_pb2.py",
    "keys_pb2.pyi",
    "events_pb2.py",
    "events_pb2.pyi",
    "events_pb2_grpc.py",
    "task_events_pb2.py",
    "task_events_pb2.pyi",
)


def test_committed_stubs_match_a_fresh_generation(tmp_path: Path) -> None:
    out = tmp_path / "pb"
    subprocess.run(
        [str(REPO / "scripts" / "gen-cri-stubs"), str(out)],
        check=True,
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
        timeout=60,
    )
    assert sorted(p.name for p in out.iterdir()) == sorted(GENERATED_FILES)
    for name in GENERATED_FILES:
        assert (out / name).read_bytes() == (COMMITTED / name).read_bytes(), (
            f"exporter/cri/pb/{name} is stale: run scripts/gen-cri-stubs"
        )


def test_grpc_module_imports_messages_from_the_package() -> None:
    source = (COMMITTED / "api_pb2_grpc.py").read_text()
    assert "from exporter.cri.pb import api_pb2" in source
    assert "\nimport api_pb2" not in source


def test_wire_names_match_the_published_cri_api() -> None:
    from exporter.cri.pb import api_pb2

    runtime = api_pb2.DESCRIPTOR.services_by_name["RuntimeService"]
    assert runtime.full_name == "runtime.v1.RuntimeService"
    assert api_pb2.DESCRIPTOR.services_by_name["ImageService"].full_name == (
        "runtime.v1.ImageService"
    )
    # A few field numbers nodesync depends on, as published in cri-api's api.proto.
    status = api_pb2.ContainerStatus.DESCRIPTOR.fields_by_name
    assert (status["exit_code"].number, status["reason"].number, status["finished_at"].number) == (
        7,
        10,
        6,
    )
    container = api_pb2.Container.DESCRIPTOR.fields_by_name
    assert (container["state"].number, container["labels"].number) == (6, 8)
    resources = api_pb2.LinuxContainerResources.DESCRIPTOR.fields_by_name
    assert resources["memory_limit_in_bytes"].number == 4
    config = api_pb2.PodSandboxConfig.DESCRIPTOR.fields_by_name
    assert (config["log_directory"].number, config["linux"].number) == (3, 8)
