"""Issue 36 under a long conversation (docs/attack.md, section 2): hundreds of turns, dozens of
``/new``, a day that rolls over mid-conversation, costs that add up over weeks, many runs stopped,
thousands of idle workspaces, huge workspaces and answers that link to hundreds of files. What a
user would notice: a session they just worked in forgotten, a budget that never bites, a cost that
goes missing, a /diff or a sweep that never ends, a task or registry entry left behind."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from runner_kit import chat_commands as cc
from runners_cli.host import Identity
from runners_cli.plugins import find, load_runner_class
from tests.helpers import children_left, collect, make_runner, messages, rtype, run, terminal

TOKENS = ["Hello", ", ", "this ", "is ", "the ", "answer."]
MIDNIGHT = 1_767_225_600.0  # 2026-01-01T00:00:00Z


@pytest.fixture(autouse=True)
def _coding_agents_only(request):
    """Tests through the plugins run for the coding agents only (skipped before any server starts)."""
    if "case" in request.fixturenames:
        case = request.getfixturevalue("case")
        if not getattr(load_runner_class(find(case.plugin)).adapter, "commands", False):
            pytest.skip(f"{case.plugin} takes no chat commands (not a coding agent)")


def shown(results) -> str:
    return "\n".join(messages(results))


# --- the session book over dozens of sessions ------------------------------------------------------


def test_the_session_forgotten_is_the_one_used_longest_ago_not_the_one_just_worked_in():
    """20 sessions, the oldest resumed and worked in, then /new: /sessions used to drop the session
    the person had just worked in (the book forgot by the order sessions were first seen), and with it
    its turns and cost; the one untouched longest must go instead."""
    book = cc.Book("k" + cc.BOOK_SUFFIX)
    t = 1000.0
    for i in range(cc.MAX_SESSIONS):
        t += 10
        book.note_turn(f"s{i}", f"topic {i}", {"total_tokens": 100}, now=t)
    t += 10
    book.note_turn("s0", "", {"total_tokens": 5000, "cost_usd": 1.0}, now=t)  # /resume 20, then work
    t += 10
    book.note_turn("fresh", "after /new", {"total_tokens": 1}, now=t)
    again = cc.Book.load({book.key: book.value()}, "k")
    listed = [e.id for e in again.newest_first()]
    assert listed[:2] == ["fresh", "s0"], listed
    assert "s1" not in listed and len(listed) == cc.MAX_SESSIONS, listed
    kept = again.find("s0")
    assert kept is not None and kept.turns == 2 and kept.tokens == 5100 and kept.cost == 1.0
    text = cc.sessions_text(again, "fresh", {}, now=t)
    assert "2. “topic 0”" in text, text


def test_hundreds_of_turns_and_dozens_of_new_keep_the_book_small_and_counts_sane():
    book = cc.Book("k" + cc.BOOK_SUFFIX)
    state: dict[str, Any] = {}
    t = MIDNIGHT
    for n in range(60):  # 60 sessions (a /new every 10 turns), 600 turns
        for _ in range(10):
            t += 37
            book = cc.Book.load(state, "k")
            book.note_turn(f"session-{n}-" + "x" * 200, "y" * 5000, {"total_tokens": 12_345, "cost_usd": 0.1}, now=t)
            state[book.key] = book.value()
    raw = json.dumps(state[book.key])
    assert len(raw) <= 256 * 1024 and len(state[book.key]["sessions"]) == cc.MAX_SESSIONS, len(raw)
    book = cc.Book.load(state, "k")
    assert all(e.turns == 10 and e.tokens == 123_450 and abs(e.cost - 1.0) < 1e-9 for e in book.sessions)
    text = cc.sessions_text(book, book.sessions[-1].id, {}, now=t)
    assert text.count("\n") == cc.MAX_SESSIONS + 1 and "1. " in text and f"{cc.MAX_SESSIONS}. " in text
    assert "← current" in text.split("\n")[1], "the current session is number 1"
    # /resume of a number past the list (a forgotten session) is refused with the range
    said = asyncio.run(_answer("/resume 21", state))
    assert f"1 to {cc.MAX_SESSIONS}" in said, said
    # stored values someone else wrote (older versions, hand edits) never go negative
    bad = {book.key: {"v": cc.BOOK_VERSION, "sessions": [{"id": "a", "turns": -5, "tokens": -1e9, "cost": -3,
                                                          "started": -1, "last": "x"}]}}
    e = cc.Book.load(bad, "k").find("a")
    assert e is not None and e.turns == 0 and e.tokens == 0 and e.cost == 0.0


async def _answer(text: str, conversation: dict[str, Any], config: dict[str, Any] | None = None) -> str:
    from runner_kit.config import Config

    ctx = SimpleNamespace(state=SimpleNamespace(conversation=conversation, runner={}),
                          conversation=None, config={})
    cmd = cc.parse(text, "/")
    assert cmd is not None
    said = await cc.answer(cmd, ctx, Config(config or {}, ()), session_key="k", current=None, slot_key=None,
                           conversation=None, platform="test")
    return said.text


# --- days and budgets -----------------------------------------------------------------------------


def test_the_day_rolls_over_at_utc_midnight_mid_conversation():
    cc._DAYS.clear()
    ctx = SimpleNamespace(state=SimpleNamespace(runner={}), conversation=None, config={"x": 1})
    cfg = {"daily-budget-usd": 1.0}
    day = None
    for _ in range(10):  # ten turns of $0.10 before midnight: exactly at the budget, float sums and all
        day = cc.Day(ctx, "test", now=MIDNIGHT - 60).add({"total_tokens": 10, "cost_usd": 0.1})
    assert day is not None and day["cost"] == 1.0 and day["turns"] == 10
    ctx.state.runner[cc.DAY_KEY] = day  # what LangBot keeps
    over = cc.over_budget(cfg, None, cc.Day(ctx, "test", now=MIDNIGHT - 1).totals)
    assert over is not None and "today's budget" in over
    after = cc.Day(ctx, "test", now=MIDNIGHT + 1)
    assert after.totals["turns"] == 0 and after.totals["cost"] == 0.0, after.totals
    assert cc.over_budget(cfg, None, after.totals) is None, "a new day (UTC) has its own budget"
    counted = after.add({"total_tokens": 5, "cost_usd": 0.2})
    assert counted["day"] == "2026-01-01" and counted["turns"] == 1 and counted["tokens"] == 5
    # yesterday's totals stored by another process never come back today
    assert cc.Day(ctx, "test", now=MIDNIGHT + 2).totals["turns"] == 1


def test_a_session_budget_in_small_float_steps_bites_exactly_at_the_limit():
    state: dict[str, Any] = {}
    cfg = {"session-budget-usd": 0.3}
    for i in range(3):
        assert cc.over_budget(cfg, cc.Book.load(state, "k").find("s"), {}) is None, i
        book = cc.Book.load(state, "k")
        book.note_turn("s", "t", {"cost_usd": 0.1})
        state[book.key] = book.value()
    over = cc.over_budget(cfg, cc.Book.load(state, "k").find("s"), {})
    assert over is not None and "/new" in over, "0.1 + 0.1 + 0.1 reaches a $0.30 budget"


# --- ACP: the session's cumulative cost across /new and /resume -------------------------------------


def _acp():
    root = Path(__file__).resolve().parents[2] / "acp-agent-runner"
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    from acp_agent_runner import adapter  # noqa: PLC0415

    return adapter


def test_acp_cost_of_a_resumed_session_is_counted_after_a_new_session_ran():
    """usage_update.cost is the session's cumulative cost. Session A, /new, session B, /resume A: the
    first turn of A in a new process used to be counted as nothing (only B's total was kept), so A's
    footer and budget missed what it cost."""
    acp = _acp()
    conversation: dict[str, Any] = {}

    def turn(session: str, cumulative: float, new: bool) -> float | None:
        a = acp.ACPAdapter.__new__(acp.ACPAdapter)
        a.env = SimpleNamespace(ctx=SimpleNamespace(state=SimpleNamespace(conversation=conversation)),
                                session=SimpleNamespace(key="acp_key"))
        a.session_id, a._cost_base = session, (0.0 if new else None)
        a.agent_name = "agent"
        t = acp._Turn()
        t.cost = (cumulative, "USD")
        events = a._finish(SimpleNamespace(usage=None, stop_reason="end_turn"), t)
        for e in events:
            if type(e).__name__ == "State":
                conversation[e.key] = e.value
        used = [e for e in events if type(e).__name__ == "Usage"]
        return used[0].extra.get("cost_usd") if used else None

    assert turn("A", 0.25, new=True) == 0.25
    assert turn("B", 0.40, new=True) == 0.40  # /new
    assert turn("A", 0.75, new=False) == pytest.approx(0.50)  # /resume 2: A went on from 0.25
    assert turn("B", 0.50, new=False) == pytest.approx(0.10)
    for i in range(40):  # many sessions later the value stays bounded
        turn(f"S{i}", 0.01, new=True)
    assert len(json.dumps(conversation)) < 4096


# --- through the three coding agents (scripted CLIs) ----------------------------------------------


def _book_key(results) -> str:
    keys = [r.data["key"] for r in results if rtype(r) == "state.updated" and r.data["key"].endswith(cc.BOOK_SUFFIX)]
    assert keys, "the turn was counted in the session book"
    return keys[-1]


async def test_after_twenty_sessions_the_resumed_oldest_one_stays_listed_and_resumable(case, server, host):
    """A conversation with 20 sessions in its book: the person goes back to the oldest one (/resume 20),
    works in it, then /new and works again. /sessions must still list the session they just left
    (number 2) and /resume 2 must reach it; the 21st is refused with the range."""
    runner = make_runner(case.plugin, host)
    cfg = case.config(server)
    case.answer(server, TOKENS, 0.0)
    first = await run(runner, host, "the oldest topic", config=cfg)
    oldest = case.seen(server)[-1].conversation
    key = _book_key(first)
    scope = host.scope_key(Identity(), "conversation")
    book = host.store.get(scope, key)
    now = time.time()
    # 19 other sessions seen after it (older in use): the book as it is after "/resume 20" and a turn
    book["sessions"] += [{"id": f"older-{i}", "started": now - 9000 + i, "last": now - 5000 + i,
                          "title": f"older {i}", "turns": 1, "tokens": 10} for i in range(cc.MAX_SESSIONS - 1)]
    host.store.set(scope, key, book)
    listed = shown(await run(runner, host, "/sessions", config=cfg))
    assert f"{cc.MAX_SESSIONS}. " in listed and "1. “the oldest topic”" in listed, listed
    assert "fresh" in shown(await run(runner, host, "/new", config=cfg))
    await run(runner, host, "a brand new topic", config=cfg)
    assert case.seen(server)[-1].conversation != oldest
    listed = shown(await run(runner, host, "/sessions", config=cfg))
    assert "2. “the oldest topic”" in listed, listed
    assert "older 0”" not in listed, "the one untouched longest is the one forgotten"
    refused = shown(await run(runner, host, f"/resume {cc.MAX_SESSIONS + 1}", config=cfg))
    assert f"1 to {cc.MAX_SESSIONS}" in refused, refused
    assert "Back in session 2" in shown(await run(runner, host, "/resume 2", config=cfg))
    await run(runner, host, "and where were we?", config=cfg)
    assert case.seen(server)[-1].conversation == oldest, "the resumed session is the one worked in before"


async def test_a_session_gone_upstream_counts_the_turn_for_the_new_one_and_the_footer_restarts(case, server, host):
    """The agent lost the stored session (its store wiped): the run starts a fresh one. The turn is
    booked for the new session (footer "1 turn"), the old one stays listed, and a /resume of it
    after that works again or starts afresh without failing."""
    if case.forget_sessions is None:
        pytest.skip("the agent never says a session is gone")
    runner = make_runner(case.plugin, host)
    cfg = {**case.config(server), "advanced-settings": True, "cost-footer": True}
    case.answer(server, TOKENS, 0.0)
    await run(runner, host, "first topic", config=cfg)
    second = await run(runner, host, "second message", config=cfg)
    assert "2 turns" in messages(second)[-1], messages(second)
    before = case.seen(server)[-1].conversation
    case.forget_sessions(server)
    third = await run(runner, host, "third message", config=cfg)
    assert rtype(terminal(third)) == "run.completed", terminal(third).data
    after = case.seen(server)[-1].conversation
    assert after != before, "a fresh agent session"
    assert "1 turn" in messages(third)[-1] and "2 turns" not in messages(third)[-1], messages(third)
    listed = shown(await run(runner, host, "/sessions", config=cfg))
    assert "1. “third message”" in listed and "2. “first topic”" in listed, listed
    cost = shown(await run(runner, host, "/cost", config=cfg))
    assert "in 1 turn" in cost and "3 turns" in cost, cost  # the session: 1 turn; today: all 3
    said = shown(await run(runner, host, "/resume 2", config=cfg))
    assert "Back in session 2" in said, said
    again = await run(runner, host, "back to the first?", config=cfg)
    assert rtype(terminal(again)) == "run.completed", terminal(again).data


async def test_many_runs_stopped_and_finished_leave_no_task_or_registry_entry(case, server, host):
    """Ten runs, every other one stopped by a /stop follow-up: afterwards nothing of them is left
    running (RUNNING, the stop calls, asyncio tasks, agent processes)."""
    from runner_kit import runner as kit_runner

    runner = make_runner(case.plugin, host)
    cfg = case.config(server)
    baseline = len(asyncio.all_tasks())
    for i in range(10):
        stop = i % 2 == 0
        case.answer(server, ["working "] * (60 if stop else 3), 0.05 if stop else 0.0)
        ctx = host.make_context(f"job {i}", config=cfg, steering=True)
        sent: list[bool] = []

        def during(r, ctx=ctx, sent=sent, stop=stop):
            if stop and rtype(r) == "message.delta" and not sent:
                sent.append(True)
                host.queue_steering(ctx, "/stop")

        results = await asyncio.wait_for(collect(runner, host, ctx, during), 20)
        assert rtype(terminal(results)) == "run.completed", terminal(results).data
        if stop:
            assert "Stopped by" in shown(results), shown(results)
    assert not await children_left()
    for _ in range(100):
        if not kit_runner._CLEANUPS and len(asyncio.all_tasks()) <= baseline:
            break
        await asyncio.sleep(0.02)
    assert not cc.RUNNING, cc.RUNNING
    assert not kit_runner._CLEANUPS
    left = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    assert len(asyncio.all_tasks()) <= baseline, [t.get_coro() for t in left]


async def test_turns_without_token_counts_never_claim_zero_tokens(case, server, host):
    """The real codex-acp 0.16.0 reports no usage for a turn (only how full the context is): the
    footer, /cost and /sessions said "0 tokens" under every reply of a long conversation. They count
    the turns and say the tokens are not reported, never a number the agent did not give."""
    if case.plugin != "acp-agent-runner":
        pytest.skip("the scripted ACP agent can leave the usage out (as the real codex-acp does)")
    runner = make_runner(case.plugin, host)
    base = case.config(server)
    cfg = {**base, "env": base["env"] + "\nFAKE_ACP_NO_RESULT_USAGE=1", "advanced-settings": True,
           "cost-footer": True}
    case.answer(server, TOKENS, 0.0)
    first = await run(runner, host, "one", config=cfg)
    second = await run(runner, host, "two", config=cfg)
    assert "".join(TOKENS) in messages(second)[-1]
    for said in (messages(first)[-1], messages(second)[-1]):
        assert "0 tokens" not in said, said
    assert "2 turns" in messages(second)[-1], messages(second)
    cost = shown(await run(runner, host, "/cost", config=cfg))
    listed = shown(await run(runner, host, "/sessions", config=cfg))
    assert " 0 tokens" not in cost and "2 turns" in cost, cost
    assert " 0 tokens" not in listed and "2 turns" in listed, listed


# --- housekeeping, /diff and named files at scale --------------------------------------------------


async def test_a_sweep_of_many_idle_conversations_never_takes_one_a_run_is_starting_in(tmp_path, monkeypatch):
    """600 idle conversations; while the sweep goes through them, 40 of them get a message: each run
    creates its workspace, holds it and writes into it. Every run finds its workspace and its file at
    its end; the workspaces used keep living; the idle rest goes."""
    from runner_kit import housekeeping as hk
    from runner_kit.process import _digest, data_dir, private_home

    monkeypatch.setenv("RUNNER_KIT_DATA_DIR", str(tmp_path / "data"))
    platform = "long-attack"
    old = time.time() - 40 * 86400
    spaces = []
    for i in range(600):
        ws = data_dir(platform) / "workspaces" / _digest(f"conv-{i}")
        ws.mkdir(parents=True)
        (ws / "notes.txt").write_text("x")
        private_home(platform, ws)
        hk.mark_used(platform, ws)
        marker = data_dir(platform) / "last-used" / _digest(str(ws.resolve()))
        os.utime(marker, (old, old))
        spaces.append(ws)
    busy = spaces[::15]

    def write(ws: Path) -> None:
        (ws / "answer.txt").write_text("mine")

    def still_there(ws: Path) -> bool:
        return ws.is_dir() and (ws / "answer.txt").read_text() == "mine"

    async def a_run(ws: Path) -> bool:
        await asyncio.sleep(0.001 * (spaces.index(ws) % 7))
        os.makedirs(ws, exist_ok=True)  # process.workspace_dir, before the hold
        async with hk.in_use(platform, ws):
            write(ws)
            await asyncio.sleep(0.01)
            return still_there(ws)

    start = time.monotonic()
    sweep = asyncio.ensure_future(asyncio.to_thread(hk.sweep, platform, 30))
    ok = await asyncio.gather(*(a_run(ws) for ws in busy))
    done = await sweep
    assert all(ok), "a run lost its workspace or its file while it ran"
    assert time.monotonic() - start < 30
    assert all(ws.is_dir() for ws in busy)
    gone = [ws for ws in spaces if ws not in busy and not ws.exists()]
    assert len(gone) + done.busy + done.kept >= len(spaces) - len(busy), done
    assert done.errors == 0, done
    assert len(gone) >= 500, (len(gone), done)


async def test_diff_of_a_workspace_with_many_files_is_quick_and_short(tmp_path, monkeypatch):
    """/diff in a workspace the agent filled with thousands of files (with git, and without): the
    answer comes in seconds and stays a short message, saying what it left out."""
    import subprocess

    from runner_kit import workspace_files as wf
    from runner_kit.runner import DIFF_INLINE_CHARS, _diff_text

    monkeypatch.setattr(wf, "MAX_LISTED", 1500)
    monkeypatch.setattr(wf, "MAX_UNTRACKED", 300)
    def fill(ws: Path, git: bool) -> None:
        for i in range(20):
            sub = ws / f"pkg{i}"
            sub.mkdir(parents=True)
            for j in range(120):
                (sub / f"mod{j}.py").write_text("line\n" * 50)
        if git:
            subprocess.run(["git", "init", "-q", str(ws)], check=True)

    for kind in ("plain", "git"):
        ws = tmp_path / kind
        fill(ws, kind == "git")
        start = time.monotonic()
        found = await wf.diff(ws, since=time.time() - 3600)
        text = _diff_text(found.summary, found.patch)
        assert time.monotonic() - start < 10, kind
        assert len(text) < DIFF_INLINE_CHARS + 4000, (kind, len(text))
        said = "may be incomplete" if kind == "plain" else "more new files are not shown"
        assert said in text, (kind, text[-400:])


def test_an_answer_linking_hundreds_of_files_attaches_a_few_and_says_so_briefly(tmp_path):
    from runner_kit import outfiles
    from runner_kit import workspace_files as wf

    for i in range(400):
        (tmp_path / f"shot-{i:03d}.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"x" * 100)
    text = "Screenshots:\n" + "\n".join(f"![step {i}](shot-{i:03d}.png)" for i in range(400))
    start = time.monotonic()
    found, left = wf.named_files(text, tmp_path, max_bytes=10 << 20, room=outfiles.room(len(text)), backticks=False)
    assert time.monotonic() - start < 2
    assert len(found) == outfiles.MAX_FILES
    note = outfiles.left_out_note(left)
    assert len(note) < 2000 and "more" in note, note
