"""Fixtures: a test API server in a background thread and real `kubernetes` clients for it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client

from nodesync_sim.fake.apiserver import ThreadedAPIServer


@pytest.fixture
def server() -> Iterator[ThreadedAPIServer]:
    with ThreadedAPIServer(bookmark_interval=0.2) as srv:
        yield srv


@pytest.fixture
def api_client(server: ThreadedAPIServer) -> Iterator[client.ApiClient]:
    with client.ApiClient(server.configuration()) as api:
        yield api


@pytest.fixture
def core(api_client: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api_client)


@pytest.fixture
def coordination(api_client: client.ApiClient) -> client.CoordinationV1Api:
    return client.CoordinationV1Api(api_client)


@pytest.fixture
def policy(api_client: client.ApiClient) -> client.PolicyV1Api:
    return client.PolicyV1Api(api_client)
