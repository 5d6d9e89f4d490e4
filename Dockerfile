# syntax=docker/dockerfile:1
# nodesync: one image for both roles; the role is the first argument (agent, controller).
# Build: docker build -t nodesync:0.1.0 --build-arg REVISION=$(git rev-parse HEAD) .
# What each role needs at run time (the agent is not an ordinary pod): docs/install.md.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---- build: a wheel of nodesync and of every dependency, at the versions CI tests.
FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
COPY pyproject.toml constraints.txt README.md ./
COPY exporter ./exporter
# The simulator (nodesync demo, nodesync sim) is in the same wheel; it carries the shipped rules
# and Alertmanager route as package data, read through links into rules/ and deploy/.
COPY nodesync_sim ./nodesync_sim
COPY rules ./rules
COPY deploy/alertmanager ./deploy/alertmanager
RUN pip wheel --no-cache-dir --wheel-dir /wheels -c constraints.txt .

# ---- runtime: the wheels installed from the build stage, nothing else.
FROM ${PYTHON_IMAGE} AS runtime
ARG PYTHON_IMAGE
ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="nodesync" \
      org.opencontainers.image.description="Node state sync during Kubernetes scale-out: metrics and safe rollbacks" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.base.name="${PYTHON_IMAGE}"
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# Bytecode is compiled for what runs, not for the kubernetes client's generated API and model
# modules (48 MB of bytecode, a quarter of this layer): nodesync reads the API server with its
# own client and imports the kubernetes package only to load kubeconfig auth providers, which
# imports none of them (tests/deploy/test_dockerfile.py). They still import, from source.
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-compile --no-index --find-links /wheels nodesync \
    && python -m compileall -q -j 0 -x '/kubernetes/(aio/)?client/(api|models)/(?!__init__)' \
       "$(python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" \
    && groupadd --system --gid 65532 nodesync \
    && useradd --system --uid 65532 --gid 65532 --no-create-home --shell /usr/sbin/nologin nodesync
# Numeric, so that Kubernetes can verify runAsNonRoot. The controller runs as this user; so
# does the agent, with root's group added for containerd's socket and kubelet's directories
# (deploy/base/agent-daemonset.yaml, docs/install.md#the-agents-privileges).
USER 65532:65532
# 9617: the agent's /metrics, /healthz, /readyz. 9618: the controller's, and POST /alerts.
EXPOSE 9617 9618
ENTRYPOINT ["nodesync"]
CMD ["--help"]
