"""What every real coding-CLI suite shares: the pinned CLIs (installed once into the cache, or the
suite skips saying why), the fake model API with the runner's data directory in tmp, a local host
for the suite's ``PLUGIN``, and the rule that no process of ours outlives a test."""

from __future__ import annotations

import pytest

from runners_cli.host import LocalHost
from runners_cli.plugins import find
from tests.fakes.model_api import FakeModelAPI
from tests.helpers import children_left
from tests.real_peers.coding_clis import provide_coding_clis


@pytest.fixture(scope="module")
def clis():
    return provide_coding_clis()


@pytest.fixture
def api(tmp_path, monkeypatch):
    monkeypatch.setenv("RUNNER_KIT_DATA_DIR", str(tmp_path / "data"))
    with FakeModelAPI() as srv:
        yield srv


@pytest.fixture
def host(request):
    return LocalHost(runner_id=find(request.module.PLUGIN).runner_id)


@pytest.fixture(autouse=True)
async def _nothing_left():
    yield
    left = await children_left()
    assert not left, f"processes left behind: {left}"
    assert not tool_sleeps(), "the tool's sleep survived"


def tool_sleeps() -> set[int]:
    """Pids of the ``sleep 45`` the ``toolsleep`` scenario's tool runs (wherever it was reparented)."""
    import os
    from pathlib import Path

    out = set()
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                cmd = Path(f"/proc/{entry.name}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if cmd[:2] == [b"sleep", b"45"]:
                out.add(int(entry.name))
    return out


@pytest.fixture
def spawned(monkeypatch):
    """Every agent process a runner starts (any of the coding-agent plugins), by PID."""
    from runner_kit import process

    pids: list[int] = []
    original = process.AgentProcess.spawn.__func__

    async def spawn(cls, *args, **kwargs):
        proc = await original(cls, *args, **kwargs)
        pids.append(proc.pid)
        return proc

    monkeypatch.setattr(process.AgentProcess, "spawn", classmethod(spawn))
    return pids
