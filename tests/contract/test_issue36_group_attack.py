"""Issue 36 chat commands in a group (attack brief 1): two or three members in one conversation, per
``user-id-source`` mode, alternating and overlapping with commands; what each member sees, whose
session a command changes, and that nothing sent is dropped."""

from __future__ import annotations

import time
from typing import Any

import pytest

from runners_cli.host import Identity
from runners_cli.plugins import find, load_runner_class
from tests.helpers import children_left, collect, make_runner, messages, rtype, run, terminal

TOKENS = ["Hello", ", ", "this ", "is ", "the ", "answer."]
ALICE = Identity(actor_id="u-alice", actor_name="Alice")
BOB = Identity(actor_id="u-bob", actor_name="Bob")
CAROL = Identity(actor_id="u-carol", actor_name="Carol")
FAKE_ALICE = Identity(actor_id="u-mallory", actor_name="Alice")  # another member who calls herself Alice


@pytest.fixture(autouse=True)
def _commands_only(case):
    adapter = load_runner_class(find(case.plugin)).adapter
    if not getattr(adapter, "commands", False):
        pytest.skip(f"{case.plugin} takes no chat commands (not a coding agent)")


def _mode(case, mode: str) -> None:
    if mode not in case.group_modes:
        pytest.skip(f"{case.plugin} has no user-id-source {mode}")


def shown(results) -> str:
    return "\n".join(messages(results))


def convs(case, server) -> list[str]:
    return [s.conversation for s in case.seen(server)]


def sent_with(case, server, words: str):
    return [s for s in case.seen(server) if words in s.sent]


def on_first_delta(ctx, host, *follow_ups):
    """A ``during`` hook: at the first streamed piece of the run's answer, these follow-ups are
    claimed for the run ((text, Identity) each), in order."""
    done: list[bool] = []

    def during(r: Any) -> None:
        if rtype(r) == "message.delta" and not done:
            done.append(True)
            for text, ident in follow_ups:
                host.queue_steering(ctx, text, identity=ident)

    return during


@pytest.mark.parametrize("mode", ["conversation", "actor"])
async def test_new_during_a_turn_then_a_message_in_the_same_run_goes_to_the_fresh_session(case, server, host, mode):
    """Bob's /new while Alice's turn runs is answered "your next message goes to a fresh session"; the
    next message of that session, taken by the same run, must then go to a fresh agent session."""
    _mode(case, mode)
    runner = make_runner(case.plugin, host)
    cfg = {**case.config(server), "advanced-settings": True, "user-id-source": mode}
    who = BOB if mode == "conversation" else ALICE  # the /new is for the session the next message is in
    case.answer(server, ["slow "] * 20, 0.05)
    ctx = host.make_context("alice's first topic", config=cfg, identity=ALICE, steering=True)
    results = await collect(runner, host, ctx, on_first_delta(ctx, host, ("/new", who), ("a fresh topic", ALICE)))
    assert rtype(terminal(results)) == "run.completed", terminal(results).data
    text = shown(results)
    assert "Started a fresh agent session" in text, text
    first = sent_with(case, server, "alice's first topic")[0]
    [fresh] = sent_with(case, server, "a fresh topic")
    assert fresh.conversation != first.conversation, "told 'your next message goes to a fresh session'"
    assert "alice's first topic" not in fresh.sent, "the fresh session has none of the old one's history"
    assert not await children_left()


async def test_per_person_cost_and_sessions_asked_during_anothers_turn_are_each_ones_own(case, server, host):
    """actor: Bob's /cost and /sessions, sent while Alice's turn runs, answer about Bob's session
    (his earlier work), Alice's /cost about hers; nobody sees another's titles or turns."""
    _mode(case, "actor")
    runner = make_runner(case.plugin, host)
    cfg = {**case.config(server), "advanced-settings": True, "user-id-source": "actor"}
    case.answer(server, TOKENS, 0.0)
    await run(runner, host, "bob's secret plan", config=cfg, identity=BOB)
    await run(runner, host, "bob's second step", config=cfg, identity=BOB)
    case.answer(server, ["slow "] * 20, 0.05)
    ctx = host.make_context("alice's private work", config=cfg, identity=ALICE, steering=True)
    results = await collect(runner, host, ctx, on_first_delta(
        ctx, host, ("/cost", BOB), ("/sessions", BOB), ("/cost", ALICE), ("/sessions", ALICE)))
    assert rtype(terminal(results)) == "run.completed", terminal(results).data
    said = messages(results)
    assert said[0].startswith("slow"), said
    bob_cost, bob_sessions, alice_cost, alice_sessions = said[1:5]
    assert "in 2 turns" in bob_cost, bob_cost
    assert "in 1 turn" in alice_cost, alice_cost
    assert "bob's secret plan" in bob_sessions and "alice" not in bob_sessions, bob_sessions
    assert "alice's private work" in alice_sessions and "bob" not in alice_sessions, alice_sessions


@pytest.mark.parametrize("mode", ["conversation", "actor"])
async def test_a_command_that_waits_for_the_turn_says_so_under_the_running_answer(case, server, host, mode):
    """A /cost sent while Alice's turn runs is answered only after it: like any follow-up that waits,
    the sender is told at once, under the running answer, by name."""
    _mode(case, mode)
    case.answer(server, ["step "] * 40, 0.05)
    runner = make_runner(case.plugin, host)
    cfg = {**case.config(server), "advanced-settings": True, "user-id-source": mode, "follow-up-mode": "next-turn"}
    ctx = host.make_context("job", config=cfg, identity=ALICE, steering=True)
    results = await collect(runner, host, ctx, on_first_delta(ctx, host, ("/cost", BOB)))
    waiting = [r.data["chunk"]["all_content"] for r in results if rtype(r) == "message.delta"
               and "handled after the current turn" in r.data["chunk"]["all_content"]]
    assert waiting and "Bob" in waiting[-1], "Bob was told his /cost comes after the turn"
    said = messages(results)
    assert "handled after" not in said[0] and "This session" in said[1], said


@pytest.mark.parametrize("mode", ["conversation", "actor"])
async def test_bob_cannot_change_the_mode_of_a_shared_session_during_alices_turn(case, server, host, mode):
    """conversation: Bob (no approver) sends /mode full while Alice's turn runs: refused, and the
    next turn is still in the owner's mode. actor: the same /mode is Bob's own, and Alice's next turn
    (in her session, same run) keeps the owner's mode."""
    _mode(case, mode)
    runner = make_runner(case.plugin, host)
    cfg = {**case.config(server), "advanced-settings": True, "user-id-source": mode, "chat-modes": "full",
           "model": "model-a", "chat-models": "model-b"}
    case.answer(server, ["slow "] * 20, 0.05)
    ctx = host.make_context("alice's job", config=cfg, identity=ALICE, steering=True)
    results = await collect(runner, host, ctx, on_first_delta(
        ctx, host, ("/model model-b", BOB), ("alice's next step", ALICE)))
    text = shown(results)
    if mode == "conversation":
        assert "Only the bot's approvers" in text, text
    else:
        assert "Model of this session: model-b" in text, text
    [nxt] = sent_with(case, server, "alice's next step")
    assert "model-b" not in nxt.sent, "Alice's next turn is not in the model Bob chose"
    assert not await children_left()


async def test_a_member_named_alice_cannot_stop_alices_turn(case, server, host):
    """actor: Mallory, whose display name is also "Alice", sends /stop during Alice's turn: Alice's
    turn runs to its end, and Mallory is told nothing of hers runs."""
    _mode(case, "actor")
    case.answer(server, ["slow "] * 20, 0.05)
    runner = make_runner(case.plugin, host)
    cfg = {**case.config(server), "advanced-settings": True, "user-id-source": "actor", "approvers": ["u-carol"]}
    ctx = host.make_context("alice's long job", config=cfg, identity=ALICE, steering=True)
    results = await collect(runner, host, ctx, on_first_delta(ctx, host, ("/stop", FAKE_ALICE)))
    said = messages(results)
    assert "Stopped by" not in said[0] and said[0].count("slow") == 20, said
    assert "Nothing is running in your session" in said[1], said


async def test_an_approvers_stop_in_a_busy_group_stops_the_turn_and_drops_no_one_elses_message(case, server, host):
    """actor: Alice's turn runs, Bob's message for his own session waits, approver Carol sends /stop:
    Alice's turn stops ("Stopped by Carol" under Alice's answer) and Bob's message is still answered,
    in his own session."""
    _mode(case, "actor")
    case.answer(server, ["slow "] * 80, 0.05)
    runner = make_runner(case.plugin, host)
    cfg = {**case.config(server), "advanced-settings": True, "user-id-source": "actor", "approvers": ["u-carol"]}
    ctx = host.make_context("alice's long job", config=cfg, identity=ALICE, steering=True)
    fired: list[bool] = []

    def during(r: Any) -> None:
        if rtype(r) == "message.delta" and not fired:
            fired.append(True)
            host.queue_steering(ctx, "bob's question", identity=BOB)
            host.queue_steering(ctx, "/stop", identity=CAROL)
            case.answer(server, TOKENS, 0.0)

    start = time.monotonic()
    results = await collect(runner, host, ctx, during)
    assert time.monotonic() - start < 8.0
    said = messages(results)
    assert said[0].startswith("slow") and "Stopped by Carol" in said[0], said
    assert sent_with(case, server, "bob's question"), "Bob's message reached his session"
    assert any("".join(TOKENS) in m for m in said[1:]), said
    assert "not answered" not in shown(results), said
    assert not await children_left()


async def test_a_stop_in_a_shared_session_is_anyones_and_names_who(case, server, host):
    """conversation: Bob's /stop stops the turn Alice started (one shared session) and the chat says
    Bob stopped it, under Alice's answer."""
    _mode(case, "conversation")
    case.answer(server, ["slow "] * 80, 0.05)
    runner = make_runner(case.plugin, host)
    cfg = {**case.config(server), "advanced-settings": True, "user-id-source": "conversation"}
    ctx = host.make_context("alice's long job", config=cfg, identity=ALICE, steering=True)
    start = time.monotonic()
    results = await collect(runner, host, ctx, on_first_delta(ctx, host, ("/stop", BOB)))
    assert time.monotonic() - start < 6.0
    said = messages(results)
    assert said[0].startswith("slow") and said[0].rstrip().endswith("(Stopped by Bob.)"), said


async def test_a_stop_right_after_the_turn_ended_also_stops_what_was_sent_before_it(case, server, host):
    """Alice's "also do X" and "/stop" arrive as her turn ends (pulled together after it): the stop
    must not be answered "nothing is running" and then the agent start on "also do X" anyway; what
    was sent before the /stop is not started (as when the stop reaches the running turn)."""
    case.answer(server, TOKENS, 0.0)
    runner = make_runner(case.plugin, host)
    cfg = {**case.config(server), "advanced-settings": True}
    ctx = host.make_context("alice's job", config=cfg, identity=ALICE, steering=True)
    # a turn of no time: both are pulled after it, with nothing running any more
    results = await collect(runner, host, ctx, on_first_delta(ctx, host, ("also do X", ALICE), ("/stop", ALICE)))
    assert not sent_with(case, server, "also do X"), "the agent never got what the /stop came after"
    text = shown(results)
    assert "also do X" in text, "named as not started"


async def test_budgets_session_per_person_and_day_for_the_whole_bot(case, server, host):
    """actor: Alice uses up her session's budget, Bob still works in his; a day budget used up by
    Alice and Bob together stops Carol too."""
    _mode(case, "actor")
    runner = make_runner(case.plugin, host)
    case.answer(server, TOKENS, 0.0)
    cfg = {**case.config(server), "advanced-settings": True, "user-id-source": "actor", "session-budget-tokens": 1}
    await run(runner, host, "alice one", config=cfg, identity=ALICE)
    refused = shown(await run(runner, host, "alice two", config=cfg, identity=ALICE))
    assert "reached its budget" in refused, refused
    bob = shown(await run(runner, host, "bob one", config=cfg, identity=BOB))
    assert "".join(TOKENS) in bob, "Bob's session has its own budget"
    used = len(case.seen(server))
    day_cfg = {**cfg, "session-budget-tokens": 0, "daily-budget-tokens": 1}
    carol = shown(await run(runner, host, "carol one", config=day_cfg, identity=CAROL))
    assert "today's budget" in carol, carol
    assert len(case.seen(server)) == used


async def test_a_message_sent_right_after_a_stop_is_answered_not_dropped(case, server, host):
    """Alice sends /stop and at once "now do Y instead" (pulled together while the turn runs): the turn
    stops, and what she sent after the stop is her next turn, not named as "not started"."""
    case.answer(server, ["slow "] * 80, 0.05)
    runner = make_runner(case.plugin, host)
    cfg = {**case.config(server), "advanced-settings": True}
    ctx = host.make_context("alice's long job", config=cfg, identity=ALICE, steering=True)
    fired: list[bool] = []

    def during(r: Any) -> None:
        if rtype(r) == "message.delta" and not fired:
            fired.append(True)
            host.queue_steering(ctx, "before the stop", identity=ALICE)
            host.queue_steering(ctx, "/stop", identity=ALICE)
            host.queue_steering(ctx, "now do Y instead", identity=ALICE)
            case.answer(server, TOKENS, 0.0)

    start = time.monotonic()
    results = await collect(runner, host, ctx, during)
    assert time.monotonic() - start < 8.0
    said = messages(results)
    assert "Stopped by Alice" in said[0], said
    assert sent_with(case, server, "now do Y instead"), "the message after the stop reached the agent"
    assert not sent_with(case, server, "before the stop"), "what came before the stop did not"
    assert any("".join(TOKENS) in m for m in said[1:]), said
    assert "before the stop" in shown(results), "named as not started"
    assert not any("now do Y instead" in m and "Not started" in m for m in said), said


async def test_bobs_new_answered_in_alices_turn_holds_for_his_next_message_in_the_same_run(case, server, host):
    """actor, one run: Alice's turn, then Bob's (his own session), then Alice's again; during that one
    Bob sends /new and then a message. Bob was told "your next message goes to a fresh session": it
    must, even though his session's earlier turn ran in this same run."""
    _mode(case, "actor")
    case.answer(server, ["slow "] * 12, 0.05)
    runner = make_runner(case.plugin, host)
    cfg = {**case.config(server), "advanced-settings": True, "user-id-source": "actor"}
    ctx = host.make_context("alice's topic", config=cfg, identity=ALICE, steering=True)
    stage: list[int] = [0]
    answered: list[int] = [0]

    def during(r: Any) -> None:
        if rtype(r) == "message.completed" and str(r.data["message"]["content"]).startswith("slow"):
            answered[0] += 1
        if rtype(r) != "message.delta" or stage[0] > answered[0]:
            return
        stage[0] += 1
        if stage[0] == 1:
            host.queue_steering(ctx, "bob's topic", identity=BOB)
        elif stage[0] == 2:
            host.queue_steering(ctx, "alice again", identity=ALICE)
        elif stage[0] == 3:
            host.queue_steering(ctx, "/new", identity=BOB)
            host.queue_steering(ctx, "bob's fresh topic", identity=BOB)

    results = await collect(runner, host, ctx, during)
    assert rtype(terminal(results)) == "run.completed", terminal(results).data
    assert "Started a fresh agent session" in shown(results), messages(results)
    bob_first = sent_with(case, server, "bob's topic")[0]
    [bob_fresh] = sent_with(case, server, "bob's fresh topic")
    assert bob_fresh.conversation != bob_first.conversation, "Bob's next message went to his old session"
    assert "bob's topic" not in bob_fresh.sent
    assert not await children_left()


async def test_a_command_waiting_when_the_turn_runs_out_of_time_is_named_not_dropped(case, server, host):
    """Bob's /cost waits for Alice's turn, which then reaches the run's time limit: the closing line
    names Bob's /cost as not answered (like any follow-up), instead of it vanishing."""
    case.answer(server, ["slow "] * 200, 0.05)
    runner = make_runner(case.plugin, host)
    cfg = {**case.config(server), "advanced-settings": True}
    ctx = host.make_context("alice's long job", config=cfg, identity=ALICE, steering=True, timeout=3.0 + case.startup)
    results = await collect(runner, host, ctx, on_first_delta(ctx, host, ("/cost", BOB)))
    text = shown(results)
    assert "not answered" in text and "“/cost”" in text, text
    assert not await children_left()
