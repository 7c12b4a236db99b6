"""What every real-peer suite needs: a Python venv installed once into the cache under a lock, a
free loopback port, a server process started in its own group and stopped by its PID, and a log
tail for the failure message. Install problems skip the suite and say why; a server that starts
but misbehaves fails it."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import httpx
import pytest

LOOPBACK = "127.0.0.1"
CACHE = "~/.cache/langbot-agent-runners"


def say(label: str, text: str) -> None:
    print(f"[{label}] {text}", file=sys.stderr, flush=True)


def tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def cached_path(env_var: str, default_name: str) -> Path:
    """``$env_var`` or ``~/.cache/langbot-agent-runners/<default_name>``."""
    return Path(os.environ.get(env_var) or f"{CACHE}/{default_name}").expanduser().resolve()


def _run_logged(args: list[str], log: Path, label: str, what: str, deadline: float, limit: float) -> None:
    with open(log, "a", encoding="utf-8") as out:
        out.write(f"\n$ {' '.join(args)}\n")
        out.flush()
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = proc.wait(timeout=max(deadline - time.monotonic(), 1.0))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            pytest.skip(f"{label}: {what} did not finish within {limit:.0f}s; see {log}")
    if code != 0:
        pytest.skip(f"{label}: {what} failed (exit {code}); see {log}:\n{tail(log)}")


def wait_reporting(proc: subprocess.Popen, started: float, limit: float, *,
                   progress: Callable[[float], None], give_up: Callable[[], None], poll: float = 15.0) -> int:
    """Wait for a long install step: ``progress(seconds so far)`` every ``poll`` s; once ``limit`` seconds
    have passed since ``started`` the process is killed and ``give_up()`` (a pytest.skip/fail) is
    called. The process never outlives this call. Returns its exit code."""
    try:
        while True:
            try:
                return proc.wait(timeout=poll)
            except subprocess.TimeoutExpired:
                if time.monotonic() - started > limit:
                    proc.kill()
                    proc.wait()
                    give_up()
                progress(time.monotonic() - started)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def provide_venv(
    venv: Path,
    packages: Sequence[str],
    *,
    label: str,
    command: str,
    marker: str = "langbot-install-complete.json",
    timeout: float = 1200.0,
    timings: dict[str, float] | None = None,
) -> Path:
    """``venv`` with ``packages`` installed by ``uv`` (Python 3.11), reused while its marker file
    names the same packages; ``command`` is the console script that proves the install."""
    key = json.dumps({"packages": sorted(packages), "python": "3.11"}, sort_keys=True)

    def ready() -> bool:
        try:
            done = json.loads((venv / marker).read_text(encoding="utf-8")).get("key") == key
        except (OSError, ValueError):
            return False
        return done and (venv / "bin" / command).is_file()

    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f"{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another run may be installing right now
        if ready():
            if timings is not None:
                timings["install"] = 0.0
            return venv
        uv = shutil.which("uv")
        if uv is None:
            pytest.skip(f"{label}: `uv` is not installed (plain pip's resolver is too slow for this install)")
        log = venv.parent / f"{venv.name}-install.log"
        started = time.monotonic()
        deadline = started + timeout
        say(label, f"installing {' '.join(packages)} into {venv} (log: {log})")
        if not (venv / "bin" / "python").is_file():
            _run_logged([uv, "venv", str(venv), "--python", "3.11", "--allow-existing"], log, label,
                        "uv venv --python 3.11", deadline, timeout)
        _run_logged([uv, "pip", "install", "--python", str(venv / "bin" / "python"), *packages], log, label,
                    "uv pip install " + " ".join(packages), deadline, timeout)
        if not (venv / "bin" / command).is_file():
            pytest.skip(f"{label}: the install left no {command} command in {venv}; see {log}")
        took = time.monotonic() - started
        if timings is not None:
            timings["install"] = took
        (venv / marker).write_text(json.dumps({"key": key, "seconds": round(took, 1)}), encoding="utf-8")
        say(label, f"installed in {took:.1f}s")
        return venv


def stop_group(proc: subprocess.Popen, grace: float = 20.0) -> None:
    """Stop a server started with ``start_new_session=True`` and everything in its process group,
    addressed by its PID: SIGTERM, then SIGKILL after ``grace`` seconds and for any stragglers."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    try:  # workers that outlived the leader are still in its group
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def wait_until_up(proc: subprocess.Popen, url: str, log: Path, label: str, timeout: float,
                  ok: Callable[[httpx.Response], bool] = lambda r: r.status_code == 200) -> float:
    """Poll ``url`` until ``ok``; the server exiting or not answering in time fails the test with
    its log tail. Returns the seconds it took."""
    started = time.monotonic()
    while True:
        if proc.poll() is not None:
            pytest.fail(f"{label}: the server exited with {proc.returncode} before answering {url}:\n{tail(log)}")
        if time.monotonic() - started > timeout:
            pytest.fail(f"{label}: the server did not answer {url} within {timeout:.0f}s:\n{tail(log)}")
        try:
            if ok(httpx.get(url, timeout=2)):
                return time.monotonic() - started
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
