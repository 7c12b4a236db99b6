"""A bubblewrap that never finishes starting: the probe gives up after its timeout, says so, and
leaves none of bwrap's processes behind (its child in the new namespaces waits on it for ever)."""

from __future__ import annotations

import os
import signal
import sys

import pytest

from runner_kit import sandbox
from runner_kit.process import alive

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="bubblewrap is Linux only")


async def test_a_probe_that_times_out_leaves_no_process(tmp_path, monkeypatch):
    pids = tmp_path / "child.pid"
    stuck = tmp_path / "bwrap"
    # like bwrap stuck in its setup: a child waiting on its parent, the parent waiting too
    stuck.write_text(f"#!/bin/sh\nsleep 3600 & echo $! > {pids}\nwait\n")
    stuck.chmod(0o755)
    monkeypatch.setattr(sandbox, "PROBE_TIMEOUT", 0.5)
    sandbox.forget_probes()
    try:
        why = await sandbox.probe(str(stuck))
    finally:
        sandbox.forget_probes()
    assert why is not None and "did not start" in why
    child = int(pids.read_text())
    try:
        assert not alive(child), "bwrap's waiting child was left running"
    finally:
        if alive(child):
            os.kill(child, signal.SIGKILL)
