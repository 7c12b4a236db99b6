import pytest

from runner_kit.http import close_shared_client
from runners_cli.host import LocalHost

from .cases import CASES

MATRIX: dict[tuple[str, str], str] = {}


@pytest.fixture(params=CASES, ids=[c.plugin for c in CASES])
def case(request):
    return request.param


@pytest.fixture
def server(case):
    srv = case.start_server()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def host(case, request):
    from runners_cli.plugins import find

    local = LocalHost(runner_id=find(case.plugin).runner_id)
    if case.prepare_host is not None:
        case.prepare_host(request.getfixturevalue("server"), local)
    return local


@pytest.fixture(autouse=True)
async def _close_client():
    yield
    await close_shared_client()


def pytest_terminal_summary(terminalreporter):
    if not MATRIX:
        return
    plugins = sorted({p for p, _ in MATRIX})
    faults = sorted({f for _, f in MATRIX}, key=lambda f: (f[:4] not in ("http", "html"), f))
    tr = terminalreporter
    tr.section("fault matrix (plugin x fault -> run.failed code, R = retryable)")
    width = max(len(f) for f in faults) + 2
    tr.write_line("fault".ljust(width) + "".join(p.ljust(32) for p in plugins))
    for f in faults:
        tr.write_line(f.ljust(width) + "".join(MATRIX.get((p, f), "-").ljust(32) for p in plugins))
