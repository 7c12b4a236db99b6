import os
import sys

import pytest


def _slow_selected(config) -> bool:
    markexpr = config.option.markexpr or ""
    return os.environ.get("RUN_SLOW") == "1" or any(m in markexpr for m in ("slow", "langbot", "real_peers"))


def pytest_xdist_auto_num_workers(config):
    """How many test processes ``-n auto`` (pyproject's addopts) starts. Most tests wait on loopback
    servers and agent processes rather than compute, so a two-core machine runs six well (the default
    suite took 6.2 minutes with six, using 1.6 cores on average; 7.7 minutes with four). None for
    the slow suites (one real LangBot host, real servers and CLIs shared by a whole session), nor for
    a run of single tests (``file::test``): starting workers would take longer than the tests.
    ``RUNNERS_TEST_WORKERS`` sets the number (0: one process, as without xdist)."""
    if (n := os.environ.get("RUNNERS_TEST_WORKERS", "").strip()).isdigit():
        return int(n)
    if _slow_selected(config) or (config.args and all("::" in a for a in config.args)):
        return 0
    return min(8, 3 * (os.cpu_count() or 1))


def pytest_collection_modifyitems(config, items):
    # the minutes-long tests first: with parallel workers (pytest-xdist) one of them starting last
    # would leave the others idle while it runs alone
    items.sort(key=lambda item: "first" not in item.keywords)
    # opt in with RUN_SLOW=1, or by naming a slow suite's marker (`pytest -m langbot`, `-m real_peers`)
    if _slow_selected(config):
        return
    skip = pytest.mark.skip(reason="slow suite: set RUN_SLOW=1 (or select it: -m langbot, -m real_peers) to run")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True, scope="session")
def _sandbox_sees_test_files(tmp_path_factory):
    """Coding agents run sandboxed by default; the scripted CLIs write their logs and answers to
    files in pytest's temporary folders, so the sandbox may write there (and read the tests'
    fakes). The hostile-member tests clear this to test the sandbox as an owner gets it."""
    from runner_kit import sandbox

    old = {k: os.environ.get(k) for k in (sandbox.READ_ENV, sandbox.WRITE_ENV)}
    os.environ[sandbox.WRITE_ENV] = str(tmp_path_factory.getbasetemp())
    from tests.helpers import shared_dir

    seen = [os.path.dirname(os.path.abspath(__file__)), sys.prefix, sys.base_prefix, str(shared_dir() / "fixtures")]
    os.environ[sandbox.READ_ENV] = os.pathsep.join(seen)
    yield
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture
async def no_parked():
    """Close every agent a test left waiting on a question (runner_kit.approvals.PARKED)."""
    from runner_kit import approvals as ap

    yield
    await ap.close_all()


@pytest.fixture(autouse=True)
def fresh_group_state():
    """The kit keeps a little per-process memory about conversations (runner_kit.sessions,
    runner_kit.approvals, runner_kit.texts, runner_kit.resets): what an agent did after a question timed out, kept
    messages forgotten, answered question ids, the language each person last wrote in. Test hosts
    reuse one conversation id, so what one test leaves there must not become the next test's first
    message, whichever worker runs them."""
    yield
    from runner_kit import approvals as ap
    from runner_kit import resets, sessions, texts

    texts.forget()
    resets.forget()
    ap.REACTIONS.clear()
    ap.ANSWERED.clear()
    sessions.MISSED.clear()
    sessions.SLOTS.clear()
