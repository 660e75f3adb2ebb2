"""Tests that start Ray. They run only inside a loopback-only network
namespace (scripts/test.sh runs them there); anywhere else they are skipped,
so that no Ray process can reach another address."""

import os
from pathlib import Path

import pytest

from spillway.cluster import network

HERE = Path(__file__).parent


def pytest_collection_modifyitems(config, items):
    if network.is_isolated():
        return
    if os.environ.get("SPILLWAY_CLUSTER_TESTS") == "required":
        raise pytest.UsageError(f"the cluster tests must run in a loopback-only namespace; this one has {network.interfaces()}")
    skip = pytest.mark.skip(reason="starts Ray: run inside a loopback-only network namespace (scripts/test.sh does)")
    for item in items:
        if HERE in Path(str(item.fspath)).parents:
            item.add_marker(skip)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from spillway.cluster import local

    with local(nodes=4, object_store_bytes="100M", directory=tmp_path_factory.mktemp("blocks")) as started:
        yield started
