"""The real-control-plane tier: one real cluster (testbed.real) for the whole session.

Its binaries are built from Go modules by ``python -m testbed.real build`` and cached outside
the repository; without them the tier is skipped, saying so, or fails under
``AUTOWRAP_TESTS_REQUIRE_ALL=1``, where a CI runner must not pass by skipping.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

from testbed import prerequisites
from testbed.real import launcher
from testbed.real.cluster import RealCluster


@pytest.fixture(scope="session")
def real_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealCluster]:
    missing = launcher.missing_binaries()
    if missing:
        prerequisites.unavailable(
            f"upstream binaries not built ({', '.join(missing)}): run python -m testbed.real build"
        )
    # A session ended by SIGTERM (a CI timeout, `timeout`) stops the cluster as Ctrl-C does,
    # instead of leaving it running.
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        with launcher.launch(tmp_path_factory.mktemp("real-cluster")) as cluster:
            yield cluster
    finally:
        signal.signal(signal.SIGTERM, previous)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt
