import os

import pytest


def pytest_collection_modifyitems(config, items):
    # opt in with RUN_SLOW=1, or by naming a slow suite's marker (`pytest -m langbot`, `-m real_peers`)
    markexpr = config.option.markexpr or ""
    if os.environ.get("RUN_SLOW") == "1" or any(m in markexpr for m in ("slow", "langbot", "real_peers")):
        return
    skip = pytest.mark.skip(reason="slow suite: set RUN_SLOW=1 (or select it: -m langbot, -m real_peers) to run")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
async def no_parked():
    """Close every agent a test left waiting on a question (runner_kit.approvals.PARKED)."""
    from runner_kit import approvals as ap

    yield
    await ap.close_all()
