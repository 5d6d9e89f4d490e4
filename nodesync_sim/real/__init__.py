"""The real wing: launchers of the real binaries on this machine, each a child process stopped
by its PID (:mod:`.process`, the one process module), and a real Kubernetes cluster built of them.

- :mod:`.process`: child processes started and stopped the same way everywhere;
- :mod:`.removal`: a launcher's directory removed, and nothing else (never through a mount);
- :mod:`.containerd`: a private containerd (CRI v1); :mod:`.runtime_pods`: pods and containers
  on it, created the way kubelet would;
- :mod:`.prometheus`: a private Prometheus and Alertmanager;
- :mod:`.kube_apiserver`: etcd and a kube-apiserver on loopback;
- :mod:`.pki`: a client CA and certificates made with openssl;
- :mod:`.control_plane`: etcd and kube-apiserver (:mod:`.kube_apiserver`, with the Node and
  RBAC authorizers, NodeRestriction and the client CA), kube-controller-manager and
  kube-scheduler;
- :mod:`.namespace`: a private mount namespace that hides what a kubelet would change on the
  machine;
- :mod:`.node`: a real node, a containerd and a kubelet in such a namespace, joining with a client
  certificate;
- :mod:`.cluster`: all of it together, nodes joining and leaving.

Everything is removed again, and :meth:`~.cluster.RealCluster.leftovers` says what was not.
Nothing here imports the fake or the demo wing.
"""
