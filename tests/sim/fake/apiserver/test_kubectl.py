"""The test API server over HTTPS, as kubectl uses it: the kubeconfig it writes (server, CA,
token) is accepted, ``kubectl get`` gets its columns as a server-side Table, and ``kubectl
describe node`` finds everything it reads."""

from __future__ import annotations

import json
import re
import shutil
import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodesync_sim.fake.apiserver import ThreadedAPIServer
from nodesync_sim.fake.apiserver.tables import human_duration, wants_table
from nodesync_sim.fake.apiserver.tls import ServingCertificate, make_serving_certificate

KUBECTL_ACCEPT = (
    "application/json;as=Table;v=v1;g=meta.k8s.io,"
    "application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
)


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> ServingCertificate:
    return make_serving_certificate(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def https_server(tls: ServingCertificate) -> Iterator[ThreadedAPIServer]:
    with ThreadedAPIServer(tls=tls) as srv:
        srv.store.create(
            "nodes",
            {
                "metadata": {
                    "name": "n1",
                    "labels": {"node-role.kubernetes.io/control-plane": ""},
                },
                "spec": {"unschedulable": True},
                "status": {
                    "conditions": [{"type": "Ready", "status": "True"}],
                    "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
                    "nodeInfo": {"kubeletVersion": "v1.32.0", "osImage": "Debian 12"},
                },
            },
        )
        srv.store.create("nodes", {"metadata": {"name": "n2"}})
        srv.store.create(
            "pods",
            {
                "metadata": {"name": "p1", "namespace": "default"},
                "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "busybox"}]},
            },
        )
        yield srv


def kubectl(kubeconfig: Path, *args: str) -> str:
    binary = shutil.which("kubectl")
    assert binary, "kubectl is needed"
    done = subprocess.run(
        [binary, "--kubeconfig", str(kubeconfig), "--request-timeout", "20s", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def rows(text: str) -> list[list[str]]:
    return [re.split(r"\s{2,}", line.strip()) for line in text.strip().splitlines()]


def test_the_kubeconfig_names_the_https_server_its_ca_and_a_token(
    https_server: ThreadedAPIServer, tls: ServingCertificate, tmp_path: Path
) -> None:
    config = json.loads(https_server.write_kubeconfig(tmp_path / "kubeconfig").read_text())
    cluster = config["clusters"][0]["cluster"]
    assert cluster["server"] == https_server.url
    assert https_server.url.startswith("https://127.0.0.1:")
    assert cluster["certificate-authority-data"]
    assert config["users"][0]["user"]["token"] == https_server.token
    # The certificate is the CA's, for 127.0.0.1: verified, hostname checked.
    request = urllib.request.Request(
        https_server.url + "/api/v1/nodes",
        headers={"Authorization": f"Bearer {https_server.token}"},
    )
    with urllib.request.urlopen(request, context=tls.client_context(), timeout=10) as answer:
        assert json.load(answer)["kind"] == "NodeList"
    # Anyone else's CA does not trust it.
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        urllib.request.urlopen(https_server.url + "/version", context=ssl.create_default_context())


def test_kubectl_get_nodes_prints_the_servers_columns(
    https_server: ThreadedAPIServer, tmp_path: Path
) -> None:
    kubeconfig = https_server.write_kubeconfig(tmp_path / "kubeconfig")
    table = rows(kubectl(kubeconfig, "get", "nodes"))
    assert table[0] == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert table[1][:3] == ["n1", "Ready,SchedulingDisabled", "control-plane"]
    assert table[1][4] == "v1.32.0"
    assert table[2][:3] == ["n2", "Unknown", "<none>"]
    wide = rows(kubectl(kubeconfig, "get", "node", "n1", "-o", "wide"))
    assert wide[0][5:7] == ["INTERNAL-IP", "EXTERNAL-IP"]
    assert wide[1][5:8] == ["10.0.0.1", "<none>", "Debian 12"]
    # (Without the server's Table kubectl prints NAME and AGE only.)
    assert kubectl(kubeconfig, "get", "nodes", "-o", "name").split() == ["node/n1", "node/n2"]
    labels = rows(kubectl(kubeconfig, "get", "node", "n1", "--show-labels"))
    assert labels[1][-1] == "node-role.kubernetes.io/control-plane="


def test_kubectl_get_noderollbacks_prints_the_crds_printer_columns(
    https_server: ThreadedAPIServer, tmp_path: Path
) -> None:
    https_server.store.create(
        "noderollbacks",
        {
            "apiVersion": "nodesync.io/v1alpha1",
            "kind": "NodeRollback",
            "metadata": {"name": "n1-abc"},
            "spec": {"nodeName": "n1", "action": "rollback_node"},
            "status": {"phase": "Running", "step": "drain", "reason": "node_not_ready"},
        },
    )
    kubeconfig = https_server.write_kubeconfig(tmp_path / "kubeconfig")
    table = rows(kubectl(kubeconfig, "get", "noderollbacks.nodesync.io"))
    assert table[0] == ["NAME", "NODE", "ACTION", "PHASE", "STEP", "AGE"]
    assert table[1][:5] == ["n1-abc", "n1", "rollback_node", "Running", "drain"]
    wide = rows(kubectl(kubeconfig, "get", "noderollbacks.nodesync.io", "-o", "wide"))
    assert wide[0][5] == "REASON"
    assert wide[1][5] == "node_not_ready"


def test_kubectl_describe_node_shows_the_node_and_its_pods(
    https_server: ThreadedAPIServer, tmp_path: Path
) -> None:
    kubeconfig = https_server.write_kubeconfig(tmp_path / "kubeconfig")
    described = kubectl(kubeconfig, "describe", "node", "n1")
    assert re.search(r"^Name:\s+n1$", described, re.M), described
    assert re.search(r"^Roles:\s+control-plane$", described, re.M), described
    assert re.search(r"^Unschedulable:\s+true$", described, re.M), described
    assert re.search(r"^\s+default\s+p1\s", described, re.M), described


def test_a_table_is_what_the_first_media_type_asks_for() -> None:
    assert wants_table(KUBECTL_ACCEPT)
    assert not wants_table("application/json")
    assert not wants_table("application/json, application/json;as=Table;v=v1;g=meta.k8s.io")
    assert not wants_table("application/json;as=Table;v=v1beta1;g=meta.k8s.io")
    assert not wants_table("")


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (-3, "<invalid>"),
        (-1, "0s"),
        (59, "59s"),
        (119, "119s"),
        (120, "2m"),
        (125, "2m5s"),
        (600, "10m"),
        (3 * 3600, "3h"),
        (3 * 3600 + 60, "3h1m"),
        (47 * 3600, "47h"),
        (49 * 3600, "2d1h"),
        (9 * 86400, "9d"),
        (3 * 365 * 86400 + 86400, "3y1d"),
        (10 * 365 * 86400, "10y"),
    ],
)
def test_ages_read_as_kubectl_prints_them(seconds: float, shown: str) -> None:
    assert human_duration(seconds) == shown
