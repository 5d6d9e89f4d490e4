"""nodesync: node state sync during Kubernetes scale-out, as metrics and safe rollbacks."""

__version__ = "0.1.0"
