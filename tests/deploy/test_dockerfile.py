"""The Dockerfile, checked without a Docker engine: it parses, its stages are named and
referenced, the final stage runs ``nodesync`` as a non-root user on the manifests' ports, its
build context holds what it copies, and those files build a wheel with the console script, the
CRI .proto and the generated stubs."""

from __future__ import annotations

import base64
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import time
import tomllib
import zipfile
from pathlib import Path

import pytest

from exporter import __version__
from tests.deploy.dockerfile import (
    Dockerfile,
    DockerfileError,
    DockerIgnore,
    context_files,
    labels,
    parse,
    stage_references,
)
from tests.deploy.manifests import BASE, ROOT, build, workloads

DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"


@pytest.fixture(scope="module")
def dockerfile() -> Dockerfile:
    return parse(DOCKERFILE.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def ignore() -> DockerIgnore:
    return DockerIgnore.parse(DOCKERIGNORE.read_text(encoding="utf-8"))


def test_stages_are_named_and_only_earlier_ones_are_referenced(dockerfile: Dockerfile) -> None:
    names = [stage.name for stage in dockerfile.stages]
    assert len(names) >= 2, "a build stage and a runtime stage"
    assert all(names), "every stage has a name (FROM ... AS name)"
    assert len(set(names)) == len(names)
    referenced = set()
    for index, stage in enumerate(dockerfile.stages):
        for instruction in stage.instructions:
            for ref in stage_references(instruction):
                assert ref in names[:index], f"line {instruction.line}: unknown stage {ref}"
                referenced.add(ref)
    assert set(names[:-1]) <= referenced, "every stage but the last feeds a later one"


def test_base_images_are_python_311_pinned_by_tag(dockerfile: Dockerfile) -> None:
    for stage in dockerfile.stages:
        image = dockerfile.expand(stage.image)
        repository, _, tag = image.partition(":")
        assert repository == "python"
        assert tag.startswith("3.11-slim"), image


def test_the_final_stage_runs_nodesync_as_a_non_root_user(dockerfile: Dockerfile) -> None:
    final = dockerfile.stages[-1]
    users = final.all("USER")
    assert users, "the final stage sets USER"
    uid, _, gid = users[-1].arguments.partition(":")
    # Numeric: Kubernetes can check runAsNonRoot only against a numeric user.
    assert uid.isdigit()
    assert int(uid) != 0
    assert not gid or (gid.isdigit() and int(gid) != 0)
    (entrypoint,) = final.all("ENTRYPOINT")
    assert entrypoint.exec_form() == ["nodesync"]
    for cmd in final.all("CMD"):
        assert cmd.exec_form() is not None, "CMD in exec form (no shell in between)"
    # The manifests run the image as that user.
    for workload in workloads(build(BASE)):
        pod = workload["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsUser"] == int(uid)


def test_exposed_ports_are_the_ports_the_manifests_use(dockerfile: Dockerfile) -> None:
    exposed = {
        int(word.split("/")[0])
        for instruction in dockerfile.stages[-1].all("EXPOSE")
        for word in instruction.words()
    }
    used = {
        port["containerPort"]
        for workload in workloads(build(BASE))
        for container in workload["spec"]["template"]["spec"]["containers"]
        for port in container["ports"]
    }
    assert exposed == used == {9617, 9618}


def test_oci_labels_describe_the_image(dockerfile: Dockerfile) -> None:
    final = dockerfile.stages[-1]
    found = labels(final)
    for key in ("title", "description", "licenses", "version", "revision"):
        assert found.get(f"org.opencontainers.image.{key}"), f"no label {key}"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert found["org.opencontainers.image.licenses"] == project["license"]
    version_args = [
        i.arguments.partition("=")[2] for i in final.all("ARG") if i.arguments.startswith("VERSION")
    ]
    assert version_args == [__version__]


def _copy_sources(dockerfile: Dockerfile) -> list[str]:
    sources: list[str] = []
    for stage in dockerfile.stages:
        for instruction in stage.all("COPY") + stage.all("ADD"):
            if "from" in instruction.flags():
                continue
            words = instruction.words()
            sources += words[:-1]
    return sources


def test_every_copy_source_is_in_the_build_context(
    dockerfile: Dockerfile, ignore: DockerIgnore
) -> None:
    sources = _copy_sources(dockerfile)
    assert sources
    for source in sources:
        assert (ROOT / source).exists(), f"COPY {source}: not in the repository"
        assert not ignore.excluded(source), f"COPY {source}: excluded by .dockerignore"


@pytest.mark.parametrize(
    "path",
    [
        ".venv/bin/python",
        ".git/HEAD",
        "tests/conftest.py",
        "exporter/__pycache__/cli.cpython-311.pyc",
        "exporter/cri/pb/__pycache__/api_pb2.cpython-311.pyc",
        "nodesync.egg-info/PKG-INFO",
        "deploy/base/kustomization.yaml",
        "kubeconfig",
        "build/image/nodesync-0.1.0.oci.tar",
        "dist/nodesync-0.1.0-py3-none-any.whl",
        ".mypy_cache/3.11/exporter/cli.meta.json",
        ".pytest_cache/v/cache/nodeids",
        ".ruff_cache/CACHEDIR.TAG",
        "exporter/.hypothesis/examples/x",
        "nodesync_sim/.pytest_cache/v/cache/lastfailed",
        "exporter/.mypy_cache/3.11/x.json",
        "exporter/nodesync.egg-info/PKG-INFO",
    ],
)
def test_the_build_context_leaves_out_everything_else(ignore: DockerIgnore, path: str) -> None:
    assert ignore.excluded(path)


def test_dockerignore_semantics() -> None:
    rules = DockerIgnore.parse("*\n!keep/\nkeep/**/secret\n!keep/a/secret\n")
    assert rules.excluded("other.txt")
    assert not rules.excluded("keep/x.py")
    assert rules.excluded("keep/b/secret")
    assert rules.excluded("keep/secret")
    assert not rules.excluded("keep/a/secret")


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("RUN true\n", "before the first FROM"),
        ("FROM a AS b\nRUNN true\n", "unknown instruction"),
        ("FROM a AS b\nRUN a \\\n", "never ends"),
        ("FROM a b c d\n", "FROM"),
    ],
)
def test_the_parser_refuses_what_docker_would(text: str, error: str) -> None:
    with pytest.raises(DockerfileError, match=error):
        parse(text)


@pytest.mark.timeout(180)
def test_the_build_context_builds_the_wheel_the_image_installs(
    dockerfile: Dockerfile, ignore: DockerIgnore, tmp_path: Path
) -> None:
    """What the build stage does (pip wheel), offline and without dependencies: from exactly
    the files its COPY instructions put into the image."""
    source = tmp_path / "src"
    for path in context_files(ROOT, ignore, _copy_sources(dockerfile)):
        target = source / path.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        if path.is_symlink():
            target.symlink_to(path.readlink())
        else:
            shutil.copy2(path, target)
    dist = tmp_path / "dist"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            str(source),
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--disable-pip-version-check",
            "--wheel-dir",
            str(dist),
        ],
        capture_output=True,
        text=True,
        timeout=170,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (wheel,) = dist.glob("nodesync-*.whl")
    assert wheel.name.startswith(f"nodesync-{__version__}-")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        text = archive.read(entry_points).decode()
        assert "[console_scripts]" in text
        assert "nodesync = exporter.cli:main" in text.splitlines()
        for stub in (
            "exporter/cri/proto/api.proto",
            "exporter/cri/pb/api_pb2.py",
            "exporter/cri/pb/api_pb2_grpc.py",
        ):
            assert stub in names, f"the wheel lacks {stub}"
            assert archive.read(stub) == (ROOT / stub).read_bytes()
        assert not [n for n in names if "__pycache__" in n or n.startswith("tests/")]
        # The simulator's commands, and the files its demo loads, as package data.
        assert "demo = nodesync_sim.commands:register_demo" in text.splitlines()
        assert "sim = nodesync_sim.commands:register_sim" in text.splitlines()
        shipped = {
            "nodesync_sim/shipped/alertmanager.yml": ROOT / "deploy/alertmanager/alertmanager.yml",
            **{f"nodesync_sim/shipped/rules/{p.name}": p for p in (ROOT / "rules").glob("*.yml")},
        }
        for name, original in shipped.items():
            assert archive.read(name) == original.read_bytes(), name


_UNCOMPILED = re.compile(r"compileall\b.*?-x '([^']+)'")
_IMPORTS = """
import asyncio, importlib, json, pkgutil, sys
import exporter
for module in pkgutil.walk_packages(exporter.__path__, "exporter."):
    if not module.name.endswith(".__main__"):
        importlib.import_module(module.name)
from exporter.kube.config import kubeconfig_configuration
asyncio.run(kubeconfig_configuration(sys.argv[1]))
print(json.dumps([getattr(m, "__file__", None) or name for name, m in sys.modules.items()
                  if name.split(".")[0] == "kubernetes"]))
"""


def test_what_the_image_leaves_uncompiled_is_never_imported(
    dockerfile: Dockerfile, tmp_path: Path
) -> None:
    """The runtime stage compiles bytecode for everything but what its ``compileall -x``
    pattern names (the kubernetes client's generated API and model modules): every module of
    the product, and the one path that loads the kubernetes package (a kubeconfig whose user
    has an auth provider), import none of it."""
    runs = " ".join(i.arguments for i in dockerfile.stages[-1].all("RUN"))
    match = _UNCOMPILED.search(runs)
    assert match, "the runtime stage compiles bytecode with compileall -x"
    uncompiled = re.compile(match.group(1))

    def part(value: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

    token = f"{part({'alg': 'none'})}.{part({'exp': int(time.time()) + 3600})}.sig"
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:9"}}],
        "users": [
            {
                "name": "u",
                "user": {
                    "auth-provider": {
                        "name": "oidc",
                        "config": {
                            "client-id": "c",
                            "idp-issuer-url": "https://idp",
                            "id-token": token,
                        },
                    }
                },
            }
        ],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(kubeconfig), encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-c", _IMPORTS, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    loaded = json.loads(result.stdout)
    assert any("/kubernetes/aio/config/" in f for f in loaded), "the auth-provider path ran"
    assert [f for f in loaded if uncompiled.search(f)] == []
    # The pattern names real modules: it leaves something out.
    spec = importlib.util.find_spec("kubernetes")
    assert spec is not None
    assert spec.submodule_search_locations
    package = Path(spec.submodule_search_locations[0])
    assert any(uncompiled.search(str(p)) for p in package.rglob("*.py"))
