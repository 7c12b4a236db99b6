import pytest

from runner_kit.http import close_shared_client


@pytest.fixture(autouse=True)
async def _close_shared_client():
    """Each test runs on its own event loop; the kit's client for that loop is closed after it."""
    yield
    await close_shared_client()
