"""Chat commands (issue 36) for every runner that takes them (the coding agents: ``Adapter.commands``),
through the scripted CLIs: what a member of the chat sees, what the agent is started with, and who
may do what. One implementation in the kit (runner_kit/chat_commands.py); a plugin passes by
setting ``commands`` and naming its workspace."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from runner_kit.chat_commands import BOOK_SUFFIX, DAY_KEY
from runners_cli.host import Identity
from runners_cli.plugins import find, load_runner_class
from tests.helpers import children_left, collect, make_runner, messages, rtype, run, state_updates, terminal

TOKENS = ["Hello", ", ", "this ", "is ", "the ", "answer."]
SLOW = ["working "] * 80  # 8 s of answer at 0.1 s a token, unless stopped
ALICE = Identity(actor_id="u-alice", actor_name="Alice")
BOB = Identity(actor_id="u-bob", actor_name="Bob")


@pytest.fixture(autouse=True)
def _commands_only(case):
    adapter = load_runner_class(find(case.plugin)).adapter
    if not getattr(adapter, "commands", False):
        pytest.skip(f"{case.plugin} takes no chat commands (not a coding agent)")


async def long_run_started(case, server, host) -> tuple[Any, dict[str, Any], asyncio.Future[list[Any]]]:
    """A slow answer running in a run of its own (a host that does not steer), once the model has it."""
    case.answer(server, SLOW, 0.1)
    runner = make_runner(case.plugin, host)
    cfg = case.config(server)
    long_run = asyncio.ensure_future(run(runner, host, "long job", config=cfg))
    for _ in range(400):
        if case.seen(server):
            break
        await asyncio.sleep(0.02)
    return runner, cfg, long_run


async def collect_sending(runner, host, ctx, *follow_ups: Any) -> list[Any]:
    """Run ``ctx``; once its answer starts streaming, these follow-ups are sent into the running turn
    (a text, or ``(text, identity)``), in order."""
    sent: list[bool] = []

    def during(r):
        if rtype(r) == "message.delta" and not sent:
            sent.append(True)
            for f in follow_ups:
                text, identity = f if isinstance(f, tuple) else (f, None)
                host.queue_steering(ctx, text, identity=identity)

    return await collect(runner, host, ctx, during)


def sessions_seen(case, server) -> list[str]:
    return [s.conversation for s in case.seen(server)]


def shown(results) -> str:
    return "\n".join(messages(results))


async def test_help_is_answered_without_starting_the_agent(case, server, host):
    results = await run(make_runner(case.plugin, host), host, "/help", config=case.config(server))
    assert rtype(terminal(results)) == "run.completed"
    text = shown(results)
    for name in ("/new", "/sessions", "/resume", "/stop", "/mode", "/model", "/cost", "/diff", "/help"):
        assert name in text, (name, text)
    assert not case.seen(server), "a command never reaches the model"
    assert not await children_left(), "nor starts the agent"


async def test_chinese_help_and_unknown_command_answered_with_the_list(case, server, host):
    runner = make_runner(case.plugin, host)
    results = await run(runner, host, "/帮助", config=case.config(server))  # not a command word: goes to the agent
    assert case.seen(server), "a slash and non-ASCII text is an ordinary message"
    results = await run(runner, host, "/frobnicate now", config={**case.config(server), "advanced-settings": True, "chat-language": "zh_Hans"})
    text = shown(results)
    assert "未知命令 /frobnicate" in text and "/resume" in text, text


async def test_double_prefix_and_paths_go_to_the_agent_as_typed(case, server, host):
    runner = make_runner(case.plugin, host)
    await run(runner, host, "//new is what I typed", config=case.config(server))
    await run(runner, host, "/tmp/build.log shows an error", config=case.config(server))
    sent = [s.sent for s in case.seen(server)]
    assert any("/new is what I typed" in s and "//new" not in s for s in sent), sent
    assert any("/tmp/build.log shows an error" in s for s in sent), sent


async def test_a_blank_prefix_turns_commands_off(case, server, host):
    results = await run(make_runner(case.plugin, host), host, "/help",
                        config={**case.config(server), "advanced-settings": True, "command-prefix": ""})
    assert "/resume" not in shown(results)
    assert any('/help' in s.sent for s in case.seen(server)), "the agent got it"


async def test_cost_footer_counts_the_session_and_cost_command_reports_it(case, server, host):
    runner = make_runner(case.plugin, host)
    cfg = {**case.config(server), "advanced-settings": True, "cost-footer": True}
    case.answer(server, TOKENS, 0.0)
    first = await run(runner, host, "one", config=cfg)
    second = await run(runner, host, "two", config=cfg)
    assert messages(first)[-1].startswith("".join(TOKENS))
    assert "💰" in messages(first)[-1] and "1 turn" in messages(first)[-1], messages(first)
    assert "2 turns" in messages(second)[-1] and "tokens" in messages(second)[-1], messages(second)
    books = state_updates(second, books=True)
    assert any(k.endswith(BOOK_SUFFIX) for k in books) and DAY_KEY in books
    cost = shown(await run(runner, host, "/usage", config=cfg))
    assert "This session:" in cost and "in 2 turns" in cost and "Today" in cost, cost
    assert len(case.seen(server)) >= 2 and not any("/usage" in s.sent for s in case.seen(server))


async def test_new_starts_a_fresh_session_and_resume_goes_back(case, server, host):
    runner = make_runner(case.plugin, host)
    cfg = case.config(server)
    await run(runner, host, "remember the word apple", config=cfg)
    first = sessions_seen(case, server)[-1]
    said = shown(await run(runner, host, "/new", config=cfg))
    assert "fresh" in said, said
    await run(runner, host, "a new topic", config=cfg)
    second = sessions_seen(case, server)[-1]
    assert second and second != first, "the next message started a new agent session"
    listed = shown(await run(runner, host, "/sessions", config=cfg))
    assert "“a new topic”" in listed and "“remember the word apple”" in listed and "current" in listed, listed
    assert listed.index("a new topic") < listed.index("remember the word apple"), "newest first"
    said = shown(await run(runner, host, "/resume 2", config=cfg))
    assert "Back in session 2" in said, said
    await run(runner, host, "what was the word?", config=cfg)
    assert sessions_seen(case, server)[-1] == first, "resumed the first agent session"
    bad = shown(await run(runner, host, "/resume 9", config=cfg))
    assert "1 to 2" in bad, bad


async def test_per_person_sessions_are_each_members_own(case, server, host):
    if "actor" not in case.group_modes:
        pytest.skip("no per-person mode")
    runner = make_runner(case.plugin, host)
    cfg = {**case.config(server), "advanced-settings": True, "user-id-source": "actor"}
    await run(runner, host, "alice's work", config=cfg, identity=ALICE)
    alice = sessions_seen(case, server)[-1]
    await run(runner, host, "/new", config=cfg, identity=BOB)  # Bob's /new is his own
    await run(runner, host, "alice again", config=cfg, identity=ALICE)
    assert sessions_seen(case, server)[-1] == alice
    listed = shown(await run(runner, host, "/sessions", config=cfg, identity=BOB))
    assert "alice" not in listed, "Bob never sees Alice's sessions"


async def test_stop_as_a_follow_up_stops_the_running_turn_now(case, server, host):
    case.answer(server, SLOW, 0.1)
    runner = make_runner(case.plugin, host)
    ctx = host.make_context("long job", config=case.config(server), steering=True)
    start = time.monotonic()
    # a follow-up before the stop: not started
    results = await collect_sending(runner, host, ctx, "and also this", "/stop")
    assert time.monotonic() - start < 6.0, "the turn was stopped, not run to its end"
    assert rtype(terminal(results)) == "run.completed", terminal(results).data
    text = shown(results)
    assert "Stopped by Tester" in text, text
    assert "Not started after the stop" in text and "and also this" in text, text
    assert not any("and also this" in s.sent for s in case.seen(server)), "the follow-up never reached the agent"
    assert not host.steering
    assert not await children_left()


async def test_stop_from_a_run_of_its_own_stops_the_other_run(case, server, host):
    """A host that does not steer: /stop is a run of its own and reaches the session's running turn."""
    runner, cfg, long_run = await long_run_started(case, server, host)
    await asyncio.sleep(0.3)
    said = shown(await run(runner, host, "/stop", config=cfg))
    assert "Stopping the running turn" in said, said
    results = await asyncio.wait_for(long_run, 6.0)
    assert "Stopped by Tester" in shown(results), shown(results)
    nothing = shown(await run(runner, host, "/stop", config=cfg))
    assert "Nothing is running" in nothing, nothing
    assert not await children_left()


async def test_another_members_stop_does_not_stop_my_turn_unless_an_approver(case, server, host):
    if "actor" not in case.group_modes:
        pytest.skip("no per-person mode")
    case.answer(server, ["slow "] * 20, 0.05)
    runner = make_runner(case.plugin, host)
    cfg = {**case.config(server), "advanced-settings": True, "user-id-source": "actor"}
    ctx = host.make_context("alice's long job", config=cfg, identity=ALICE, steering=True)
    results = await collect_sending(runner, host, ctx, ("/stop", BOB))
    text = shown(results)
    assert "Stopped by" not in text and "slow slow" in text, text
    assert "Nothing is running in your session" in text, text
    # an approver's /stop reaches anyone's turn
    case.answer(server, SLOW, 0.1)
    cfg = {**cfg, "approvers": ["u-bob"]}
    ctx = host.make_context("alice's long job", config=cfg, identity=ALICE, steering=True)
    start = time.monotonic()
    results = await collect_sending(runner, host, ctx, ("/stop", BOB))
    assert time.monotonic() - start < 6.0
    assert "Stopped by Bob" in shown(results), shown(results)
    assert not await children_left()


async def test_mode_and_model_within_what_the_owner_allows(case, server, host):
    runner = make_runner(case.plugin, host)
    cfg = {**case.config(server), "advanced-settings": True, "user-id-source": "actor", "chat-models": "model-b, model-c",
           "model": "model-a", "chat-modes": "ask"}
    said = shown(await run(runner, host, "/mode", config=cfg))
    assert "edits" in said and "plan" in said and "ask" in said and "full" not in said.split("Allowed here:")[1], said
    refused = shown(await run(runner, host, "/mode full", config=cfg))
    assert "not a mode the bot owner allows" in refused, refused
    assert "Mode of this session: plan" in shown(await run(runner, host, "/mode plan", config=cfg))
    assert "plan" in shown(await run(runner, host, "/mode", config=cfg)).split("Allowed")[0]
    refused = shown(await run(runner, host, "/model gpt-x", config=cfg))
    assert "not a model the bot owner allows" in refused and "model-b" in refused, refused
    assert "Model of this session: model-b" in shown(await run(runner, host, "/model MODEL-B", config=cfg))
    case.answer(server, TOKENS, 0.0)
    await run(runner, host, "go", config=cfg)
    assert '"model-b"' in case.seen(server)[-1].sent or "model-b" in case.seen(server)[-1].sent, \
        "the agent was started with the chosen model"
    # an owner who narrows the list later wins over what the chat chose
    await run(runner, host, "again", config={**cfg, "chat-models": ""})
    assert "model-b" not in case.seen(server)[-1].sent


async def test_a_shared_session_needs_an_approver_to_change_mode_or_model(case, server, host):
    if "conversation" not in case.group_modes:
        pytest.skip("no shared mode")
    runner = make_runner(case.plugin, host)
    cfg = {**case.config(server), "advanced-settings": True, "user-id-source": "conversation", "chat-models": "model-b", "chat-modes": "full"}
    said = shown(await run(runner, host, "/mode full", config=cfg, identity=BOB))
    assert "Only the bot's approvers" in said and "named none" in said, said
    said = shown(await run(runner, host, "/model model-b", config={**cfg, "approvers": ["u-alice"]}, identity=BOB))
    assert "Only the bot's approvers" in said, said
    said = shown(await run(runner, host, "/model model-b", config={**cfg, "approvers": ["u-alice"]}, identity=ALICE))
    assert "Model of this session: model-b" in said, said
    # a private chat is the sender's own, whatever the identity mode
    private = Identity(actor_id="u-bob", actor_name="Bob", conversation_id="dm-bob", launcher_type="person",
                       launcher_id="u-bob")
    said = shown(await run(runner, host, "/mode full", config=cfg, identity=private))
    assert "Mode of this session: full" in said, said


async def test_a_used_up_session_budget_stops_the_next_turn_with_a_clear_line(case, server, host):
    runner = make_runner(case.plugin, host)
    cfg = {**case.config(server), "advanced-settings": True, "session-budget-tokens": 1}
    case.answer(server, TOKENS, 0.0)
    await run(runner, host, "first", config=cfg)
    calls = len(case.seen(server))
    results = await run(runner, host, "second", config=cfg)
    assert rtype(terminal(results)) == "run.completed"
    assert "reached its budget" in shown(results) and "/new" in shown(results), shown(results)
    assert len(case.seen(server)) == calls, "the agent got nothing"
    await run(runner, host, "/new", config=cfg)
    results = await run(runner, host, "third", config=cfg)
    assert "".join(TOKENS) in shown(results), "a fresh session has its own budget"


async def test_a_daily_budget_counts_every_conversation_of_the_bot(case, server, host):
    runner = make_runner(case.plugin, host)
    cfg = {**case.config(server), "advanced-settings": True, "daily-budget-tokens": 1}
    case.answer(server, TOKENS, 0.0)
    await run(runner, host, "first", config=cfg, identity=Identity(conversation_id="day-a"))
    results = await run(runner, host, "other chat", config=cfg, identity=Identity(conversation_id="day-b"))
    assert "today's budget" in shown(results), shown(results)


async def test_commands_sent_during_a_turn_are_answered_after_it_in_order(case, server, host):
    case.answer(server, ["slow "] * 20, 0.05)
    runner = make_runner(case.plugin, host)
    cfg = case.config(server)
    ctx = host.make_context("job", config=cfg, steering=True)
    results = await collect_sending(runner, host, ctx, "/cost", "/new")
    shown_ = messages(results)
    assert rtype(terminal(results)) == "run.completed"
    assert shown_[0].startswith("slow"), shown_
    assert "in 1 turn" in shown_[1] and "fresh" in shown_[2], shown_
    first = sessions_seen(case, server)[-1]
    case.answer(server, TOKENS, 0.0)
    await run(runner, host, "next", config=cfg)
    assert sessions_seen(case, server)[-1] != first, "the /new took effect after the turn"


async def test_new_from_a_run_of_its_own_while_a_turn_runs_is_refused(case, server, host):
    runner, cfg, long_run = await long_run_started(case, server, host)
    said = shown(await run(runner, host, "/new", config=cfg))
    assert "still running" in said, said
    await run(runner, host, "/stop", config=cfg)
    results = await asyncio.wait_for(long_run, 6.0)
    assert rtype(terminal(results)) == "run.completed"
    assert not await children_left()


async def test_idle_workspaces_and_homes_are_removed_but_never_the_running_one(case, server, host):
    """Housekeeping (runner_kit.housekeeping): a conversation idle past ``cleanup-after-days`` loses its
    workspace and HOME when the agent next starts for anyone; the conversation being answered keeps its."""
    import os

    from runner_kit import housekeeping
    from runner_kit.process import data_root

    runner = make_runner(case.plugin, host)
    cfg = {**case.config(server), "advanced-settings": True, "cleanup-after-days": 2}
    await run(runner, host, "first", config=cfg)
    [platform_dir] = [p for p in data_root().iterdir() if (p / "workspaces").is_dir()]
    [mine] = list((platform_dir / "workspaces").iterdir())
    old_ws = platform_dir / "workspaces" / ("ab" * 10)
    old_home = platform_dir / "homes" / ("cd" * 10)
    for d in (old_ws, old_home):
        d.mkdir(parents=True)
        (d / "work.txt").write_text("old")
        for f in (d / "work.txt", d):
            os.utime(f, (time.time() - 5 * 86400,) * 2)
    housekeeping._last_sweep.clear()  # this process swept this data directory in the first run
    await run(runner, host, "second", config=cfg)
    await asyncio.gather(*list(housekeeping._tasks))
    assert not old_ws.exists() and not old_home.exists(), "idle for 5 days, the limit is 2"
    assert mine.exists(), "the conversation that just ran keeps its workspace"


async def test_a_follow_up_that_waits_says_so_under_the_running_answer(case, server, host):
    """next-turn: the agent never gets a message in the middle of its turn; the sender is told at once,
    under the streamed answer, that it comes after the turn (never in the complete message)."""
    case.answer(server, ["step "] * 30, 0.05)
    runner = make_runner(case.plugin, host)
    ctx = host.make_context("job", config={**case.config(server), "advanced-settings": True, "follow-up-mode": "next-turn"}, steering=True)
    results = await collect_sending(runner, host, ctx, ("and then this", Identity(actor_id="u-1", actor_name="Tester")))
    waiting = [r.data["chunk"]["all_content"] for r in results if rtype(r) == "message.delta"
               and "handled after the current turn" in r.data["chunk"]["all_content"]]
    assert waiting and waiting[0].startswith("step"), "shown under the answer while the turn ran"
    shown_ = messages(results)
    assert len(shown_) == 2 and "handled after" not in shown_[0], shown_


def _question(case):
    q = case.question
    if q is None or isinstance(q, str):
        pytest.skip(f"{case.plugin} never asks the chat")
    return q


async def test_stop_while_the_agent_asks_in_the_chat_denies_and_stops(case, server, host):
    q = _question(case)
    q.ask(server, True)
    runner = make_runner(case.plugin, host)
    cfg = {**case.config(server), "advanced-settings": True, **q.config}
    ctx = host.make_context("do-it", config=cfg, steering=True)
    sent: list[bool] = []

    def during(r):
        if rtype(r) == "message.completed" and q.shown in str(r.data) and not sent:
            sent.append(True)
            q.ask(server, False)
            host.queue_steering(ctx, "/stop")

    start = time.monotonic()
    results = await asyncio.wait_for(collect(runner, host, ctx, during), 30)
    assert sent, "the question reached the chat"
    assert time.monotonic() - start < 10, "the question did not wait for its timeout"
    assert rtype(terminal(results)) == "run.completed", terminal(results).data
    assert "Stopped by Tester" in shown(results), shown(results)
    assert q.received(server) != q.expect, "nothing was allowed"
    assert not await children_left()


async def test_stop_for_a_question_left_waiting_denies_it_and_frees_the_session(case, server, host):
    q = _question(case)
    if not find(case.plugin).capabilities.get("interactions"):
        pytest.skip("no buttons: a question never waits past its run")
    q.ask(server, True)
    runner = make_runner(case.plugin, host)
    cfg = {**case.config(server), "advanced-settings": True, **q.config}
    ctx = host.make_context("do-it", config=cfg, interactions=True)
    results = await asyncio.wait_for(collect(runner, host, ctx), 30)
    assert host.interactions, "the question went out as buttons and waits"
    q.ask(server, False)
    said = shown(await run(runner, host, "/stop", config=cfg))
    assert "question is denied" in said, said
    assert q.received(server) != q.expect
    case.answer(server, TOKENS, 0.0)
    after = await asyncio.wait_for(run(runner, host, "next", config=cfg), 30)
    assert "".join(TOKENS) in shown(after), "the session is free again"
    assert results  # noqa: B018
    assert not await children_left()


async def test_a_model_switch_during_a_run_applies_to_the_next_follow_up(case, server, host):
    """/model sent while a turn runs is answered after it, and the follow-up after it already goes to
    the chosen model: the agent starts again in the same session (the model sees the history)."""
    case.answer(server, ["slow "] * 12, 0.05)
    runner = make_runner(case.plugin, host)
    cfg = {**case.config(server), "advanced-settings": True, "user-id-source": "actor", "model": "model-a",
           "chat-models": "model-b"}
    ctx = host.make_context("first job", config=cfg, steering=True)
    results = await collect_sending(runner, host, ctx, "/model model-b", "second job")
    assert rtype(terminal(results)) == "run.completed", terminal(results).data
    assert any("Model of this session: model-b" in m for m in messages(results)), messages(results)
    seen = case.seen(server)
    first = next(s for s in seen if "first job" in s.sent)
    second = next(s for s in seen if "second job" in s.sent)
    assert "model-a" in first.sent and "model-b" in second.sent and "model-a" not in second.sent.split("first job")[-1]
    assert first.conversation == second.conversation, "the same agent session, resumed"
    assert "first job" in second.sent, "with its history"


def _committed_repo(repo, files: dict[str, str]):
    import subprocess

    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.email=t@example.com", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    for name, text in files.items():
        (repo / name).write_text(text)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "first"], check=True)
    return repo


async def test_diff_shows_what_changed_in_the_workspace(case, server, host, tmp_path):
    """/diff in a workspace that is a git repository: the summary and the patch; in one that is not:
    the files changed since the session started. The agent is not started for it."""
    runner = make_runner(case.plugin, host)
    repo = _committed_repo(tmp_path / "repo", {"app.py": "print('one')\n"})
    cfg = {**case.config(server), "workspace": str(repo)}
    await run(runner, host, "change it", config=cfg)
    (repo / "app.py").write_text("print('two')\n")  # what the agent did
    (repo / "notes.md").write_text("new\n")
    calls = len(case.seen(server))
    said = shown(await run(runner, host, "/diff", config=cfg))
    assert "app.py" in said and "notes.md" in said, said
    assert "-print('one')" in said and "+print('two')" in said, said
    assert len(case.seen(server)) == calls, "the agent was not asked"
    # not a repository: what changed since the session started
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "old.txt").write_text("before the session")
    os_time = time.time() - 3600
    import os

    os.utime(plain / "old.txt", (os_time, os_time))
    cfg = {**case.config(server), "workspace": str(plain)}
    await run(runner, host, "make a report", config=cfg)
    (plain / "report.txt").write_text("made by the agent")
    said = shown(await run(runner, host, "/diff", config=cfg))
    assert "report.txt" in said and "old.txt" not in said, said
