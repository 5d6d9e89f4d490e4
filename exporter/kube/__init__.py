"""The boundary to the Kubernetes API server.

- ``config``: client configuration (kubeconfig, in-cluster service account, host + token).
- ``api``: ``KubeAPI``, raw JSON get/list/watch (and generic requests) over ``kubernetes.aio``.
- ``informer``: ``Informer``, a list+watch cache of one resource with change handlers.
- ``convert``: API JSON -> exporter.model.kube dataclasses.
- ``errors``: domain errors translated from the client's and the transport's exceptions.
- ``resources``: the endpoints (``NODES``, ``LEASES``, ``PODS`` ...).
- ``observer``: what request metrics are told.

Only this package imports the kubernetes client; nothing here knows the agent or controller.
"""
