"""What the benchmarks share: the scenarios in ``bench/`` are built from these parts.

- :mod:`bench.harness.processes`: child processes (``nodesync ...`` and the benchmarks' own
  helper processes), started from this tree's code and stopped by their PID; and a benchmark's
  main coroutine run so that SIGTERM stops it as Ctrl-C does (its cleanups run);
- :mod:`bench.harness.readiness`: waiting, without blocking the event loop, until a child
  answers HTTP, opens its port or writes a file, and timing how long that took;
- :mod:`bench.harness.apiserver`: ``nodesync sim apiserver`` in a child process, and the HTTP
  client the benchmarks talk to it with (create, patch, watch, its request counters);
- :mod:`bench.harness.objects`: the Nodes and Leases kubelet writes;
- :mod:`bench.harness.pacing`: requests on a schedule, and a bound on those in flight;
- :mod:`bench.harness.samplers`: what a process uses (RSS, peak RSS, CPU), sampled or read
  once, and the API server's counters over time;
- :mod:`bench.harness.exposition`: reading values out of a Prometheus text exposition;
- :mod:`bench.harness.stats`: percentiles and latency summaries;
- :mod:`bench.harness.rates`: a writer's rate over time against its token bucket's promise;
- :mod:`bench.harness.report`: what every result says about the machine it ran on.
"""
