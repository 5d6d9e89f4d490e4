"""A test Kubernetes API server speaking the real REST + watch protocol on loopback.

It serves Namespaces, Nodes, Pods (with status and eviction), Leases, core/v1 Events and
PodDisruptionBudgets from memory, with the behaviour clients rely on: resourceVersions,
watches with bookmarks and 410 Expired, selectors, continue tokens, 409 conflicts, graceful
deletion, PDB-checked eviction, Status error bodies, bearer-token auth, and fault injection.
Nothing in the product imports this package; tests and the demo do.
"""

from exporter.sim.apiserver.server import APIServer, ThreadedAPIServer, write_kubeconfig
from exporter.sim.apiserver.store import Store

__all__ = ["APIServer", "Store", "ThreadedAPIServer", "write_kubeconfig"]
