"""The steering turn loop for multi-turn adapters (coding agents), with a scripted live session."""

from __future__ import annotations

import asyncio
import time

from runner_kit import events as ev
from runner_kit.config import ConfigSchema
from runner_kit.errors import RunnerError, SessionMissing
from runner_kit.runner import INTERRUPTED_NOTE, Adapter
from runners_cli.host import Identity
from tests.helpers import (
    collect,
    deltas,
    failure,
    messages,
    rtype,
    scripted_runner,
    sleep_step,
    state_updates,
    stored_key,
    terminal,
)

SCHEMA = ConfigSchema.from_items(
    [
        {"name": "timeout", "type": "float", "default": 60},
        {"name": "follow-up-mode", "type": "select", "default": "next-turn",
         "options": [{"name": "next-turn"}, {"name": "interrupt"}]},
    ]
)


class Live(Adapter):
    """A scripted live agent session: ``turns[i]`` is what turn i yields (callables are awaited)."""

    platform = "Live"
    session_key = "live.session"
    multi_turn = True
    turns: list = []
    log: list = []

    def __init__(self, env):
        super().__init__(env)
        self.instance = id(self)
        self.stop_turn = asyncio.Event()

    async def turn(self, inp, index):
        type(self).log.append(("turn", index, inp.text, self.instance))
        script = type(self).turns[min(index, len(type(self).turns) - 1)]
        for step in script:
            if callable(step):
                got = await step(self)
                if got == "stop":
                    return
                if got is not None:
                    yield got
            else:
                yield step

    async def interrupt(self):
        type(self).log.append(("interrupt",))
        self.stop_turn.set()

    async def cancel(self):
        type(self).log.append(("cancel",))

    async def close(self):
        type(self).log.append(("close",))


def make(turns):
    return scripted_runner(Live, SCHEMA, turns=turns, log=[])


sleep = sleep_step


def wait_interrupt(limit=5.0):
    async def step(adapter):
        try:
            await asyncio.wait_for(adapter.stop_turn.wait(), limit)
        except TimeoutError:
            return None
        return "stop"

    return step


def queue_on_first_delta(host, ctx, *texts):
    """Queue follow-ups as the first delta reaches the host (scripts pause after it, since the
    SDK's invoke lets the runner run ahead of its consumer)."""
    done = []

    def during(r):
        if rtype(r) == "message.delta" and not done:
            done.append(True)
            for t in texts:
                host.queue_steering(ctx, t)

    return during


async def test_follow_ups_are_answered_in_the_same_live_session_each_with_its_own_reply():
    r, host, cls = make([[sleep(0.05), ev.Text("first answer"), sleep(0.2), ev.Usage(3, 4)], [ev.Text("second answer"), ev.Usage(5, 6)]])
    ctx = host.make_context("do it", steering=True)
    results = await collect(r, host, ctx, queue_on_first_delta(host, ctx, "and also this"))
    assert messages(results) == ["first answer", "second answer"]
    turns = [e for e in cls.log if e[0] == "turn"]
    assert [(i, t) for _, i, t, _ in turns] == [(0, "do it"), (1, "and also this")]
    assert len({inst for *_, inst in turns}) == 1, "every turn goes to the same live session"
    end = terminal(results)
    assert rtype(end) == "run.completed"
    assert (end.usage.prompt_tokens, end.usage.completion_tokens) == (8, 10), "usage is summed over turns"
    assert cls.log[-1] == ("close",) and ("cancel",) not in cls.log
    assert not host.steering, "nothing the host handed over is left behind"
    # the second reply streams as a new message, not as a continuation of the first
    later = [r for r in results[results.index(next(r for r in results if rtype(r) == "message.completed")) + 1:]]
    assert deltas(later) == ["second answer"]


async def test_several_follow_ups_queued_together_become_one_turn_in_order():
    r, host, cls = make([[sleep(0.05), ev.Text("one"), sleep(0.2)], [ev.Text("two")]])
    ctx = host.make_context("start", steering=True)
    results = await collect(r, host, ctx, queue_on_first_delta(host, ctx, "A", "B"))
    assert messages(results) == ["one", "two"]
    assert [e[2] for e in cls.log if e[0] == "turn"] == ["start", "A\n\nB"]


async def test_without_steering_the_run_is_one_turn():
    r, host, cls = make([[sleep(0.05), ev.Text("only"), sleep(0.2)], [ev.Text("never")]])
    ctx = host.make_context("x", steering=False)
    results = await collect(r, host, ctx, queue_on_first_delta(host, ctx, "later"))
    assert messages(results) == ["only"]
    assert len(host.steering) == 1, "a host without steering_pull keeps its own queue"
    assert cls.log[-1] == ("close",)


async def test_interrupt_mode_stops_the_running_turn_and_answers_the_follow_up_at_once():
    r, host, cls = make([[ev.Text("working on it"), wait_interrupt(5.0), ev.Text(" and done")], [ev.Text("switched")]])
    ctx = host.make_context("long job", steering=True, config={"follow-up-mode": "interrupt"})
    start = time.monotonic()
    results = await collect(r, host, ctx, queue_on_first_delta(host, ctx, "stop, do this instead"))
    assert time.monotonic() - start < 3.0
    first, second = messages(results)
    assert first.startswith("working on it") and INTERRUPTED_NOTE in first and "done" not in first
    assert second == "switched"
    assert ("interrupt",) in cls.log
    assert rtype(terminal(results)) == "run.completed"


async def test_next_turn_mode_lets_the_turn_finish_first():
    r, host, cls = make([[ev.Text("a"), sleep(0.3), ev.Text("b")], [ev.Text("c")]])
    ctx = host.make_context("x", steering=True)
    results = await collect(r, host, ctx, queue_on_first_delta(host, ctx, "next"))
    assert messages(results) == ["ab", "c"]
    assert ("interrupt",) not in cls.log


async def test_a_failing_follow_up_turn_names_what_was_not_answered_and_closes_the_session():
    async def fail(_):
        raise RunnerError("upstream.unavailable", "agent crashed")

    r, host, cls = make([[sleep(0.05), ev.Text("ok"), sleep(0.2)], [fail]])
    ctx = host.make_context("x", steering=True, surface="api")
    results = await collect(r, host, ctx, queue_on_first_delta(host, ctx, "second question"))
    code, retryable, _ = failure(results)
    assert (code, retryable) == ("upstream.unavailable", True)
    shown = messages(results)
    assert shown[0] == "ok"
    assert "second question" in shown[-1] and "not answered" in shown[-1]
    assert cls.log[-1] == ("close",)


async def test_deadline_during_a_turn_fails_cleanly_reports_pending_follow_ups_and_closes():
    r, host, cls = make([[ev.Text("part"), sleep(30)]])
    ctx = host.make_context("x", steering=True, deadline_at=time.time() + 1.5, surface="api")
    start = time.monotonic()
    results = await collect(r, host, ctx, queue_on_first_delta(host, ctx, "waiting one"))
    assert time.monotonic() - start < 1.5
    code, _, _ = failure(results)
    assert code == "upstream.timeout"
    assert "waiting one" in messages(results)[-1]
    assert ("cancel",) in cls.log and cls.log[-1] == ("close",)
    assert not host.steering, "the follow-up was taken and reported, not silently dropped"


async def test_host_cancel_mid_turn_cancels_then_closes_and_leaves_no_task():
    r, host, cls = make([[ev.Text("a"), sleep(30)]])
    ctx = host.make_context("x", steering=True, config={"follow-up-mode": "interrupt"})
    gen = r.invoke(ctx)
    async for res in gen:
        if rtype(res) == "message.delta":
            break
    await gen.aclose()
    assert cls.log[-2:] == [("cancel",), ("close",)]
    await asyncio.sleep(0.05)
    stray = [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()]
    assert not stray, stray


async def test_stale_session_on_the_first_turn_starts_fresh_once_with_the_notice():
    calls = []

    async def maybe_missing(adapter):
        calls.append(adapter.env.session.current)
        if adapter.env.session.current == "stale":
            raise SessionMissing()

    r, host, cls = make([[maybe_missing, ev.SessionId("fresh"), ev.Text("ok")]])
    host.store.set(host.scope_key(Identity(), "conversation"), stored_key("live.session"), "stale")
    results = await collect(r, host, host.make_context("x", steering=True))
    assert messages(results) == [
        "(The previous conversation could not be continued, so this reply starts a new one.)\n\nok"]
    assert calls == ["stale", None]
    assert len({e[3] for e in cls.log if e[0] == "turn"}) == 1, "the same live adapter starts the fresh session"
    assert state_updates(results) == {stored_key("live.session"): "fresh"}


async def test_progress_line_shows_the_current_step_until_the_answer_replaces_it():
    r, host, _ = make([[ev.ToolStarted("t1", "Bash", {"command": "npm test"}), sleep(0.02),
                        ev.ToolCompleted("t1", "Bash", "ok"), ev.Text("All tests pass.")]])
    ctx = host.make_context("run the tests", steering=True)
    results = await collect(r, host, ctx)
    shown = deltas(results)
    assert any("Bash: npm test" in d for d in shown)
    assert shown[-1] == "All tests pass."
    assert messages(results) == ["All tests pass."]


async def test_an_empty_first_turn_is_an_empty_response_but_a_silent_follow_up_gets_a_notice():
    r, host, _ = make([[ev.Usage(1, 1)]])
    results = await collect(r, host, host.make_context("x", steering=True, surface="api"))
    assert failure(results)[0] == "upstream.empty_response"
    r, host, _ = make([[sleep(0.05), ev.Text("done"), sleep(0.2)], [ev.Usage(1, 1)]])
    ctx = host.make_context("x", steering=True)
    results = await collect(r, host, ctx, queue_on_first_delta(host, ctx, "thanks"))
    assert rtype(terminal(results)) == "run.completed"
    assert len(messages(results)) == 2 and "without a reply" in messages(results)[1]


async def test_the_upstreams_stop_reason_becomes_the_runs_finish_reason():
    r, host, _ = make([[ev.Text("cut short"), ev.Finish("max_turns")]])
    results = await collect(r, host, host.make_context("x", steering=True))
    assert terminal(results).data["finish_reason"] == "max_turns"
    r, host, _ = make([[ev.Text("fine")]])
    assert terminal(await collect(r, host, host.make_context("x"))).data["finish_reason"] == "stop"
