"""The scale-out simulator: simulated nodes that behave, from the API server's point of view, as
kubelets do, for rehearsing nodesync's rules and rollback policy on a scenario.

- ``scenario``: the scenario files (``scenarios/*.json``), parsed strictly.
- ``layout``: a scenario expanded into nodes, pods and faults (pure).
- ``kubelet``: one simulated kubelet per node (Node, Lease, conditions, pods, evictions).
- ``lifecycle``: kube-controller-manager's node lifecycle controller, for the simulated nodes.
- ``runtime``: what each simulated node "runs", as the CRI would list it.
- ``agentview``: per-node agent metrics built by the agent's own sync and mapping code.
- ``simulator``: all of it together; ``cli``: ``nodesync sim wave``.
- ``overrides``: copies of the shipped rules and Alertmanager configuration with short timers.

docs/simulator.md says exactly what is simulated and what is real.
"""
