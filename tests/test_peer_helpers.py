"""The install-wait helper the real-peer and real-LangBot suites share."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tests.real_peers.peers import wait_reporting


def test_a_finished_install_returns_its_exit_code_and_reports_progress() -> None:
    seen: list[float] = []
    proc = subprocess.Popen([sys.executable, "-c", "import time, sys; time.sleep(0.3); sys.exit(3)"])
    code = wait_reporting(proc, time.monotonic(), 30, progress=seen.append, give_up=lambda: None, poll=0.1)
    assert code == 3 and seen and all(t >= 0 for t in seen)


def test_an_install_over_its_limit_is_killed_and_given_up() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])

    def give_up() -> None:
        pytest.skip("gave up")

    with pytest.raises(pytest.skip.Exception, match="gave up"):
        wait_reporting(proc, time.monotonic(), 0.2, progress=lambda t: None, give_up=give_up, poll=0.1)
    assert proc.poll() is not None  # killed, not left running
