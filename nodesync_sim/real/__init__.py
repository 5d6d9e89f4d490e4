"""A real Kubernetes cluster on one machine: control plane and real nodes.

- :mod:`.pki`: a client CA and certificates made with openssl;
- :mod:`.control_plane`: etcd and kube-apiserver (nodesync_sim.real.kube_apiserver, with the Node and
  RBAC authorizers, NodeRestriction and the client CA), kube-controller-manager and
  kube-scheduler;
- :mod:`.namespace`: a private mount namespace that hides what a kubelet would change on the
  machine;
- :mod:`.node`: a real node, a containerd and a kubelet in such a namespace, joining with a client
  certificate;
- :mod:`.cluster`: all of it together, nodes joining and leaving.

Every process is a child (nodesync_sim.real.process), stopped by its PID; everything is removed again,
and :meth:`~.cluster.RealCluster.leftovers` says what was not.
"""
