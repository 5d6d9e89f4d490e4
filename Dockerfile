# syntax=docker/dockerfile:1
# nodesync: one image for every role (agent, controller); the role is the first argument.

FROM python:3.11-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml constraints.txt README.md ./
COPY exporter ./exporter
RUN pip wheel --no-cache-dir --wheel-dir /wheels -c constraints.txt .

FROM python:3.11-slim-bookworm
LABEL org.opencontainers.image.title="nodesync" \
      org.opencontainers.image.description="Node state sync during Kubernetes scale-out: metrics and safe rollbacks" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index --find-links /wheels nodesync && rm -rf /wheels
# The controller runs as this user. The agent needs the CRI socket, which containerd creates
# root-owned with mode 0660: the agent's DaemonSet runs it as root (or as a group that owns the
# socket) with a read-only root filesystem and no added capabilities.
RUN useradd --system --uid 65532 --no-create-home nodesync
USER 65532
# 9617: agent metrics; 9618: controller metrics and webhook.
EXPOSE 9617 9618
ENTRYPOINT ["nodesync"]
CMD ["agent"]
