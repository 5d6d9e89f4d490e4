"""The fake wing: stand-ins written in Python for what the product talks to.

- :mod:`.apiserver`: a test Kubernetes API server in memory, serving what the product and the
  simulator call (fidelity comes from the real kube-apiserver, :mod:`nodesync_sim.real`);
- :mod:`.scaleout`: simulated nodes (kubelets, the node lifecycle controller, per-node agent
  metrics) driven by a scenario.

The simulated nodes may start real pods (:mod:`nodesync_sim.real.runtime_pods`) for a scenario's
real node; nothing here imports the demo wing.
"""
