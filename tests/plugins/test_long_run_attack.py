"""Attack, "a long conversation" (attack.md section 2), on the changes since d6750e7: the runner's
end-of-run cleanup that goes on in the background past a near host deadline (``_after_run`` /
``_within`` / ``_CLEANUPS``), and LocalAgent's per-run token bookkeeping (``_groups``, ``_sizes``)
over a tool loop of many rounds that is compacted again and again. Operations are counted, never
timed."""

# ruff: noqa: F811 - the fake/host fixtures are imported from test_local_agent and taken as parameters
from __future__ import annotations

import asyncio
from typing import Any

from runner_kit import runner as kit
from runner_kit import sessions
from tests.fakes.openai import Say, ToolCalls
from tests.helpers import failure, final_text, run, state_updates
from tests.plugins.test_local_agent import CHECKPOINT, CONV, add_tool, cfg, fake, host  # noqa: F401

PLUGIN = "local-agent"


# --- (a) end-of-run cleanup over hundreds of runs with a near deadline -----------------------------


class _Live:
    """A live adapter whose stop and close calls are counted; ``close`` waits on ``gate`` when given."""

    def __init__(self, counts: dict[str, int], gate: asyncio.Event | None = None):
        self.counts, self.gate = counts, gate

    async def cancel(self) -> None:
        self.counts["cancel"] = self.counts.get("cancel", 0) + 1

    async def close(self) -> None:
        self.counts["close"] = self.counts.get("close", 0) + 1
        if self.gate is not None:
            await self.gate.wait()


async def _enter_and_hold(key: str) -> sessions.Slot:
    slot = sessions.enter(key)
    assert slot is not None
    await slot.lock.acquire()
    return slot


async def test_hundreds_of_runs_past_their_deadline_leave_no_cleanup_task_or_slot():
    """300 runs whose host deadline has already passed (the wait is 0 s): every stop and close still
    happens once, in the background, and afterwards no task, slot or lock is left."""
    counts: dict[str, int] = {}
    before = set(kit._CLEANUPS)
    keys = [f"attack-long-run:{i}" for i in range(300)]
    for key in keys:
        slot = await _enter_and_hold(key)
        live = _Live(counts)
        await kit._within(kit._after_run(live, live, slot, [slot], "fake"), -5.0)
    for _ in range(10):  # each cleanup needs a few loop turns, none of them a wait on the clock
        await asyncio.sleep(0)
    assert counts == {"cancel": 300, "close": 300}
    assert set(kit._CLEANUPS) == before
    assert not [k for k in keys if k in sessions.SLOTS]


async def test_a_close_that_hangs_does_not_hold_the_session_forever(monkeypatch):
    """The cleanup runs detached from the run (nothing cancels it any more): a close that never returns
    must still end within CLOSE_GRACE, or the session stays locked and in SLOTS for good (found by this
    attack; runner.py _after_run now bounds the close with CLOSE_GRACE)."""
    monkeypatch.setattr(kit, "CANCEL_GRACE", 0.01)
    monkeypatch.setattr(kit, "CLOSE_GRACE", 0.01, raising=False)  # the close's own limit, where there is one
    counts: dict[str, int] = {}
    gate = asyncio.Event()  # never set: an agent session whose close never returns
    key = "attack-long-run:hung-close"
    slot = await _enter_and_hold(key)
    live = _Live(counts, gate)
    try:
        await kit._within(kit._after_run(None, live, slot, [slot], "fake"), 0.0)
        for _ in range(20):  # twenty times the (patched) grace: a bounded close would be over by now
            await asyncio.sleep(0.01)
        assert counts.get("close") == 1
        assert not slot.lock.locked(), "the session's next run still waits on a close that never returns"
        assert key not in sessions.SLOTS
    finally:
        gate.set()
        for _ in range(5):
            await asyncio.sleep(0)
        sessions.release(slot)
        sessions.SLOTS.pop(key, None)


# --- (b) LocalAgent's bookkeeping over a long, repeatedly compacted tool loop ----------------------


ROUNDS = 8


def _watch(monkeypatch: Any) -> list[dict[str, int]]:
    """Each ``_body`` call: how many groups it walks, how many of them are still sent, how many
    messages it remembers sizes of, and how many messages the request holds."""
    from local_agent.adapter import LocalAdapter  # importable once the runner is loaded

    seen: list[dict[str, int]] = []
    original = LocalAdapter._body

    async def body(self: Any, model: str) -> int:
        msgs = [m for _, m in self.history] + self.transcript
        present = {id(m) for m in msgs}
        seen.append({
            "groups": len(self._groups),
            "live_groups": sum(all(id(m) in present for m in g) for g, _ in self._groups),
            "sizes": len(self._sizes),
            # messages the bookkeeping keeps alive (by reference) that are no longer sent
            "dead_kept": len({id(m) for g, _ in self._groups for m in g} | {k for k, _ in self._sizes.items()}
                             - present),
            "present": len(msgs),
        })
        return await original(self, model)

    monkeypatch.setattr(LocalAdapter, "_body", body)
    return seen


async def _long_loop(fake: Any, host: Any, runner: Any) -> list[Any]:
    add_tool(host, "fetch", lambda p: {"page": p.get("n"), "body": "b" * 2500}, {"n": {"type": "integer"}})
    fake.context_window = 12000
    fake.token_delay = 0  # no wall clock spent streaming
    # three results a round: each round's new messages are counted together, as a group
    fake.script = [ToolCalls([("fetch", {"n": 3 * i + k}) for k in range(3)]) for i in range(ROUNDS)] + [Say("All read.")]
    fake.summary_reply = "SUMMARY: fetched pages"
    config = cfg(**{"context-window-tokens": 12000, "max-tool-iterations": ROUNDS + 5,
                    "context-keep-recent-tokens": 3000})
    res = await run(runner, host, "read them all", config=config, identity=CONV)
    assert final_text(res) == "All read.", failure(res)
    assert CHECKPOINT in state_updates(res)
    assert not fake.refused
    return res


async def test_a_long_compacted_tool_loop_keeps_the_request_bounded(fake, host, runner):
    """The request itself stays within the window however many rounds: the loop can always go on."""
    await _long_loop(fake, host, runner)
    answers = [r for r in fake.chat_requests if not r.get("max_tokens")]
    assert len(answers) == ROUNDS + 1
    sizes = [len(r["messages"]) for r in answers]
    assert max(sizes[ROUNDS // 2:]) <= max(sizes[: ROUNDS // 2]) + 4  # no growth in the second half


async def test_groups_walked_per_round_stay_bounded_after_compaction(fake, host, runner, monkeypatch):
    seen = _watch(monkeypatch)
    await _long_loop(fake, host, runner)
    late = seen[len(seen) // 2:]
    # a group is only useful while all of its members are still sent: the walk should be about the live ones
    assert max(s["groups"] - s["live_groups"] for s in late) <= 3, [(s["groups"], s["live_groups"]) for s in late[-3:]]


async def test_messages_kept_alive_stay_bounded_by_what_is_still_sent(fake, host, runner, monkeypatch):
    seen = _watch(monkeypatch)
    await _long_loop(fake, host, runner)
    late = seen[len(seen) // 2:]
    assert max(s["dead_kept"] for s in late) <= 2 * max(s["present"] for s in late), \
        [(s["dead_kept"], s["present"]) for s in late[-3:]]
