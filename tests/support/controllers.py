"""pytest plugin: ``nodesync controller`` subprocesses on the real kube-apiserver, for the
acceptance tests of rollbacks as NodeRollbacks (tests/controller/test_real_*.py). This module
registers the fixtures; what they stage is in tests/support: ``acceptance`` (the names, flags and
timings), ``controller_rbac``, ``controller_process`` (a controller, the warm pool),
``rollback_requests`` (alerts, payloads, where a proxy stops a controller), ``scene`` and
``scene_record`` (what the cluster and the audit log say about a scene).

Fixtures:

- ``controller_rbac`` (module): the shared server serving NodeRollbacks, with the controller's
  shipped RBAC applied (deploy/base/controller-rbac.yaml and the delete-nodes component), so the
  controllers run as the ``nodesync-controller`` service account with exactly the permissions
  they ship with. Removed after the module, and checked to be refused again.
- ``warm_pool`` (module): interpreters started ahead with the controller's modules imported
  (tests/support/warm_start.py), each of which becomes one ``python -m exporter controller``.
- ``scene``: one test's world on that server (:class:`Scene`): uniquely named Nodes with their
  Leases and pods, controllers (each with its own journal, port and optional
  :class:`~tests.support.kubeproxy.KubeProxy`), and the parts nobody runs on this server, played
  by the test: Alertmanager (:meth:`Scene.deliver`), the node's agent (cleanup answers) and the
  kubelet (a pod evicted gets a deletionTimestamp; the kubelet's part is to delete it with grace
  0). After the test every process is stopped by its PID and every object deleted.

The leader Lease lives in the test's own namespace (with the ``ha`` overlay's leader-election
Role copied there), so each test has its own election.
"""

from __future__ import annotations

from tests.support.controller_process import warm_pool
from tests.support.controller_rbac import controller_rbac
from tests.support.scene import scene

__all__ = ["controller_rbac", "scene", "warm_pool"]
