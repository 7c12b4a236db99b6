"""Chat commands (issue 36) against the REAL coding CLIs (opt-in: RUN_SLOW=1): Claude Code 2.1.197
(claude-code-agent), Codex 0.171.0 app-server (codex-agent) and codex-acp 0.16.0 (acp-agent-runner,
provider codex). Everything goes through the plugin and the CLI it starts; the model is
``tests/fakes/model_api.py`` on 127.0.0.1, driven by its attributes (``tool_command``: the model's
first answer to each new prompt is one shell tool call; ``answer_tokens``/``token_delay``: the text).

What a member of the chat would notice is asserted: whether ``/mode plan`` really keeps the real
CLI from writing, whether ``/model`` reaches the model API, whether ``/new`` and ``/resume`` really
start and continue CLI sessions, whether a file the answer links to comes with it, and whether
``/stop`` ends a running tool at once and leaves the session usable. After each test no process of
ours may be left (conftest).
"""

from __future__ import annotations

import asyncio
import base64
import os
import time
from typing import Any

import pytest

from runners_cli.host import Identity, LocalHost
from runners_cli.plugins import find
from tests.fakes.model_api import FakeModelAPI
from tests.helpers import children_left, collect, make_runner, messages, rtype, run, terminal
from tests.real_peers.coding_agents.conftest import tool_sleeps

pytestmark = [pytest.mark.slow, pytest.mark.real_peers, pytest.mark.timeout(600)]

AGENTS = ("claude", "codex", "codex-acp")
PLUGINS = {"claude": "claude-code-agent", "codex": "codex-agent", "codex-acp": "acp-agent-runner"}
# the request header each CLI names its session with (docs real-peers.md §3–5)
SESSION_HEADER = {"claude": "x-claude-code-session-id", "codex": "thread-id", "codex-acp": "session-id"}
HELLO = "Hello from the fake model."
ME = Identity(actor_id="u-1", actor_name="Tester")
WRITE = "touch created-by-tool.txt"
# what each CLI tells its model when plan mode refuses the write (Claude Code's permission layer;
# Codex's read-only bwrap sandbox, the same in codex-acp's embedded codex core)
REFUSED = {"claude": "was blocked", "codex": "Read-only file system", "codex-acp": "Read-only file system"}
# a real 1x1 PNG: what the agent's tool writes as shot.png
PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==")


def config(clis: Any, api: FakeModelAPI, agent: str, **extra: Any) -> dict[str, Any]:
    """The agent's plugin config against the fake's programmatic answers (no scenario prefix)."""
    if agent == "claude":
        cfg: dict[str, Any] = {"executable": str(clis.claude), "base-url": api.anthropic_base_url(),
                               "advanced-settings": True, "max-retries": 0}
    elif agent == "codex":
        cfg = {"executable": str(clis.bin_dir / "codex"), "base-url": api.openai_base_url(), "model": "fake-model",
               "advanced-settings": True, "max-retries": 0}
    else:
        # codex-acp's sandbox (read-only / workspace-write) needs a bwrap on PATH: the codex package ships one
        bwrap = clis.codex.parent.parent / "codex-resources"
        cfg = {"provider": "codex", "executable": str(clis.bin_dir / "codex-acp"), "base-url": api.openai_base_url(),
               "model": "fake-model", "env": f"PATH={bwrap}:{os.environ['PATH']}", "langbot-tools": False}
    return {**cfg, "api-key": api.api_key, "user-id-source": "actor", "advanced-settings": True, **extra}


def host_of(agent: str) -> LocalHost:
    return LocalHost(runner_id=find(PLUGINS[agent]).runner_id)


async def say(runner: Any, host: LocalHost, text: str, cfg: dict[str, Any]) -> list[Any]:
    """One message from ME; the run must complete."""
    results = await run(runner, host, text, config=cfg, identity=ME)
    assert rtype(terminal(results)) == "run.completed", terminal(results).data
    return results


def shown(results: list[Any]) -> str:
    return "\n".join(messages(results))


def session_of(api: FakeModelAPI, agent: str, n: int = -1) -> str | None:
    return api.model_requests()[n].headers.get(SESSION_HEADER[agent])


# --- 1. /mode plan really keeps the real CLI from writing ------------------------------------------


@pytest.mark.parametrize("agent", AGENTS)
async def test_mode_plan_keeps_the_real_cli_from_writing_and_edits_lets_it(clis, api, agent, tmp_path):
    host, ws = host_of(agent), tmp_path / "ws"
    runner = make_runner(PLUGINS[agent], host)
    cfg = config(clis, api, agent, workspace=str(ws), **{"permission-mode": "workspace-write"})
    api.tool_command = WRITE
    said = shown(await say(runner, host, "/mode plan", cfg))
    assert "Mode of this session: plan" in said, said
    planned = await say(runner, host, "create the file", cfg)
    assert api.model_requests(), "the agent ran and the model asked for the write"
    assert not (ws / "created-by-tool.txt").exists(), f"plan mode let {agent} write: {shown(planned)}"
    assert REFUSED[agent] in str(api.model_requests()[-1].body), "the model was told the write was refused"
    said = shown(await say(runner, host, "/mode edits", cfg))
    assert "Mode of this session: edits" in said, said
    await say(runner, host, "create the file now", cfg)
    assert (ws / "created-by-tool.txt").is_file(), f"edits mode did not let {agent} write"


# --- 2. /model reaches the model API ---------------------------------------------------------------


@pytest.mark.parametrize("agent", AGENTS)
async def test_model_switch_names_the_model_in_the_next_request(clis, api, agent):
    host = host_of(agent)
    runner = make_runner(PLUGINS[agent], host)
    cfg = config(clis, api, agent, **{"chat-models": "other-model"})
    await say(runner, host, "first", cfg)
    before = api.model_requests()[-1].body.get("model")
    assert before != "other-model"
    said = shown(await say(runner, host, "/model other-model", cfg))
    assert "Model of this session: other-model" in said, said
    assert shown(await say(runner, host, "second", cfg)).startswith(HELLO)
    assert api.model_requests()[-1].body.get("model") == "other-model"
    assert session_of(api, agent) == session_of(api, agent, 0), "the same CLI session, on the other model"


# --- 3. /new and /resume really start and continue CLI sessions ------------------------------------


@pytest.mark.parametrize("agent", AGENTS)
async def test_new_starts_a_new_cli_session_and_resume_continues_the_first(clis, api, agent):
    host = host_of(agent)
    runner = make_runner(PLUGINS[agent], host)
    cfg = config(clis, api, agent)
    await say(runner, host, "remember the word apricot", cfg)
    first = session_of(api, agent)
    assert first
    assert "fresh" in shown(await say(runner, host, "/new", cfg))
    await say(runner, host, "a new topic", cfg)
    second = session_of(api, agent)
    assert second and second != first, "the next message started a new CLI session"
    assert "apricot" not in str(api.model_requests()[-1].body), "nothing of the first session went along"
    said = shown(await say(runner, host, "/resume 2", cfg))
    assert "Back in session 2" in said, said
    await say(runner, host, "what was the word?", cfg)
    last = api.model_requests()[-1]
    assert last.headers.get(SESSION_HEADER[agent]) == first, "the first CLI session continued"
    assert "apricot" in str(last.body) and "a new topic" not in str(last.body), "with the first session's history"
    listed = shown(await say(runner, host, "/sessions", cfg))
    assert listed.index("remember the word apricot") < listed.index("a new topic"), listed
    assert "current" in listed.split("a new topic")[0], listed


# --- 4. a file the answer links to goes with it ---------------------------------------------------


@pytest.mark.parametrize("agent", AGENTS)
async def test_a_picture_the_agent_made_and_links_to_reaches_the_chat(clis, api, agent, tmp_path):
    host, ws = host_of(agent), tmp_path / "ws"
    runner = make_runner(PLUGINS[agent], host)
    cfg = config(clis, api, agent, workspace=str(ws), **{"permission-mode": "full-access"})
    api.tool_command = f"echo {base64.b64encode(PNG).decode()} | base64 -d > shot.png"
    api.answer_tokens = ["Here it is: ", "![shot](shot.png)"]
    results = await say(runner, host, "draw me a picture", cfg)
    assert (ws / "shot.png").read_bytes() == PNG, "the real tool wrote the picture"
    (final,) = [r for r in results if rtype(r) == "message.completed"]
    content = final.data["message"]["content"]
    assert isinstance(content, list), content
    images = [c["image_base64"] for c in content if c.get("type") == "image_base64"]
    assert len(images) == 1, content
    head, _, data = images[0].partition(",")
    assert head == "data:image/png;base64" and base64.b64decode(data) == PNG
    assert "![shot](shot.png)" in content[0]["text"]


# --- 5. /stop ends a running tool and leaves the session usable -------------------------------------


async def _stop_during_sleep(runner: Any, host: LocalHost, cfg: dict[str, Any]) -> tuple[list[Any], float]:
    """A turn whose tool runs ``sleep 45``; ``/stop`` is sent as a follow-up once the sleep runs.
    The results and how long the run went on after the /stop."""
    ctx = host.make_context("sleep a while", config=cfg, identity=ME, steering=True)
    out: list[Any] = []
    sent_at: list[float] = []
    gen = runner.invoke(ctx)
    async for r in gen:
        host.apply_result(ctx.run_id, r)
        out.append(r)
        if rtype(r) == "tool.call.started" and not sent_at:
            for _ in range(100):  # the tool's shell starts the sleep a moment after the call
                if tool_sleeps():
                    break
                await asyncio.sleep(0.05)
            assert tool_sleeps(), "the tool's sleep runs"
            host.queue_steering(ctx, "/stop")
            sent_at.append(time.monotonic())
    assert sent_at, "the tool never started"
    return out, time.monotonic() - sent_at[0]


@pytest.mark.parametrize("agent", AGENTS)
async def test_stop_ends_the_running_tool_and_the_session_goes_on(clis, api, agent):
    host = host_of(agent)
    runner = make_runner(PLUGINS[agent], host)
    cfg = config(clis, api, agent, **{"permission-mode": "full-access"})  # next-turn mode: /stop is polled
    api.tool_command = "sleep 45 && echo done"
    out, took = await _stop_during_sleep(runner, host, cfg)
    assert rtype(terminal(out)) == "run.completed", terminal(out).data
    assert took < 5.0, f"the run went on {took:.1f} s after the /stop"
    assert "(Stopped by Tester.)" in shown(out), shown(out)
    assert not await children_left(), "no CLI process left"
    for _ in range(100):
        if not tool_sleeps():
            break
        await asyncio.sleep(0.05)
    assert not tool_sleeps(), "the tool's sleep was ended too"
    stopped_session = session_of(api, agent)
    api.tool_command = None
    nxt = await say(runner, host, "are you still there?", cfg)
    assert shown(nxt).startswith(HELLO), shown(nxt)
    last = api.model_requests()[-1]
    assert last.headers.get(SESSION_HEADER[agent]) == stopped_session, "the stopped session went on"
    assert "sleep a while" in str(last.body), "with its history"


# --- 6. a follow-up sent while the real CLI runs a turn ----------------------------------------------


@pytest.mark.parametrize("agent", AGENTS)
async def test_next_turn_mode_a_follow_up_is_answered_after_the_turn(clis, api, agent, spawned):
    host = host_of(agent)
    runner = make_runner(PLUGINS[agent], host)
    api.answer_tokens, api.token_delay = ["first "] * 10 + ["turn."], 0.1
    ctx = host.make_context("first question", config=config(clis, api, agent), identity=ME, steering=True)
    queued: list[float] = []

    def during(r: Any) -> None:
        if rtype(r) == "message.delta" and not queued:
            queued.append(time.monotonic())
            host.queue_steering(ctx, "second question")

    out = await collect(runner, host, ctx, during)
    assert rtype(terminal(out)) == "run.completed", terminal(out).data
    said = messages(out)
    assert len(said) == 2 and said[0] == "first " * 10 + "turn.", said  # the first turn ran to its end
    assert said[1] == said[0], "the follow-up got its own answer"
    reqs = api.model_requests()
    assert len(reqs) == 2 and "second question" not in str(reqs[0].body)
    assert "second question" in str(reqs[1].body) and "first question" in str(reqs[1].body)
    assert len(spawned) == 1, "both turns in the one live CLI process"


@pytest.mark.parametrize("agent", AGENTS)
async def test_interrupt_mode_a_follow_up_stops_the_turn_with_the_kits_note(clis, api, agent, spawned):
    host = host_of(agent)
    runner = make_runner(PLUGINS[agent], host)
    api.answer_tokens, api.token_delay = ["working "] * 60, 0.1  # 6 s unless interrupted
    cfg = config(clis, api, agent, **{"follow-up-mode": "interrupt"})
    ctx = host.make_context("long job", config=cfg, identity=ME, steering=True)
    queued: list[bool] = []

    def during(r: Any) -> None:
        if rtype(r) == "message.delta" and not queued:
            queued.append(True)
            api.answer_tokens, api.token_delay = ["done."], 0.0
            host.queue_steering(ctx, "stop and do this")

    out = await collect(runner, host, ctx, during)
    assert rtype(terminal(out)) == "run.completed", terminal(out).data
    said = messages(out)
    assert len(said) == 2, said
    assert said[0].startswith("working") and said[0].count("working") < 60, said
    assert "(Stopped here to take your next message.)" in said[0], said
    assert said[1] == "done.", said
    last = api.model_requests()[-1]
    assert "stop and do this" in str(last.body) and "long job" in str(last.body), "same session, history kept"
    assert len(spawned) == 1, "the session went on in the same CLI process"
