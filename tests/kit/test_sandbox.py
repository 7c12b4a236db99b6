"""The coding agents' boundary: what a sandboxed process sees, what it outlives, and the refusals."""

from __future__ import annotations

import asyncio
import os
import signal
import stat
import sys
from pathlib import Path

import pytest

from runner_kit import sandbox
from runner_kit.errors import RunnerError
from runner_kit.process import TAG_ENV, AgentProcess, alive, child_env, data_root, descendants

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="bubblewrap is Linux only")


@pytest.fixture
def dirs(tmp_path, monkeypatch):
    """A data root with two conversations' workspaces and homes, and a file of the host outside them."""
    monkeypatch.setenv("RUNNER_KIT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv(sandbox.WRITE_ENV, raising=False)  # as an owner gets it: nothing extra writable
    monkeypatch.delenv(sandbox.READ_ENV, raising=False)
    made = {}
    for name in ("a", "b"):
        ws = tmp_path / "data" / "agent" / "workspaces" / name
        home = tmp_path / "data" / "agent" / "homes" / name
        ws.mkdir(parents=True)
        home.mkdir(parents=True)
        (ws / "notes.txt").write_text(f"marker-of-{name}")
        (home / "session.jsonl").write_text(f"transcript-of-{name}")
        made[name] = (ws, home)
    (tmp_path / "host-secret.txt").write_text("marker-of-the-host")
    return made


async def _boundary(config, ws, home, argv):
    env = child_env({}, home=home)
    return await sandbox.boundary(config, agent="test agent", workspace=ws, home=home, argv=argv, env=env), env


async def _run(argv, ws, home, config=None, *, wait=True):
    box, env = await _boundary(config or {}, ws, home, argv)
    proc = await AgentProcess.spawn(argv, cwd=ws, env=env, name="agent", boundary=box, stdin=False)
    if not wait:
        return proc
    out = b"".join([line + b"\n" async for line in proc.lines()]).decode()
    await proc.stop(grace=0.2)
    return out


@pytest.fixture(autouse=True)
def _needs_bwrap():
    if asyncio.run(sandbox.probe(sandbox.find_bwrap())) is not None:
        pytest.skip("no working bubblewrap on this machine: " + str(asyncio.run(sandbox.probe(sandbox.find_bwrap()))))


async def test_a_session_sees_its_own_files_and_nothing_of_another_or_the_host(dirs, tmp_path):
    ws, home = dirs["b"]
    other_ws, other_home = dirs["a"]
    script = (f"cat notes.txt; echo; echo mine > new.txt; cat new.txt; ls -a ..; ls ../..; cat ../a/notes.txt; "
              f"cat {other_ws}/notes.txt {other_home}/session.jsonl {tmp_path}/host-secret.txt; "
              f"ls {data_root()} {tmp_path} /root /home /work; find / -name notes.txt -not -path '/proc/*'; echo end")
    out = await _run(["/bin/bash", "-c", script + " 2>&1"], ws, home)
    assert "marker-of-b" in out and "mine" in out and out.rstrip().endswith("end")
    for leaked in ("marker-of-a", "transcript-of-a", "marker-of-the-host"):
        assert leaked not in out, out
    assert (ws / "new.txt").read_text() == "mine\n", "the workspace is the real one, writable"
    found = [line for line in out.splitlines() if line.endswith("notes.txt") and line.startswith("/")]
    assert found == [str(ws / "notes.txt")], found


async def test_system_paths_are_read_only_and_tmp_is_private(dirs):
    ws, home = dirs["a"]
    name = "sandbox-tmp-" + os.urandom(4).hex()
    out = await _run(["/bin/bash", "-c", f"touch /usr/x 2>&1; touch /etc/x 2>&1; echo t > /tmp/{name} && "
                      f"cat /tmp/{name}; echo $HOME"], ws, home)
    assert out.count("Read-only file system") == 2, out
    assert out.splitlines()[2:4] == ["t", str(home)]
    assert name not in os.listdir("/tmp"), "its /tmp is its own"


async def test_nothing_the_agent_starts_outlives_it(dirs):
    ws, home = dirs["a"]
    nonce = _nonce()
    script = (f"nohup sleep 300.{nonce} >/dev/null 2>&1 & setsid -f sleep 301.{nonce}; (sleep 302.{nonce} &); "
              "echo started; sleep 30")
    proc = await _run(["/bin/bash", "-c", script], ws, home, wait=False)
    try:
        line = await proc.reader.readline()
        assert line.strip() == b"started"
        sleeps = await _sleeps(nonce, 3)
        assert len(sleeps) == 3, "the background processes run while the agent does"
        await proc.stop(grace=0.2)
        left = [p for p in sleeps if alive(p)]
        assert not left, "a nohup / setsid / double-forked child outlived the agent"
    finally:
        await _stop_all(proc, nonce)


def _environ(pid: int) -> bytes:
    with open(f"/proc/{pid}/environ", "rb") as fh:
        return fh.read()


def _nonce() -> str:
    """A number only this test's sleeps carry (`sleep 301.<nonce>`): tests run in parallel workers,
    and another test's sleeps are not this one's."""
    return str(int.from_bytes(os.urandom(4), "big"))


def _find_sleeps(nonce: str) -> list[int]:
    pids = []
    mine = [f"{n}.{nonce}".encode() for n in (300, 301, 302)]
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                cmd = Path(f"/proc/{entry.name}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if cmd[0] == b"sleep" and cmd[1:2] and cmd[1] in mine and alive(int(entry.name)):
                pids.append(int(entry.name))
    return pids


async def _sleeps(nonce: str, want: int) -> list[int]:
    """This test's background sleeps, once ``want`` of them run (a forked child may start a moment
    after the agent printed its line), or what runs after a second."""
    for _ in range(50):
        found = _find_sleeps(nonce)
        if len(found) >= want:
            return found
        await asyncio.sleep(0.02)
    return _find_sleeps(nonce)


async def _stop_all(proc: AgentProcess, nonce: str) -> None:
    """Whatever the test's assertions found, nothing it started outlives it."""
    await proc.stop(grace=0.2)
    for pid in _find_sleeps(nonce):
        os.kill(pid, signal.SIGKILL)


async def test_unconfined_agents_are_still_found_by_their_tag_at_stop(dirs):
    ws, home = dirs["a"]
    nonce = _nonce()
    proc = await _run(["/bin/bash", "-c", f"setsid -f sleep 301.{nonce}; (sleep 302.{nonce} &); echo started; sleep 30"],
                      ws, home, {"isolation": "none"}, wait=False)
    try:
        assert (await proc.reader.readline()).strip() == b"started"
        sleeps = await _sleeps(nonce, 2)
        assert len(sleeps) == 2 and all(TAG_ENV.encode() in _environ(p) for p in sleeps)
        await proc.stop(grace=0.2)
        left = [p for p in sleeps if alive(p)]
        assert not left, "a setsid / double-forked child of an unconfined agent outlived it"
    finally:
        await _stop_all(proc, nonce)


async def test_signals_reach_the_agent_itself_not_bwrap(dirs):
    ws, home = dirs["a"]
    script = "trap 'echo got-int; exit 7' INT; echo ready; while true; do sleep 0.05; done"
    proc = await _run(["/bin/bash", "-c", script], ws, home, wait=False)
    assert (await proc.reader.readline()).strip() == b"ready"
    assert proc.agent_pid() not in (None, proc.pid)
    target = proc.agent_pid()
    try:
        proc.send_signal(signal.SIGINT)
        try:
            line = await asyncio.wait_for(proc.reader.readline(), 5)
        except TimeoutError:
            line = b"(nothing within 5 s)"
        assert line.strip() == b"got-int", (
            f"SIGINT went to pid {target} ({_comm(target)}), whose signal mask is {_sigs(target)}; the tree: "
            f"{[(p, _comm(p)) for p in sorted(descendants(proc.pid))]}")
        assert await proc.wait(2) == 7
    finally:
        await proc.stop()


@pytest.mark.parametrize("isolation", ["sandbox", "none"])
async def test_an_agent_can_be_interrupted_even_when_the_plugin_process_ignores_sigint(dirs, isolation):
    """A plugin process started with SIGINT ignored (a background job of a shell without job control)
    passes that on to its children, and a shell cannot even trap a signal ignored when it started: the
    agent gets the interrupt signals back at their defaults."""
    ws, home = dirs["a"]
    config = {} if isolation == "sandbox" else {"isolation": "none"}
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGQUIT)}
    try:
        for s in before:
            signal.signal(s, signal.SIG_IGN)
        out = await _run(["/bin/sh", "-c", "grep SigIgn /proc/self/status"], ws, home, config)
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
    ignored = int(out.split()[-1], 16)
    assert not ignored & (1 << (signal.SIGINT - 1)) and not ignored & (1 << (signal.SIGQUIT - 1)), out


def _comm(pid: int | None) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"


def _sigs(pid: int | None) -> str:
    try:
        return " ".join(line for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                        if line.startswith(("SigBlk", "SigIgn", "SigCgt")))
    except OSError:
        return "?"


async def test_where_no_sandbox_can_be_built_nothing_starts_unless_the_owner_opts_out(dirs, tmp_path, monkeypatch):
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace, likely because the kernel "
                    "does not allow non-privileged user namespaces.' >&2\nexit 1\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv(sandbox.BWRAP_ENV, str(fake))
    sandbox.forget_probes()
    try:
        ws, home = dirs["a"]
        with pytest.raises(RunnerError) as caught:
            await _boundary({}, ws, home, ["/bin/true"])
        err = caught.value
        assert err.code == "process.no_sandbox" and not err.retryable
        assert "user namespaces" in err.message and "None (unsafe)" in err.message
        box, _ = await _boundary({"isolation": "none"}, ws, home, ["/bin/true"])
        assert not box.confined
    finally:
        sandbox.forget_probes()


def test_isolation_values():
    assert sandbox.isolation({}) == sandbox.SANDBOX
    assert sandbox.isolation({"isolation": "None"}) == sandbox.NONE
    with pytest.raises(RunnerError) as caught:
        sandbox.isolation({"isolation": "maybe"})
    assert caught.value.code == "config.invalid"


def test_install_roots_are_narrow_and_never_a_home_or_the_data_root(tmp_path, monkeypatch):
    monkeypatch.setenv("RUNNER_KIT_DATA_DIR", str(tmp_path / "share" / "runners"))
    home = os.path.expanduser("~")
    npm = "/opt/npm/lib/node_modules/@anthropic-ai/claude-code/cli.js"
    assert sandbox.install_root(npm) == Path("/opt/npm")
    assert sandbox.install_root("/srv/proj/node_modules/.bin/codex") == Path("/srv/proj")
    assert sandbox.install_root("/opt/venv/bin/python") == Path("/opt/venv")
    assert sandbox.install_root(f"{home}/bin/claude") is None, "not the whole home"
    assert sandbox.install_root("/usr/local/bin/claude") == Path("/usr/local")
    assert sandbox.install_root("/bin/sh") is None
    assert sandbox.install_root(str(tmp_path / "share" / "bin" / "x")) is None, "never a parent of the data root"
    assert sandbox.install_root(str(tmp_path / "share" / "runners" / "x" / "tool")) is None, "never the data root"


def test_program_paths_follow_the_shebang_and_script_arguments(tmp_path):
    tools = tmp_path / "tools" / "bin"
    tools.mkdir(parents=True)
    script = tools / "agent"
    script.write_text("#!/usr/bin/env python3\n")
    script.chmod(0o755)
    arg = tmp_path / "scripts" / "main.py"
    arg.parent.mkdir()
    arg.write_text("")
    paths = sandbox.program_paths([str(script), str(arg)], {"PATH": os.path.dirname(sys.executable) + ":/usr/bin"})
    assert tools.parent in paths and arg.parent in paths
    py = Path(sys.executable)
    assert any(p == py.parent.parent or p in py.parents for p in paths), "the interpreter's install"


def test_sandbox_paths_setting_wants_absolute_paths():
    assert sandbox.paths_setting("/opt/a\n# note\n\n/opt/b", "k") == [Path("/opt/a"), Path("/opt/b")]
    with pytest.raises(RunnerError):
        sandbox.paths_setting("relative/path", "sandbox-read-paths")
