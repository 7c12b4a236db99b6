"""Child processes for CLI runners: environment, workspace, bounded reading, and a stop that
leaves nothing behind (real processes, real signals)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time

import pytest

from runner_kit.config import ConfigSchema
from runner_kit.errors import Redactor, RunnerError
from runner_kit.process import (
    AgentProcess,
    alive,
    child_env,
    descendants,
    find_executable,
    parse_env_setting,
    private_home,
    workspace_dir,
)
from runner_kit.runner import RunEnv
from runners_cli.host import Identity, LocalHost

PY = sys.executable


@pytest.fixture(autouse=True)
def _data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("RUNNER_KIT_DATA_DIR", str(tmp_path / "data"))


def test_child_env_passes_only_the_allow_list_plus_what_the_run_configures(monkeypatch):
    monkeypatch.setenv("LANGBOT_PLUGIN_RUNTIME_CONTROL_TOKEN", "control-token-0123456789abcdef0123456789")
    monkeypatch.setenv("DIFY_API_KEY", "app-secret")
    monkeypatch.setenv("LANG", "C.UTF-8")
    env = child_env({"ANTHROPIC_API_KEY": "sk-child"}, home="/tmp/h")
    assert env["ANTHROPIC_API_KEY"] == "sk-child" and env["HOME"] == "/tmp/h" and env["LANG"] == "C.UTF-8"
    assert "LANGBOT_PLUGIN_RUNTIME_CONTROL_TOKEN" not in env and "DIFY_API_KEY" not in env
    assert "PATH" in env


def test_env_setting_accepts_lines_and_json_and_rejects_bad_names():
    assert parse_env_setting("A=1\n# comment\n\n B = two=2") == {"A": "1", "B": " two=2"}
    assert parse_env_setting("A=1\nB=x=y") == {"A": "1", "B": "x=y"}
    assert parse_env_setting('{"A": 1, "B": null}') == {"A": "1", "B": ""}
    assert parse_env_setting(None) == {}
    for bad in ("NOEQUALS", '{"A B": 1}', "[1]", '{"x": 1'):
        with pytest.raises(RunnerError) as err:
            parse_env_setting(bad)
        assert err.value.code == "config.invalid"


def test_find_executable_explains_a_missing_program(tmp_path):
    assert find_executable(None, "sh").endswith("/sh")
    with pytest.raises(RunnerError) as err:
        find_executable(None, "no-such-agent-cli-4711", hint=" (npm i -g thing)")
    assert err.value.code == "process.not_found" and "executable" in err.value.message
    plain = tmp_path / "not-exec"
    plain.write_text("x")
    with pytest.raises(RunnerError):
        find_executable(str(plain), "sh")


def _env(host: LocalHost, identity: Identity | None = None) -> RunEnv:
    ctx = host.make_context("hi", identity=identity)
    schema = ConfigSchema.from_items([{"name": "timeout", "type": "float", "default": 60}])
    return RunEnv(ctx, schema.load({}), Redactor(), "agent.session")


def test_workspace_is_one_per_conversation_and_the_home_is_reused(tmp_path):
    host = LocalHost()
    a1 = workspace_dir(_env(host, Identity(conversation_id="c1")), None, "agent")
    a2 = workspace_dir(_env(host, Identity(conversation_id="c1")), None, "agent")
    b = workspace_dir(_env(host, Identity(conversation_id="c2")), None, "agent")
    assert a1 == a2 and a1 != b and a1.is_dir() and str(a1).startswith(str(tmp_path))
    assert private_home("agent", a1) == private_home("agent", a2) != private_home("agent", b)
    configured = workspace_dir(_env(host), str(tmp_path / "mine" / "repo"), "agent")
    assert configured == tmp_path / "mine" / "repo" and configured.is_dir()
    with pytest.raises(RunnerError) as err:
        workspace_dir(_env(host), "relative/dir", "agent")
    assert err.value.code == "config.invalid" and "workspace" in err.value.message


async def test_missing_program_is_process_not_found(tmp_path):
    with pytest.raises(RunnerError) as err:
        await AgentProcess.spawn(["/nonexistent/agent"], cwd=tmp_path, env=child_env(), name="agent")
    assert err.value.code == "process.not_found"


async def test_json_lines_skip_noise_and_oversized_lines_and_end_at_eof(tmp_path):
    script = (
        "import sys\n"
        "print('not json'); print(); print('[1]')\n"
        "print('{\"big\": \"' + 'x' * 300000 + '\"}')\n"
        "print('{\"n\": 1}'); sys.stdout.flush()\n"
        "sys.stderr.write('warning: something\\n')\n"
    )
    proc = await AgentProcess.spawn([PY, "-c", script], cwd=tmp_path, env=child_env(), name="agent",
                                    stdin=False, line_limit=65536)
    try:
        assert await proc.read_json() == {"n": 1}
        assert await proc.read_json() is None
        assert await proc.wait(5) == 0
        await asyncio.sleep(0.05)
        assert "warning: something" in proc.stderr_tail()
    finally:
        await proc.stop()


async def test_send_and_receive_and_exit_errors_name_the_exit(tmp_path):
    echo = "import sys,json\nfor l in sys.stdin:\n  print(json.dumps({'got': json.loads(l)}), flush=True)\n"
    proc = await AgentProcess.spawn([PY, "-c", echo], cwd=tmp_path, env=child_env(), name="echo")
    await proc.send_json({"a": "ü"})
    assert await proc.read_json() == {"got": {"a": "ü"}}
    await proc.stop()
    with pytest.raises(RunnerError):
        await proc.send_json({"late": True})
    failing = await AgentProcess.spawn([PY, "-c", "import sys; sys.stderr.write('bad key sk-abc'); sys.exit(3)"],
                                       cwd=tmp_path, env=child_env(), name="agent", stdin=False,
                                       redact=Redactor(["sk-abc"]))
    await failing.wait(5)
    await asyncio.sleep(0.05)
    err = failing.exit_error()
    assert err.code == "process.exited" and "code 3" in err.message and "sk-abc" not in err.message
    await failing.stop()


async def test_stop_kills_tool_shells_that_left_the_process_group(tmp_path):
    # like claude's Bash tool: the shell starts in its own session, out of reach of killpg
    script = "setsid sleep 60 & echo $! ; sleep 60"
    proc = await AgentProcess.spawn(["sh", "-c", script], cwd=tmp_path, env=child_env(), name="agent", stdin=False)
    line = await asyncio.wait_for(proc.reader.readline(), 5)
    tool = int(line)
    assert alive(tool) and tool in descendants(proc.pid)
    start = time.monotonic()
    await proc.stop(grace=0.5)
    assert time.monotonic() - start < 3
    await asyncio.sleep(0.1)
    assert not alive(tool), "the detached tool process was killed too"
    assert not alive(proc.pid)
    assert proc.returncode is not None


async def test_stop_with_interrupt_lets_the_agent_exit_cleanly_on_sigint(tmp_path):
    script = (
        "import signal,sys,time\n"
        "got = []\n"
        "signal.signal(signal.SIGINT, lambda *a: got.append(1))\n"
        "print('ready', flush=True)\n"
        "while not got: time.sleep(0.02)\n"
        "print('interrupted', flush=True)\n"
    )
    proc = await AgentProcess.spawn([PY, "-c", script], cwd=tmp_path, env=child_env(), name="agent")
    assert (await proc.reader.readline()).strip() == b"ready"
    await proc.stop(interrupt=True, grace=3)
    assert proc.returncode == 0, proc.stderr_tail()
    assert (await proc.reader.read()).strip() == b"interrupted"


async def test_stop_escalates_to_sigkill_when_sigterm_is_ignored(tmp_path):
    script = "import signal,time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('ready', flush=True)\ntime.sleep(30)\n"
    proc = await AgentProcess.spawn([PY, "-c", script], cwd=tmp_path, env=child_env(), name="agent", stdin=False)
    await proc.reader.readline()
    await proc.stop(grace=0.3)
    assert proc.returncode == -signal.SIGKILL
    assert proc.exit_error().code == "process.crashed"
    await proc.stop()  # idempotent


async def test_stop_when_cancelled_still_kills_everything(tmp_path):
    proc = await AgentProcess.spawn(["sh", "-c", "setsid sleep 60 & echo $! ; trap '' TERM; sleep 60"],
                                    cwd=tmp_path, env=child_env(), name="agent", stdin=False)
    tool = int(await proc.reader.readline())
    task = asyncio.create_task(proc.stop(grace=5))
    await asyncio.sleep(0.2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(0.1)
    assert not alive(tool) and not alive(proc.pid)
    assert not descendants(os.getpid()) - {p for p in descendants(os.getpid()) if not alive(p)}


def test_attachments_are_saved_under_safe_names_without_replacing_anything(tmp_path):
    from runner_kit.process import safe_file_name, save_attachment

    ws = tmp_path / "ws"
    ws.mkdir()
    assert safe_file_name("../../etc/passwd") == "passwd"
    assert safe_file_name("..") == "attachment" and safe_file_name("C:\\x\\报告 1.pdf") == "报告 1.pdf"
    assert safe_file_name(".bashrc") == "bashrc" and safe_file_name("a;rm -rf *") == "a_rm -rf _"
    first = save_attachment(ws, "langbot-files", "../../notes.txt", b"one")
    second = save_attachment(ws, "langbot-files", "notes.txt", b"two")
    assert first == ws.resolve() / "langbot-files" / "notes.txt" and first.read_bytes() == b"one"
    assert second.name == "1-notes.txt" and second.read_bytes() == b"two"


def test_an_agent_made_symlink_never_redirects_an_attachment_outside_the_workspace(tmp_path):
    from runner_kit.process import save_attachment

    ws, outside = tmp_path / "ws", tmp_path / "outside"
    ws.mkdir()
    outside.mkdir()
    (ws / "langbot-files").symlink_to(outside)  # the agent pointed the upload folder elsewhere
    with pytest.raises(RunnerError) as err:
        save_attachment(ws, "langbot-files", "x.txt", b"data")
    assert err.value.code == "input.unreadable" and not list(outside.iterdir())
    (ws / "langbot-files").unlink()
    (ws / "langbot-files").mkdir()
    target = outside / "victim"
    target.write_text("keep")
    (ws / "langbot-files" / "x.txt").symlink_to(target)  # a file name linked to a host file
    saved = save_attachment(ws, "langbot-files", "x.txt", b"data")
    assert saved.name == "1-x.txt" and target.read_text() == "keep"


def test_data_root_follows_the_environment_it_is_given(tmp_path):
    from pathlib import Path

    from runner_kit.process import data_root

    assert data_root({"RUNNER_KIT_DATA_DIR": str(tmp_path)}) == tmp_path
    assert data_root({"XDG_DATA_HOME": str(tmp_path)}) == tmp_path / "langbot-agent-runners"
    # a LangBot plugin worker starts with an empty environment: its home comes from the password
    # database, whatever $HOME the process asking has
    import pwd

    own = Path(pwd.getpwuid(os.getuid()).pw_dir)
    assert data_root({}) == own / ".local" / "share" / "langbot-agent-runners"
    assert data_root({"HOME": str(tmp_path)}) == tmp_path / ".local" / "share" / "langbot-agent-runners"
    assert data_root({"HOME": str(tmp_path), "RUNNER_KIT_DATA_DIR": "~/d"}) == tmp_path / "d"
