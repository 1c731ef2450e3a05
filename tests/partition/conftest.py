"""Fixtures of the partition tests: worker hosts in network namespaces over the
pipeline's, the store's and purchasing's fixtures (reused from their packages, not
copied)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.pipeline.conftest import pipeline  # noqa: F401  (the notification pipeline)
from tests.purchasing.conftest import mailbox, purchasing, sftp  # noqa: F401  (suppliers)
from tests.store.conftest import database, store  # noqa: F401  (the eSIM store)
from tests.support import netns

#: Why these tests cannot run here (printed as the skip reason), or None.
UNAVAILABLE = netns.unavailable()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Skip every partition test, with the reason, where namespaces cannot be made."""
    if UNAVAILABLE is None:
        return
    print(f"partition tests skipped: {UNAVAILABLE}")
    for item in items:
        if item.path.parent == Path(__file__).parent:
            item.add_marker(pytest.mark.skip(reason=UNAVAILABLE))


@pytest.fixture
def network(migrated_database: str, redis_url: str, redis6_url: str,
            tmp_path: Path) -> Iterator[netns.Network]:
    """Two worker hosts reaching the test's PostgreSQL and Redis over a link each, and the
    mocks' store (a Redis of its own, MOCK_STORE_URL) over an uplink a partition spares.
    Their processes' output is in ``tmp_path``."""
    with netns.worker_hosts(2, {"DATABASE_URL": migrated_database, "REDIS_URL": redis_url},
                            {"MOCK_STORE_URL": redis6_url}, tmp_path) as network:
        yield network
