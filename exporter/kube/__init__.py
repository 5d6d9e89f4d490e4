"""The boundary to the Kubernetes API server.

- ``config``: client configuration (kubeconfig, in-cluster service account, host + token);
  ``kubeconfig``: a kubeconfig read as kubectl reads it.
- ``api``: ``KubeAPI``, raw JSON get/list/watch (and generic requests) over aiohttp.
- ``informer``: ``Informer``, a list+watch cache of one resource with change handlers.
- ``convert``: API JSON -> exporter.model.kube dataclasses.
- ``errors``: domain errors translated from the client's and the transport's exceptions.
- ``resources``: the endpoints (``NODES``, ``LEASES``, ``PODS`` ...).
- ``observer``: what request metrics are told.

Nothing here imports the ``kubernetes`` client package (~18 MiB) unless a kubeconfig's user has
an ``auth-provider`` (config) or an exception of the package is translated (errors); nothing
here knows the agent or controller.
"""
