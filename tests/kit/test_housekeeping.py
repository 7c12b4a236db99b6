"""Housekeeping: idle workspaces and HOMEs go, nothing in use or outside the default location does."""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runner_kit import housekeeping as hk
from runner_kit.errors import RunnerError
from runner_kit.process import _digest, data_dir, private_home

P = "claude-code"
DAY = 86400.0
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def data(tmp_path, monkeypatch):
    monkeypatch.setenv("RUNNER_KIT_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data" / P


def workspace(seed: str, *, kib: int = 64, mark: bool = True) -> tuple[Path, Path]:
    """A default workspace with a file of ``kib`` KiB and its HOME holding a session store."""
    ws = data_dir(P) / "workspaces" / _digest(seed)
    ws.mkdir(parents=True)
    (ws / "main.py").write_bytes(b"x" * (kib * 1024))
    home = private_home(P, ws)
    (home / ".claude" / "projects").mkdir(parents=True)
    (home / ".claude" / "projects" / "session.jsonl").write_text('{"type":"user"}\n')
    if mark:
        hk.mark_used(P, ws)
    return ws, home


def age(ws: Path, days: float) -> None:
    """Make the workspace's last recorded use ``days`` days ago."""
    marker = data_dir(P) / "last-used" / _digest(str(ws.resolve()))
    then = time.time() - days * DAY
    os.utime(marker, (then, then))


def child(code: str, *args: str) -> subprocess.Popen[str]:
    """Another plugin process sharing the data directory; returns once it printed its first line."""
    proc = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, text=True, cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 20)
    if not ready or proc.stdout.readline().strip() != "ready":
        proc.kill()
        proc.wait()
        raise AssertionError("the other process did not start")
    return proc


def stop(proc: subprocess.Popen[str]) -> None:
    proc.kill()
    proc.wait(5)


# --- what goes and what stays -----------------------------------------------------------------


def test_an_idle_workspace_goes_with_its_home_and_a_recent_one_stays():
    idle, idle_home = workspace("idle", kib=256)
    recent, recent_home = workspace("recent")
    age(idle, 10)

    done = hk.sweep(P, 7)

    assert not idle.exists() and not idle_home.exists()
    assert (recent / "main.py").exists() and (recent_home / ".claude" / "projects" / "session.jsonl").exists()
    assert (done.workspaces, done.homes, done.kept, done.busy, done.errors) == (1, 1, 1, 0, 0)
    assert done.bytes >= 256 * 1024
    assert not (data_dir(P) / "last-used" / idle.name).exists()  # nothing of it is left behind
    assert sorted(p.name for p in (data_dir(P) / "last-used").iterdir()) == [_digest(str(recent.resolve()))]


def test_a_workspace_never_marked_is_judged_by_when_its_files_changed():
    ws, home = workspace("legacy", mark=False)

    assert hk.sweep(P, 7, now=time.time() + 3 * DAY).workspaces == 0
    assert ws.exists()
    assert hk.sweep(P, 7, now=time.time() + 8 * DAY).workspaces == 1
    assert not ws.exists() and not home.exists()


def test_zero_or_no_days_never_sweeps_and_bad_days_are_refused():
    ws, _ = workspace("w")
    for days in (0, -1, 0.0, "0", float("nan"), float("inf")):
        assert hk.sweep(P, days, now=time.time() + 1000 * DAY) == hk.Swept()
    assert ws.exists()
    with pytest.raises(RunnerError) as err:
        hk.sweep(P, "a week")
    assert err.value.code == "config.invalid" and "a week" in str(err.value)
    assert ws.exists()
    assert hk.sweep(P, "7", now=time.time() + 8 * DAY).workspaces == 1  # the form's text is a number too


def test_a_sweep_of_nothing_creates_nothing(tmp_path):
    assert hk.sweep("nobody-here", 1, now=time.time() + 9 * DAY) == hk.Swept()
    assert not (tmp_path / "data" / "nobody-here").exists()


def test_folders_not_named_by_the_kit_are_never_touched(data):
    ws, _ = workspace("w")
    age(ws, 30)
    mine = data / "workspaces" / "my-notes"
    mine.mkdir()
    (data / "homes" / "README").write_text("kept")
    hk.sweep(P, 7, now=time.time() + 30 * DAY)
    assert not ws.exists()
    assert mine.is_dir() and (data / "homes" / "README").read_text() == "kept"


# --- in use -------------------------------------------------------------------------------------


async def test_a_workspace_in_use_in_this_process_is_kept_until_the_run_ends():
    ws, home = workspace("busy")
    later = time.time() + 30 * DAY
    async with hk.in_use(P, ws):
        done = await asyncio.to_thread(hk.sweep, P, 7, now=later)
        assert (done.busy, done.workspaces) == (1, 0)
        assert (ws / "main.py").exists() and home.exists()
    assert hk.sweep(P, 7, now=later).workspaces == 1
    assert not ws.exists() and not home.exists()


async def test_in_use_marks_the_workspace_used_when_the_run_starts_and_ends():
    ws, _ = workspace("w")
    age(ws, 10)
    async with hk.in_use(P, ws):
        age(ws, 10)  # a run of ten days
    assert hk.sweep(P, 7).workspaces == 0 and ws.exists()


def test_a_workspace_locked_by_another_process_is_kept():
    ws, home = workspace("elsewhere")
    code = ("import asyncio, sys\nfrom pathlib import Path\nfrom runner_kit.housekeeping import in_use\n"
            "async def main():\n"
            "    async with in_use(sys.argv[1], Path(sys.argv[2])):\n"
            "        print('ready', flush=True)\n"
            "        await asyncio.sleep(60)\n"
            "asyncio.run(main())\n")
    proc = child(code, P, str(ws))
    try:
        later = time.time() + 30 * DAY
        done = hk.sweep(P, 7, now=later)
        assert (done.busy, done.workspaces, done.homes) == (1, 0, 0)
        assert (ws / "main.py").exists() and home.exists()
    finally:
        stop(proc)
    assert hk.sweep(P, 7, now=later).workspaces == 1  # its lock went with the process
    assert not ws.exists()


async def test_a_run_waits_while_another_process_removes_its_workspace_then_gets_it_back(data):
    ws, _ = workspace("w")
    lock = data / "locks" / _digest(str(ws.resolve()))
    lock.parent.mkdir(exist_ok=True)
    code = ("import fcntl, os, sys, time\n"
            "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\n"
            f"fcntl.flock(fd, {fcntl.LOCK_EX})\n"
            "print('ready', flush=True)\ntime.sleep(60)\n")
    proc = child(code, str(lock))
    entered = asyncio.Event()

    async def run() -> bool:
        async with hk.in_use(P, ws):
            entered.set()
            return ws.is_dir()

    try:
        task = asyncio.create_task(run())
        await asyncio.sleep(0.15)
        assert not entered.is_set()  # the other process's sweep holds the workspace
        await asyncio.to_thread(shutil.rmtree, ws)
    finally:
        stop(proc)
    assert await asyncio.wait_for(task, 5) is True  # the run got a workspace folder to work in


# --- never outside the default location, never through a link --------------------------------


def test_a_configured_workspace_is_never_touched_and_its_home_goes_only_when_it_is_gone(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "src.py").write_text("print('mine')")
    hk.mark_used(P, project)
    home = private_home(P, project)
    (home / "session.jsonl").write_text("{}")
    age(project, 100)

    done = hk.sweep(P, 7, now=time.time() + 100 * DAY)
    assert (project / "src.py").read_text() == "print('mine')"
    assert (home / "session.jsonl").exists()
    assert done.workspaces == 0 and done.homes == 0

    (project / "src.py").unlink()
    project.rmdir()  # the owner removed it
    assert hk.sweep(P, 7, now=time.time() + 100 * DAY).homes == 1
    assert not home.exists()


def test_links_inside_a_workspace_are_removed_not_followed(tmp_path):
    outside = tmp_path / "host-dir"
    outside.mkdir()
    (outside / "precious.txt").write_text("keep me")
    secret = tmp_path / "host-file"
    secret.write_text("keep me too")
    neighbour, neighbour_home = workspace("neighbour")
    ws, home = workspace("agent")
    (ws / "sub").mkdir()
    (ws / "to-dir").symlink_to(outside)
    (ws / "sub" / "to-file").symlink_to(secret)
    (ws / "to-neighbour").symlink_to(neighbour)
    (ws / "to-data-root").symlink_to(data_dir(P).parent)
    (home / "to-dir").symlink_to(outside)
    os.link(secret, ws / "hard-link")
    age(ws, 30)

    done = hk.sweep(P, 7)

    assert done.workspaces == 1 and not ws.exists() and not home.exists()
    assert (outside / "precious.txt").read_text() == "keep me"
    assert secret.read_text() == "keep me too"
    assert (neighbour / "main.py").exists() and neighbour_home.exists()


def test_a_workspace_that_is_itself_a_link_is_only_unlinked(tmp_path, data):
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "file.txt").write_text("keep")
    link = data / "workspaces" / _digest("linked")
    link.parent.mkdir(parents=True)
    link.symlink_to(target)

    done = hk.sweep(P, 7, now=time.time() + 30 * DAY)

    assert done.workspaces == 1 and not os.path.lexists(link)
    assert (target / "file.txt").read_text() == "keep"


def test_an_agent_cannot_keep_its_workspace_alive_from_inside():
    ws, _ = workspace("agent")
    age(ws, 30)
    # what the agent can reach: its workspace (and its HOME): fake markers, dates in the future
    future = time.time() + 3650 * DAY
    for fake in (ws / "last-used" / ws.name, ws / ".last-used", ws / "locks" / ws.name):
        fake.parent.mkdir(exist_ok=True)
        fake.write_text(str(ws))
        os.utime(fake, (future, future))
    os.utime(ws, (future, future))

    assert hk.sweep(P, 7).workspaces == 1
    assert not ws.exists()


def test_a_date_in_the_future_does_not_keep_a_never_marked_workspace():
    ws, _ = workspace("legacy", mark=False)
    future = time.time() + 3650 * DAY
    os.utime(ws / "main.py", (future, future))
    os.utime(ws, (future, future))
    assert hk.sweep(P, 7, now=time.time() + 8 * DAY).workspaces == 1


def test_orphan_homes_go_when_idle_and_recent_ones_stay(data):
    old_orphan = data / "homes" / _digest("a workspace removed by hand")
    new_orphan = data / "homes" / _digest("another")
    for home in (old_orphan, new_orphan):
        (home / ".codex").mkdir(parents=True)
        (home / ".codex" / "history.jsonl").write_text("{}")
    hk.mark_used(P, Path("/nonexistent/workspace"))  # a marker naming a folder that is gone
    gone_key = _digest("/nonexistent/workspace")
    (data / "homes" / gone_key).mkdir()
    os.utime(data / "last-used" / gone_key, (time.time() - 30 * DAY,) * 2)

    done = hk.sweep(P, 7, now=time.time() + 3 * DAY)

    assert done.homes == 1 and not (data / "homes" / gone_key).exists()
    assert old_orphan.exists() and new_orphan.exists()  # three days: both still recent
    assert hk.sweep(P, 7, now=time.time() + 8 * DAY).homes == 2
    assert not old_orphan.exists() and not new_orphan.exists()
    assert not (data / "last-used" / gone_key).exists()


def test_read_only_and_unreadable_folders_an_agent_left_are_removed():
    ws, _ = workspace("go-cache")
    mod = ws / "pkg" / "mod" / "example.com@v1"
    mod.mkdir(parents=True)
    (mod / "go.mod").write_text("module example.com")
    os.chmod(mod / "go.mod", 0o444)
    os.chmod(mod, 0o555)
    os.chmod(mod.parent, 0o555)
    closed = ws / "closed"
    closed.mkdir()
    (closed / "inside").write_text("x")
    os.chmod(closed, 0)
    age(ws, 30)

    done = hk.sweep(P, 7)
    assert (done.workspaces, done.errors) == (1, 0) and not ws.exists()


def test_one_entry_that_cannot_be_removed_does_not_stop_the_others(monkeypatch, caplog):
    stuck, _ = workspace("stuck")
    others = [workspace(f"w{i}")[0] for i in range(3)]
    for ws in (stuck, *others):
        age(ws, 30)
    real = hk._remove

    def failing(path: Path) -> int:
        if path == stuck:
            raise PermissionError(1, "Operation not permitted")
        return real(path)

    monkeypatch.setattr(hk, "_remove", failing)
    with caplog.at_level(logging.WARNING, logger="runner_kit.housekeeping"):
        done = hk.sweep(P, 7)
    assert (done.workspaces, done.errors) == (3, 1)
    assert stuck.exists() and not any(ws.exists() for ws in others)
    assert "Operation not permitted" in caplog.text and stuck.name in caplog.text


# --- odd file systems ---------------------------------------------------------------------------


async def test_without_locks_a_run_is_still_held_in_this_process_and_said_once(data, monkeypatch, caplog):
    monkeypatch.setattr(hk, "_said", set())
    ws, _ = workspace("w")
    (data / "locks").write_text("not a folder")  # no lock file can be made under it
    with caplog.at_level(logging.WARNING, logger="runner_kit.housekeeping"):
        async with hk.in_use(P, ws), hk.in_use(P, ws):
            done = await asyncio.to_thread(hk.sweep, P, 7, now=time.time() + 30 * DAY)
            assert (done.busy, done.workspaces) == (1, 0) and ws.exists()
    assert caplog.text.count("cannot lock workspaces") == 1
    assert hk.sweep(P, 7, now=time.time() + 30 * DAY).workspaces == 1


def test_mark_used_never_raises_where_it_cannot_write(data, monkeypatch, caplog):
    monkeypatch.setattr(hk, "_said", set())
    ws, _ = workspace("w", mark=False)
    (data / "last-used").write_text("not a folder")
    with caplog.at_level(logging.WARNING, logger="runner_kit.housekeeping"):
        hk.mark_used(P, ws)
        hk.mark_used(P, ws)
    assert caplog.text.count("cannot record workspace use") == 1


# --- in the background --------------------------------------------------------------------------


async def test_maybe_sweep_runs_at_most_once_an_hour(data):
    clock = [1000.0]
    first, _ = workspace("first")
    age(first, 30)

    task = hk.maybe_sweep(P, 7, clock=lambda: clock[0])
    assert task is not None
    assert (await task).workspaces == 1 and not first.exists()

    second, _ = workspace("second")
    age(second, 30)
    clock[0] += 3500
    assert hk.maybe_sweep(P, 7, clock=lambda: clock[0]) is None
    assert second.exists()
    clock[0] += 200
    task = hk.maybe_sweep(P, 7, clock=lambda: clock[0])
    assert task is not None and (await task).workspaces == 1
    assert not second.exists()


async def test_maybe_sweep_never_raises(monkeypatch, caplog):
    def broken(*_: object, **__: object) -> hk.Swept:
        raise OSError("disk on fire")

    monkeypatch.setattr(hk, "sweep", broken)
    with caplog.at_level(logging.WARNING, logger="runner_kit.housekeeping"):
        task = hk.maybe_sweep(P, 7)
        assert task is not None and await task is None
    assert "disk on fire" in caplog.text
    assert hk.maybe_sweep("other", "not a number") is None
    assert hk.maybe_sweep("other", 0) is None


def test_maybe_sweep_without_an_event_loop_does_nothing():
    ws, _ = workspace("w")
    age(ws, 30)
    assert hk.maybe_sweep(P, 7) is None and ws.exists()


# --- measuring ---------------------------------------------------------------------------------


def test_disk_use_counts_workspaces_and_homes(data):
    assert hk.disk_use(P) == {"root": str(data), "workspaces": {"count": 0, "bytes": 0},
                              "homes": {"count": 0, "bytes": 0}}
    workspace("a", kib=100)
    workspace("b", kib=300)
    use = hk.disk_use(P)
    print("\ndisk_use of two workspaces (100 and 300 KiB files):", use)
    assert use["workspaces"]["count"] == 2 and use["homes"]["count"] == 2
    assert 400 * 1024 <= use["workspaces"]["bytes"] < 600 * 1024
    assert 0 < use["homes"]["bytes"] < 100 * 1024


def test_two_thousand_workspaces_are_swept(data):
    t0 = time.perf_counter()
    for i in range(2000):
        ws = data / "workspaces" / _digest(f"w{i}")
        ws.mkdir(parents=True)
        (ws / "notes.md").write_text("n\n")
        home = data / "homes" / _digest(str(ws.resolve()))
        home.mkdir(parents=True)
        (home / "s.jsonl").write_text("{}\n")
    t1 = time.perf_counter()
    use = hk.disk_use(P)
    t2 = time.perf_counter()
    done = hk.sweep(P, 7, now=time.time() + 8 * DAY)
    t3 = time.perf_counter()
    print(f"\n2000 workspaces: built in {t1 - t0:.2f}s, disk_use {t2 - t1:.2f}s ({use}), "
          f"sweep {t3 - t2:.2f}s ({done})")
    assert (done.workspaces, done.homes, done.errors) == (2000, 2000, 0)
    assert hk.disk_use(P)["workspaces"] == {"count": 0, "bytes": 0}
    assert done.bytes == use["workspaces"]["bytes"] + use["homes"]["bytes"]


def test_two_sweeps_at_once_remove_each_workspace_once_without_errors(data):
    for i in range(300):
        ws = data / "workspaces" / _digest(f"w{i}")
        ws.mkdir(parents=True)
        (ws / "f").write_text("x")
        private_home(P, ws)
    later = time.time() + 8 * DAY
    code = ("import sys, time\nfrom runner_kit.housekeeping import sweep\nprint('ready', flush=True)\n"
            "d = sweep(sys.argv[1], 7, now=float(sys.argv[2]))\nprint(d.workspaces, d.homes, d.errors, flush=True)\n")
    proc = child(code, P, str(later))
    try:
        here = hk.sweep(P, 7, now=later)
        assert proc.stdout is not None
        there = [int(n) for n in proc.stdout.readline().split()]
        assert proc.wait(20) == 0
    finally:
        stop(proc)
    print(f"\ntwo sweeps at once: this process {here}, the other {there}")
    assert here.workspaces + there[0] == 300 and here.homes + there[1] == 300
    assert here.errors == 0 and there[2] == 0
    assert not any((data / "workspaces").iterdir()) and not any((data / "homes").iterdir())
