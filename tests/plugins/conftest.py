"""Fixtures every plugin test module shares.

A module names its plugin (the folder) once, ``PLUGIN = "dify-agent"``, and gets:

- ``host``: a :class:`LocalHost` with that plugin's runner id;
- ``runner``: the plugin's runner bound to ``host``.

A module that needs another host (models added, no runner id) defines its own ``host`` fixture;
``runner`` then binds to that one.
"""

import pytest

from runner_kit.http import close_shared_client
from runners_cli.host import LocalHost
from runners_cli.plugins import find
from tests.helpers import make_runner


@pytest.fixture(autouse=True)
async def _close_shared_client():
    """Each test runs on its own event loop; the kit's client for that loop is closed after it."""
    yield
    await close_shared_client()


def plugin_of(request: pytest.FixtureRequest) -> str:
    """The plugin folder the requesting test module names in ``PLUGIN``."""
    plugin = getattr(request.module, "PLUGIN", None)
    if not isinstance(plugin, str) or not plugin:
        pytest.fail(f"{request.module.__name__} uses the shared host/runner fixtures but sets no PLUGIN = \"<folder>\"")
    return plugin


@pytest.fixture
def host(request: pytest.FixtureRequest) -> LocalHost:
    return LocalHost(runner_id=find(plugin_of(request)).runner_id)


@pytest.fixture
def runner(request: pytest.FixtureRequest, host: LocalHost):
    return make_runner(plugin_of(request), host)
