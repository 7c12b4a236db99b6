import os

import pytest


def pytest_collection_modifyitems(config, items):
    if os.environ.get("RUN_SLOW") == "1":
        return
    skip = pytest.mark.skip(reason="slow suite: set RUN_SLOW=1 to run")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
async def no_parked():
    """Close every agent a test left waiting on a question (runner_kit.approvals.PARKED)."""
    from runner_kit import approvals as ap

    yield
    await ap.close_all()
