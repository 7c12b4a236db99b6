from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.e2e.harness import Host, outcome_of, provide_venv, record, say, table_lines


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Keep each phase's report on the item so fixtures can tell that a test failed."""
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"e2e_report_{report.when}", report)


@pytest.fixture(scope="session")
def langbot(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Host]:
    """One running LangBot 4.11.2 (and plugin runtime) with a logged-in account, shared by every
    e2e test of the session; each suite installs its plugins on it."""
    venv = provide_venv()
    started = time.monotonic()
    h = Host(venv, tmp_path_factory.mktemp("langbot-e2e"))
    say(f"logs and data under {h.root}")
    try:
        h.start()
        h.login()
    except BaseException:
        h.dump_logs()
        with contextlib.suppress(Exception):
            h.stop()
        raise
    say(f"host ready in {time.monotonic() - started:.1f}s")
    try:
        yield h
    finally:
        h.stop()


@pytest.fixture(autouse=True)
def _logs_on_failure(request: pytest.FixtureRequest, langbot: Host) -> Iterator[None]:
    """The host's and the runtime's log tails when a test (or its fixtures, e.g. a plugin install) failed."""
    yield
    reports = [getattr(request.node, f"e2e_report_{when}", None) for when in ("setup", "call")]
    if any(report is not None and report.failed for report in reports):
        langbot.dump_logs()


@pytest.fixture
def journey(request: pytest.FixtureRequest) -> Iterator[Callable[[str, str], None]]:
    """``journey(plugin, check)`` puts this test's outcome in the session's plugin x check table."""
    cells: list[tuple[str, str]] = []
    yield lambda plugin, check: cells.append((plugin, check))
    for plugin, check in cells:
        record(plugin, check, outcome_of(request.node))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    lines = table_lines()
    if lines:
        terminalreporter.section("real LangBot 4.11.2: plugin x check")
        for line in lines:
            terminalreporter.write_line(line)
