"""Issue 33 under a long conversation (docs attack.md, brief 2): hundreds of turns and resets, long
answers over connections that keep breaking, long silent tool loops, many uploads, and long answers
with files, against the loopback fakes.

What broke and is fixed here (each test says what the person saw):

- DeerFlow joined a cut run at most three times in all, however much each join brought: a long run
  behind a proxy that cuts every long stream (or any connection lasting past a limit) showed the
  first third of the answer and "(This answer is incomplete …)" while DeerFlow went on and finished
  it. Joins are now bounded by joins in a row that bring nothing new (3) and by joins in all
  (``MAX_REJOINS``); a join after a gap goes on after the last event it saw.
- DeerFlow lost the files a run presented when its stream fell behind DeerFlow's 256-event buffer
  (a long answer the chat reads slower than the model writes): the run's first ``values`` was
  gone, so nothing counted as new and the files were dropped without a word.
- The kit (runner_kit/runner.py ``_pump``): a delta-timer flush (or the "still working" line)
  taken from the pump's queue just ahead of a delta the reading task had queued went out first,
  then the older, shorter delta: a long answer jumped back in the chat (found under load in the
  DeerFlow and WeKnora tests below). Such a flush now waits behind the results queued before it.

Held (kept as tests): resets over a long group conversation with a restart; WeKnora's bounded
resumes and their time limit; DashScope's citations cut anywhere; the "still working" line over a
silent tool loop; Langflow's uploads over 200 turns (stopped ones too); long answers with files
within one LangBot result.
"""

from __future__ import annotations

import asyncio
import base64
import json
import random
import time
from contextlib import aclosing
from typing import Any

import pytest

from runner_kit import events as ev
from runner_kit import resets, sessions
from runner_kit import runner as kit_runner
from runner_kit.config import ConfigSchema
from runner_kit.results import HOST_RESULT_LIMIT
from runners_cli.host import Identity, LocalHost
from runners_cli.plugins import find
from tests.fakes.dashscope import FakeDashScope
from tests.fakes.deerflow import FakeDeerFlow
from tests.fakes.langflow import FakeLangflow
from tests.fakes.weknora import FakeWeKnora
from tests.helpers import (
    deltas,
    failure,
    final_text,
    make_runner,
    rtype,
    run,
    scripted_runner,
    state_updates,
    stored_key,
    terminal,
)

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(autouse=True)
def _fresh_reset_memory():
    resets.forget()
    yield
    resets.forget()


def plugin(name: str) -> tuple[Any, LocalHost]:
    host = LocalHost(runner_id=find(name).runner_id)
    return make_runner(name, host), host


def grows(shown: list[str], full: str) -> bool:
    """Every update extends the one before and the final answer: nothing shown twice or taken back."""
    return all(b.startswith(a) for a, b in zip(shown, shown[1:], strict=False)) and all(full.startswith(s)
                                                                                        for s in shown)


def result_bytes(result: Any) -> int:
    """How large LangBot 4.11.2 measures a result (result_normalizer: ``len(json.dumps(result))``)."""
    return len(json.dumps(result.model_dump(mode="json")))


# -- a long group conversation with many resets, and a plugin restart in the middle ------------------


async def test_hundreds_of_turns_and_resets_end_each_left_session_once_as_its_own_member():
    """Three members (a WeKnora session each) write 150 times in one group conversation; it is reset
    30 times and the plugin restarts once. Every session a reset left behind is deleted once, as the
    member who used it, when that member next writes; a live session is never deleted; what the
    restart forgot is simply left; the plugin's memory stays one entry per member."""
    key = "sk-weknora-long-0001"
    members = [Identity(actor_id=f"m{i}", actor_name=f"M{i}") for i in range(3)]
    rnd = random.Random(33)
    runner, host = plugin("weknora-agent")
    slots_before = set(sessions.SLOTS)
    with FakeWeKnora(api_key=key) as srv:
        config = {"base-url": srv.base_url, "api-key": key, "app-type": "chat"}
        srv.title_delay = 0.0
        current: dict[str, str] = {}  # member -> the session their last turn used
        left: dict[str, str] = {}  # member -> the session a reset left behind, not yet ended
        remembered: set[str] = set()  # members whose session the plugin process has seen since it started
        expected: list[tuple[str, str]] = []  # (session, member) that must be deleted, in order
        forgotten: list[str] = []
        for turn in range(150):
            if turn == 75:  # the plugin process restarts: its memory is gone, LangBot's state stays
                resets.forget()
                remembered.clear()
            if turn and turn % 5 == 0:
                host.reset_conversation(members[0])
                for m, sid in current.items():
                    if m in left:  # reset twice before the member wrote: the first one is left for good
                        forgotten.append(left[m])
                    left[m] = sid
                current.clear()
            who = rnd.choice(members)
            results = await run(runner, host, f"turn {turn}", identity=who, config=config)
            assert rtype(terminal(results)) == "run.completed", terminal(results).data
            sid = state_updates(results).get(stored_key("weknora.session_id", who)) or current.get(who.actor_id)
            assert sid, "every turn runs in a session"
            if who.actor_id in left:
                (expected.append((left[who.actor_id], who.actor_id)) if who.actor_id in remembered
                 else forgotten.append(left[who.actor_id]))
                del left[who.actor_id]
            current[who.actor_id] = sid
            remembered.add(who.actor_id)
            assert len(resets._SEEN) <= len(members) and len(resets._GENERATION) <= 1
        deletes = [r for r in srv.requests if r.method == "DELETE"]
        assert len(deletes) == len(expected) > 10
        assert [(r.path.rsplit("/", 1)[-1], r.headers["x-external-user-id"]) for r in deletes] == [
            (sid, f"user_{m}") for sid, m in expected], "each left session deleted once, by its own member"
        assert not set(srv.deleted) & set(current.values()), "no live session was ever deleted"
        assert not set(srv.deleted) & set(forgotten), "what a restart forgot is left, never guessed at"
        assert set(sessions.SLOTS) <= slots_before, "no session is held in memory after its runs"


# -- WeKnora: a long answer over a connection that keeps breaking -------------------------------------


def weknora(srv: FakeWeKnora, key: str, **extra: Any) -> dict[str, Any]:
    return {"base-url": srv.base_url, "api-key": key, "app-type": "chat", **extra}


@pytest.fixture
def quick_resumes(monkeypatch):
    plugin("weknora-agent")  # the plugin's package is importable once its runner is loaded
    from weknora_agent import const

    monkeypatch.setattr(const, "RESUME_BACKOFF", 0.01)
    return const


async def test_a_long_weknora_answer_cut_every_twenty_pieces_is_shown_whole_and_once(quick_resumes):
    key = "sk-weknora-long-0002"
    tokens = [f"t{i} " for i in range(300)]
    runner, host = plugin("weknora-agent")
    with FakeWeKnora(api_key=key) as srv:
        srv.answer_tokens, srv.token_delay, srv.drops, srv.drop_after = tokens, 0.001, 100, 20
        results = await run(runner, host, "长答案", config=weknora(srv, key))
        full = "".join(tokens)
        assert rtype(terminal(results)) == "run.completed", terminal(results).data
        assert final_text(results) == full and grows(deltas(results), full)
        assert 1 <= len(srv.resume_requests()) <= 14 and not srv.stopped
        (sid,) = srv.sessions
        assert srv.stored_answers(sid) == [full]


async def test_a_stream_that_breaks_every_few_pieces_gives_up_bounded_and_stops_weknora(quick_resumes):
    key = "sk-weknora-long-0003"
    tokens = [f"t{i} " for i in range(300)]
    runner, host = plugin("weknora-agent")
    with FakeWeKnora(api_key=key) as srv:
        srv.answer_tokens, srv.token_delay, srv.drops, srv.drop_after = tokens, 0.001, 1000, 2
        results = await run(runner, host, config=weknora(srv, key))
        code, retryable, message = failure(results)
        assert (code, retryable) == ("upstream.unavailable", True) and "kept breaking off" in message
        assert len(srv.resume_requests()) == quick_resumes.MAX_RESUMES_TOTAL and len(srv.stopped) == 1
        shown = final_text(results)
        assert shown.startswith("t0 t1 ") and "incomplete" in shown
        assert grows(deltas(results), shown)


async def test_resumes_that_keep_failing_end_within_the_runs_time_limit(quick_resumes, monkeypatch):
    """continue-stream keeps failing and the pause before each retry is longer than the run has
    left: the run ends at its own time limit, not after the pauses, and WeKnora is told to stop."""
    monkeypatch.setattr(quick_resumes, "RESUME_BACKOFF", 30.0)
    key = "sk-weknora-long-0004"
    runner, host = plugin("weknora-agent")
    with FakeWeKnora(api_key=key) as srv:
        srv.answer_tokens, srv.token_delay, srv.drops, srv.resume_cuts = ["a ", "b ", "c"], 0.05, 1, 100
        started = time.monotonic()
        results = await run(runner, host, config=weknora(srv, key, timeout=1.2), deadline_at=time.time() + 1.2)
        assert time.monotonic() - started < 3.0
        assert failure(results)[:2] == ("upstream.timeout", True)
        assert final_text(results).startswith("a ")
        assert await srv.wait_until_async(lambda: len(srv.stopped) == 1, 2.0), "WeKnora is stopped once"


# -- DeerFlow / LangGraph: a long run whose stream is cut again and again ------------------------------


class ProxiedDeerFlow(FakeDeerFlow):
    """DeerFlow behind a proxy that cuts every stream (the run's own and every join) after
    ``cut_every`` events: each connection brings that much, then breaks."""

    cut_every = 0

    async def _serve(self, resp, log, offset, *, cut_by_run=False, cut_after=None, cancel_on_disconnect):
        if self.cut_every:
            cut_by_run, cut_after = False, self.cut_every
        await super()._serve(resp, log, offset, cut_by_run=cut_by_run, cut_after=cut_after,
                             cancel_on_disconnect=cancel_on_disconnect)


def deerflow(srv: FakeDeerFlow) -> dict[str, Any]:
    return {"api-base": srv.base_url, **({"api-key": srv.api_key} if srv.api_key else {})}


@pytest.mark.parametrize("flavor", ["deerflow", "langgraph"])
async def test_a_long_run_cut_every_ten_events_is_followed_to_its_end(flavor):
    """Before: three joins in all, then "(This answer is incomplete …)" after a third of the answer,
    while the run went on upstream (on_disconnect continue) and finished unseen."""
    runner, host = plugin("deerflow-agent")
    with ProxiedDeerFlow(api_key="df-long" if flavor == "deerflow" else None, flavor=flavor) as srv:
        srv.cut_every = 10
        srv.answer_tokens = [f"w{i} " for i in range(150)]
        srv.token_delay = 0.002
        results = await run(runner, host, "write a long report", config=deerflow(srv))
        full = "".join(srv.answer_tokens)
        assert rtype(terminal(results)) == "run.completed", terminal(results).data
        assert final_text(results) == full and grows(deltas(results), full)
        assert 10 <= len(srv.joins) < 20
        (run_,) = srv.runs
        assert srv.logs[run_.run_id].status == "success" and not srv.cancelled and not srv.disconnect_cancelled


async def test_joins_stay_bounded_when_each_brings_only_a_little(monkeypatch):
    runner, host = plugin("deerflow-agent")
    from deerflow_agent import const

    with ProxiedDeerFlow(api_key="df-long") as srv:
        srv.cut_every = 3
        srv.answer_tokens = [f"w{i} " for i in range(150)]
        srv.token_delay = 0.002
        results = await run(runner, host, config=deerflow(srv))
        code, retryable, _ = failure(results)
        assert (code, retryable) == ("upstream.unavailable", True)
        assert len(srv.joins) == const.MAX_REJOINS
        shown = final_text(results)
        assert shown.startswith("w0 w1 ") and "incomplete" in shown and grows(deltas(results), shown)


async def test_after_a_gap_a_stream_cut_again_and_again_still_completes():
    """The live stream falls behind DeerFlow's buffer (a gap), and every connection is cut after ten
    events: the answer is caught up from values, each join going on after the last event it saw."""
    runner, host = plugin("deerflow-agent")
    with ProxiedDeerFlow(api_key="df-long") as srv:
        srv.cut_every, srv.retained_events = 10, 16
        srv.answer_tokens = [f"w{i} " for i in range(150)]
        srv.token_delay = 0.002
        results = await run(runner, host, config=deerflow(srv))
        full = "".join(srv.answer_tokens)
        assert rtype(terminal(results)) == "run.completed", terminal(results).data
        assert final_text(results) == full and grows(deltas(results), full)


async def test_files_presented_by_a_run_whose_stream_fell_behind_are_still_attached():
    """Before: a long answer the chat read slower than the model wrote made the stream fall behind
    DeerFlow's buffer; the run's first values was gone, and the files it presented were dropped
    without a word. Only the run's own files come: those of an earlier turn are not sent again."""
    runner, host = plugin("deerflow-agent")
    with FakeDeerFlow(api_key="df-long") as srv:
        srv.present_files = {"/mnt/user-data/outputs/first.png": PNG + b"\x01" * 64}
        first = await run(runner, host, "draw one", config=deerflow(srv))
        (done,) = [r for r in first if rtype(r) == "message.completed"]
        assert [c["type"] for c in done.data["message"]["content"]] == ["text", "image_base64"]
        srv.retained_events = 16
        srv.answer_tokens = [f"w{i} " for i in range(60)]
        srv.present_files = {"/mnt/user-data/outputs/second.png": PNG + b"\x02" * 64}
        results = await run(runner, host, "draw another and explain at length", config=deerflow(srv))
        assert len(srv.joins) >= 1, "the stream fell behind and was joined again"
        (done,) = [r for r in results if rtype(r) == "message.completed"]
        images = [c["image_base64"] for c in done.data["message"]["content"] if c["type"] == "image_base64"]
        assert images == ["data:image/png;base64," + base64.b64encode(PNG + b"\x02" * 64).decode()]
        assert final_text(results) == "".join(srv.answer_tokens)


# -- long answers with files stay within what one LangBot message carries ------------------------------


@pytest.mark.parametrize("answer", ["short", "w" * 300 * 1024, "长" * 120 * 1024])
async def test_deerflow_long_answer_and_files_stay_within_one_langbot_result(answer):
    runner, host = plugin("deerflow-agent")
    with FakeDeerFlow(api_key="df-long") as srv:
        srv.answer_tokens = [answer[i:i + 4096] for i in range(0, len(answer), 4096)]
        srv.present_files = {f"/mnt/user-data/outputs/chart{i}.png": PNG + bytes([i]) * (150 * 1024)
                             for i in range(6)}
        for turn in range(2):  # turn after turn in the same thread
            results = await run(runner, host, f"report {turn}", config=deerflow(srv))
            assert rtype(terminal(results)) == "run.completed", terminal(results).data
            assert max(result_bytes(r) for r in results) < HOST_RESULT_LIMIT
            text = final_text(results)
            assert text.startswith(answer[:100])
            if turn == 0:
                assert "(Not attached: " in text and "larger than one LangBot message can carry" in text
            srv.present_files = {"/mnt/user-data/outputs/more.png": PNG + b"\x07" * (400 * 1024)}


@pytest.mark.parametrize("answer", ["short", "w" * 300 * 1024, "长" * 120 * 1024])
async def test_weknora_long_answer_and_artifacts_stay_within_one_langbot_result(answer):
    key = "sk-weknora-long-0005"
    runner, host = plugin("weknora-agent")
    with FakeWeKnora(api_key=key) as srv:
        srv.tools = True
        srv.answer_tokens = [answer[i:i + 4096] for i in range(0, len(answer), 4096)]
        srv.artifacts = [{"file_name": f"chart{i}.png", "data": PNG + bytes([i]) * (150 * 1024)} for i in range(6)]
        for turn in range(2):
            results = await run(runner, host, f"report {turn}", config=weknora(srv, key, **{"app-type": "agent"}))
            assert rtype(terminal(results)) == "run.completed", terminal(results).data
            assert max(result_bytes(r) for r in results) < HOST_RESULT_LIMIT
            assert "larger than one LangBot message can carry" in final_text(results)


# -- DashScope: a long knowledge answer full of citations, cut at every point --------------------------


def cited_answer(n: int) -> tuple[str, str]:
    """(raw text with ``n`` citation tags, what the chat shows for it)."""
    raw, shown = [], []
    for i in range(1, n + 1):
        sentence = f"第{i}条结论 conclusion {i}"
        tag = f"[{i % 9 + 1}]" if i % 4 else f"[{i % 9 + 1}][{(i + 3) % 9 + 1}]"
        raw.append(f"{sentence}<ref>{tag}</ref>。")
        shown.append(f"{sentence}{tag}。")
    raw.append("末尾<ref>[2]</ref>")  # the answer ends right after a tag
    shown.append("末尾[2]")
    return "".join(raw), "".join(shown)


def test_citations_fed_piece_by_piece_give_the_whole_answer_and_hold_back_little():
    plugin("dashscope-agent")
    from dashscope_agent.citations import Citations

    raw, want = cited_answer(300)
    assert Citations().whole(raw) == want
    rnd = random.Random(4)
    for sizes in ((1,), (2,), (3,), (5,), (7,), tuple(range(1, 12))):
        c, out, i, at = Citations(), [], 0, 0
        while i < len(raw):
            n = rnd.choice(sizes)
            piece = c.feed(raw[i:i + n])
            i += n
            assert len(c._pending) <= 50, "only what may still become a tag is held back"
            assert want.startswith(piece, at), "what is shown is never taken back"
            out.append(piece)
            at += len(piece)
        assert "".join(out) + c.flush() == want
    c = Citations()
    assert c.feed(raw + "还有<ref>[3]</re") + c.flush() == want + "还有[3]", "a tag cut off at the end is kept"


async def test_a_long_cited_dashscope_answer_streams_consistently_and_ends_whole():
    key, app = "sk-dashscope-long-0001", "app-long"
    raw, want = cited_answer(300)
    rnd = random.Random(7)
    pieces, i = [], 0
    while i < len(raw):
        n = rnd.randint(1, 4)
        pieces.append(raw[i:i + n])
        i += n
    host = LocalHost()
    runner = make_runner("dashscope-agent", host)
    with FakeDashScope(api_key=key, app_id=app) as srv:
        srv.answer_tokens = pieces
        results = await run(runner, host, "总结全部结论",
                            config={"base-url": srv.base_url, "api-key": key, "app-id": app, "app-type": "agent"})
    assert final_text(results) == want
    shown = deltas(results)
    assert grows(shown, want) and not any("<" in d or "ref>" in d for d in shown)
    assert len(shown) < 100, "a long answer is sent in a bounded number of updates"


# -- "still working" over a long silent tool loop ---------------------------------------------------------


EVERY = 0.02


class ToolLoop(kit_runner.Adapter):
    """An agent that runs ``rounds`` silent tool calls (nothing shown) before it answers."""

    platform = "Looper"
    session_key = "looper.id"
    rounds = 30

    async def stream(self):
        for n in range(type(self).rounds):
            yield ev.ToolStarted(call_id=f"c{n}", name="search", parameters={"q": n})
            await asyncio.sleep(EVERY / 2)
            yield ev.ToolCompleted(call_id=f"c{n}", name="search", result={"hits": n})
        yield ev.Text("Here is what the search found.")


async def test_a_long_silent_tool_loop_renews_the_line_a_bounded_number_of_times_and_never_keeps_it(monkeypatch):
    monkeypatch.setattr(kit_runner, "STILL_WORKING_AFTER", EVERY)
    schema = ConfigSchema.from_items([{"name": "timeout", "type": "float", "default": 60}])
    runner, host, _ = scripted_runner(ToolLoop, schema)
    started = time.monotonic()
    results = await run(runner, host, "look it all up")
    elapsed = time.monotonic() - started
    assert rtype(terminal(results)) == "run.completed"
    lines = [d for d in deltas(results) if "Looper is still working… (" in d]
    assert lines, "the person sees the agent is still at it"
    assert len(lines) <= elapsed / EVERY + 1, "at most one update per interval"
    assert len(set(lines)) == len(lines), "a renewal that says nothing new (same seconds) is no update"
    assert final_text(results) == "Here is what the search found."
    assert deltas(results)[-1] == "Here is what the search found.", "the answer replaced the line"


# -- Langflow: uploads over 200 turns -------------------------------------------------------------------


async def test_two_hundred_turns_with_files_leave_no_upload_task_or_connection_behind():
    key = "sk-langflow-long-0001"
    png = base64.b64encode(PNG + b"\x01" * 32).decode()
    txt = base64.b64encode(b"the secret word is kiwi").decode()
    runner, host = plugin("langflow-agent")
    from langflow_agent import adapter

    with FakeLangflow(api_key=key) as srv:
        config = {"base-url": srv.base_url, "api-key": key, "flow-id": srv.flow_id}
        srv.answer_tokens = ["a "] * 20
        peak_tasks = peak_open = 0
        for turn in range(200):
            contents = [{"type": "text", "text": f"turn {turn}"}, {"type": "image_base64", "image_base64": png},
                        {"type": "file_base64", "file_base64": txt, "file_name": "notes.txt"}]
            ctx = host.make_context(f"turn {turn}", config=config, contents=contents)
            stopped = turn % 4 == 3  # every fourth turn is stopped mid-answer
            async with aclosing(runner.invoke(ctx)) as gen:
                async for r in gen:
                    host.apply_result(ctx.run_id, r)
                    if stopped and rtype(r) == "message.delta":
                        break  # LangBot stops the run: the generator is closed
            peak_tasks = max(peak_tasks, len(adapter._CLEANUPS))
            peak_open = max(peak_open, srv.open_connections)
        await adapter.cleanups_done()
        assert len(srv.uploads) == 400 and sorted(srv.deleted) == sorted(srv.uploads) and srv.stored == {}
        assert not adapter._CLEANUPS and peak_tasks <= 20, "deletes end, they do not pile up"
        assert peak_open <= 20, "connections are reused or closed, not piled up"


# -- a long answer never goes backwards in the chat ---------------------------------------------------------


class Bursty(kit_runner.Adapter):
    """A stream that, right after a quiet moment, sends two pieces at once: the kit's delta timer
    fires in the same moment as the first of them is sent."""

    platform = "Bursty"
    session_key = "bursty.id"

    async def stream(self):
        yield ev.Text("The first words")
        yield ev.Text(" and more")  # held back: the delta timer starts
        time.sleep(0.06)  # the loop is busy elsewhere past the timer  # noqa: ASYNC251
        await asyncio.sleep(0)
        await asyncio.sleep(0)  # meanwhile the timer put its tick in the pump's queue
        yield ev.Text(", then a burst")  # sent by the reading task, behind that tick
        yield ev.Text(" of the rest.")  # held back, and taken by the tick's flush
        await asyncio.sleep(0.05)


async def test_the_delta_timer_never_sends_newer_text_before_older_text_waiting_in_the_queue():
    """Before: the pump's timer flush (a tick queued just ahead of a delta the reading task made) sent
    the newer text first and the older delta after it, so the chat went back to a shorter answer
    (seen under load as 'w0 … w137' followed by 'w0 … w135' in a long DeerFlow answer)."""
    schema = ConfigSchema.from_items([{"name": "timeout", "type": "float", "default": 60},
                                      {"name": "stream-max-delay", "type": "float", "default": 0.03}])
    runner, host, _ = scripted_runner(Bursty, schema)
    results = await run(runner, host)
    full = "The first words and more, then a burst of the rest."
    assert final_text(results) == full
    sequence = [r.data["chunk"]["msg_sequence"] for r in results if rtype(r) == "message.delta"]
    assert sequence == sorted(sequence) and grows(deltas(results), full), deltas(results)
