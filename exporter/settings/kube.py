"""How a command reaches the API server: the kubeconfig and its context, declared once for the
agent, the controller and ``nodesync plan`` (resolved as kubectl resolves them:
exporter.kube.config.load_configuration)."""

from __future__ import annotations

from exporter.settings.declare import Setting
from exporter.settings.values import PATH, text

KUBECONFIG = Setting(
    "--kubeconfig",
    "",
    "kubeconfig file(s) to reach the API server, :-separated; empty: $KUBECONFIG, else "
    "~/.kube/config, else the pod's service account",
    PATH,
    doc="kubeconfig file(s) to reach the API server, `:`-separated and merged; empty: as "
    "kubectl, `$KUBECONFIG` (merged likewise), else `~/.kube/config` when it exists, else the "
    "pod's service account (in-cluster). In a pod none of the first three is set, so the "
    "service account is used",
)
KUBE_CONTEXT = Setting(
    "--context",
    "",
    "the kubeconfig context to use; empty: its current-context",
    text("CONTEXT"),
    doc="the kubeconfig context to use, as kubectl's `--context`; empty: the kubeconfig's "
    "`current-context`. Needs a kubeconfig (an error in-cluster)",
)
