"""The demo wing: the fakes and the real binaries put together for a person to watch.

- :mod:`.chain`: the whole local chain from a scenario (fake API server, simulated nodes, a
  private containerd with a real agent, the controller, real Prometheus and Alertmanager);
- :mod:`.demo`: ``nodesync demo``, the chain with the built-in scenario (:mod:`.scenarios`);
- :mod:`.library`: ``nodesync sim scenarios``, the scenario library through the chain, decision
  by decision against each scenario's ``expect``;
- :mod:`.local_node`: ``nodesync sim node``, a private containerd with example pods and an agent.

The commands' registration (:mod:`nodesync_sim.commands`, :mod:`nodesync_sim.settings`) and the
shipped rules and route (``shipped/``, package data) stay at the package's top level: they serve
every wing.
"""
