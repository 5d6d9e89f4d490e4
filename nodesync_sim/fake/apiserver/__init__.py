"""A test Kubernetes API server speaking the real REST + watch protocol on loopback.

It serves Namespaces, Nodes, Pods (with status and eviction), Leases, core/v1 Events,
PodDisruptionBudgets and nodesync's NodeRollback custom resource (nodesync.io/v1alpha1,
cluster-scoped, with a status subresource) from memory, with the behaviour clients rely on:
resourceVersions, watches with bookmarks and 410 Expired, selectors, continue tokens, 409
conflicts, graceful deletion, PDB-checked eviction, Status error bodies, bearer-token auth,
fault injection, and optionally HTTPS with a CA of its own (`tls`), so that kubectl accepts
the kubeconfig it writes; `kubectl get` gets Nodes and NodeRollbacks as a server-side Table
(`tables`).
Nothing in the product imports this package; tests and the demo do. It serves what nodesync and
the simulator call; fidelity beyond that is the real kube-apiserver's (nodesync_sim.real).

Simplifications (each documented where it lives):
- No managedFields, no server-side apply, no admission; field validation only of names,
  Lease times and durations, and an Event's involvedObject.namespace (see `validation`);
  pod specs are not made immutable.
- Graceful pod deletion is the real server's, with no kubelet behind it: a scheduled pod gets
  deletionTimestamp and stays Terminating until someone deletes it with grace 0 (a simulated
  kubelet, or the test); nothing expires by itself. Unscheduled or finished pods are deleted
  at once.
- Namespace deletion removes its objects at once (no Terminating phase).
- PDB status is not maintained but for the disruption an allowed eviction takes; eviction
  computes the budget from the current pods (see `disruption`). Controller scale is not
  modelled.
- NodeRollback is built in, not defined by a CustomResourceDefinition (apiextensions is not
  served); it is handled as apiextensions handles a custom resource with a status subresource,
  but its schema is not checked beyond metadata and `spec`/`status` being objects.
- events.k8s.io/v1, aggregated discovery, protobuf and YAML bodies are not served.
- PATCH is a merge patch or a strategic merge patch without directives (see `patch`): no JSON
  patch, which neither nodesync nor the simulator sends.
- Only Nodes and NodeRollbacks are served as a Table; other kinds are plain JSON, which kubectl
  prints with its generic NAME and AGE columns.
- A list with limit and resourceVersion="0" is paginated (the real watch cache may ignore limit).
- One privilege no real server grants, for the simulator's old nodes: `Store.creation_time`
  gives one named object, when it is created, a creationTimestamp in the past.
"""

from nodesync_sim.fake.apiserver.server import APIServer, ThreadedAPIServer, write_kubeconfig
from nodesync_sim.fake.apiserver.store import Store

__all__ = ["APIServer", "Store", "ThreadedAPIServer", "write_kubeconfig"]
