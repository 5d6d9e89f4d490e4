"""The benchmarks: each scenario is a module run as ``python -m bench.<name>``, printing one
JSON document of figures; docs/performance.md records them with the commands.

- bench.agent_sync: one agent sync cycle and one scrape at 110 pods on a real containerd;
- bench.agent_node_objects: the agent's watches of its own Node, Lease and pods;
- bench.controller_sync: the controller syncing 1000 Nodes and Leases, then renewals;
- bench.storm: a scale-out storm against the controller and its rollback hook (its parts in
  bench.storm_*; bench.storm_alertmanager and bench.storm_floor run as its child processes).

What they share (child processes, the test API server's client, samplers, statistics) is
bench.harness.
"""
