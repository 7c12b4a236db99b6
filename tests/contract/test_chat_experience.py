"""What the person in the chat sees, checked for every plugin over its loopback fake platform:
partial answers kept with a note, failures explained, idle timeout (with and without keep-alives),
the fresh-session notice, group chats with alternating speakers under every identity source,
isolation between bots in one process, and reasoning streamed as a prefix extension."""

from __future__ import annotations

import asyncio
import time

import pytest

from runners_cli.host import Identity
from runners_cli.plugins import find
from tests.helpers import (
    deltas,
    failure,
    final_text,
    make_runner,
    messages,
    rtype,
    run,
    state_updates,
    terminal,
)

TOKENS = ["Hello", ", ", "this ", "is ", "the ", "answer."]
ADVANCED = {"advanced-settings": True}


def need(case, *hooks: str) -> None:
    missing = [h for h in hooks if getattr(case, h) is None]
    if missing:
        pytest.skip(f"{case.plugin} has no {', '.join(missing)} hook")


def declared(case, key: str) -> bool:
    return any(item["name"] == key for item in find(case.plugin).config_items)


# --- partial answers and explained failures -----------------------------------------------------


@pytest.mark.parametrize("how", ["stall", "dropped", "error_event"])
async def test_partial_answer_is_kept_with_a_note_and_the_failure_recorded(case, server, host, how):
    need(case, "stall")
    case.stall(server, False)
    if how == "dropped":
        case.set_fault(server, "truncated")
    elif how == "error_event":
        case.set_fault(server, "error_event")
    results = await run(make_runner(case.plugin, host), host, config=case.config(server), deadline_at=time.time() + 3 + case.startup)
    code, retryable, _ = failure(results)
    assert code in ("upstream.timeout", "upstream.unavailable", "upstream.error") and code != "runner.internal"
    shown = deltas(results)
    assert shown, "the first part was streamed before the failure"
    (final,) = messages(results)
    streamed = shown[-1]
    assert final.startswith(streamed), "the final message keeps the streamed text"
    note = final[len(streamed):]
    assert note.startswith("\n\n") and "incomplete" in note.lower(), "a note on its own line says it is incomplete"
    assert rtype(results[-2]) == "message.completed", "the partial answer is the last message before the failure"


async def test_failure_before_any_answer_is_explained_in_plain_words(case, server, host):
    case.set_fault(server, "http_401")
    results = await run(make_runner(case.plugin, host), host, config=case.config(server))
    code, retryable, message = failure(results)
    assert code == "upstream.auth" and not retryable
    (shown,) = messages(results)
    assert "key" in shown.lower(), shown
    assert code not in shown, "no internal code alone; the words say what happened"
    for secret in case.secrets(server):
        assert secret not in shown


@pytest.mark.parametrize("surface", ["platform", "webui"])
async def test_how_a_shown_failure_ends_per_surface(case, server, host, surface):
    """A pipeline keeps the runner's words only if the run does not end in run.failed (the host would
    put its generic line over them); agent debug shows the message and the run.failed together."""
    case.set_fault(server, "http_401")
    results = await run(make_runner(case.plugin, host), host, config=case.config(server), surface=surface)
    end = terminal(results)
    assert failure(results)[:2] == ("upstream.auth", False)
    assert len(messages(results)) == 1
    if surface == "platform":
        assert rtype(end) == "run.completed" and end.data["finish_reason"] == "upstream.auth"
    else:
        assert rtype(end) == "run.failed" and end.data["code"] == "upstream.auth"


def form_label(case, key: str, locale: str) -> str:
    (item,) = [i for i in find(case.plugin).config_items if i["name"] == key]
    return item["label"][locale]


@pytest.mark.parametrize("said, locale, words", [
    ("hello", "en_US", "settings"),
    ("你好，帮我看一下这个问题", "zh_Hans", "设置"),
])
async def test_missing_config_is_explained_in_the_chat_by_its_form_label(case, server, host, said, locale, words):
    """The chat names the setting as the form shows it, in the language the person wrote in; the raw
    config key stays in the log and the ledger."""
    cfg = case.config(server)
    secrets = set(case.secrets(server))
    key = next((k for k, v in cfg.items() if isinstance(v, str) and v in secrets), None)
    if key is None:
        pytest.skip(f"{case.plugin}'s contract config has no required secret to leave out")
    cfg[key] = ""
    results = await run(make_runner(case.plugin, host), host, said, config=cfg)
    code, _, message = failure(results)
    assert code == "config.missing"
    (shown,) = messages(results)
    assert form_label(case, key, locale) in shown and words in shown, shown
    assert key not in shown, f"the chat names {key!r} by its label: {shown}"
    assert key in message, "the ledger keeps the key"


async def test_a_chinese_message_gets_its_failure_explained_in_chinese(case, server, host):
    case.set_fault(server, "http_401")
    results = await run(make_runner(case.plugin, host), host, "请帮我总结一下今天的讨论", config=case.config(server))
    assert failure(results)[0] == "upstream.auth"
    (shown,) = messages(results)
    assert "拒绝" in shown and "密钥" in shown, shown
    assert "rejected" not in shown and "should check" not in shown


async def test_owner_can_fall_back_to_the_hosts_generic_notice(case, server, host):
    if not declared(case, "explain-failures"):
        pytest.skip("no explain-failures switch")
    case.set_fault(server, "http_401")
    cfg = {**case.config(server), **ADVANCED, "explain-failures": False}
    results = await run(make_runner(case.plugin, host), host, config=cfg)
    assert failure(results)[0] == "upstream.auth"
    assert messages(results) == [], "only the run.failed: the host shows its generic notice"


# --- idle timeout ----------------------------------------------------------------------------------


async def test_idle_timeout_ends_a_silent_stream_early_and_says_how_long(case, server, host):
    need(case, "stall")
    if not declared(case, "idle-timeout"):
        pytest.skip("no idle-timeout")
    case.stall(server, False)
    cfg = {**case.config(server), **ADVANCED, "idle-timeout": 1}
    started = time.monotonic()
    results = await run(make_runner(case.plugin, host), host, config=cfg, deadline_at=time.time() + 20)
    took = time.monotonic() - started
    code, retryable, message = failure(results)
    assert (code, retryable) == ("upstream.timeout", True)
    assert "1 s" in message and "nothing" in message, message
    assert took < 6, "ended by the idle timeout, not the 20 s deadline"


async def test_keepalives_count_as_life(case, server, host):
    need(case, "stall")
    if not declared(case, "idle-timeout"):
        pytest.skip("no idle-timeout")
    case.stall(server, True)
    cfg = {**case.config(server), **ADVANCED, "idle-timeout": 1}
    deadline = time.time() + 3.5 + case.startup
    results = await run(make_runner(case.plugin, host), host, config=cfg, deadline_at=deadline)
    code, retryable, message = failure(results)
    assert (code, retryable) == ("upstream.timeout", True)
    assert "nothing" not in message, "keep-alives arrived, so it is the run's time limit that ended it"
    assert time.time() > deadline - 3, "the run lasted well past the idle timeout"


# --- a fresh upstream session is announced ------------------------------------------------------------


@pytest.mark.parametrize("notice", [True, False])
async def test_a_fresh_session_is_announced_in_one_line(case, server, host, notice):
    need(case, "forget_sessions")
    case.answer(server, TOKENS, 0.0)
    cfg = {**case.config(server), **ADVANCED, "session-reset-notice": notice}
    runner = make_runner(case.plugin, host)
    first = await run(runner, host, config=cfg)
    assert final_text(first) == "".join(TOKENS)
    case.forget_sessions(server)
    second = await run(runner, host, config=cfg)
    assert rtype(terminal(second)) == "run.completed"
    text = final_text(second)
    answer = "".join(TOKENS)
    if notice:
        line, _, rest = text.partition("\n\n")
        assert rest == answer and line and "\n" not in line and "new" in line.lower(), text
        assert deltas(second)[0].startswith(line), "the notice comes before the answer"
    else:
        assert text == answer
    assert state_updates(second), "the new upstream conversation is kept"
    third = await run(runner, host, config=cfg)
    assert final_text(third) == answer, "the next message continues the new conversation without a notice"


# --- group chats ------------------------------------------------------------------------------------


def _group_identity(actor: str, group: str) -> Identity:
    return Identity(conversation_id=group, actor_id=actor, actor_name=actor, bot_id="bot-1",
                    launcher_type="group", launcher_id="g-100")


async def test_two_speakers_alternating_in_one_group_keep_their_conversations(case, server, host):
    need(case, "seen")
    if not case.group_modes:
        pytest.skip("no identity sources")
    case.answer(server, TOKENS, 0.0)
    runner = make_runner(case.plugin, host)
    for source, expect in case.group_modes.items():
        server.clear_requests()
        cfg = {**case.config(server), "user-id-source": source}
        created = []
        for actor in ("alice", "bob", "alice", "bob"):
            results = await run(runner, host, config=cfg, identity=_group_identity(actor, f"group-{source}"))
            assert rtype(terminal(results)) == "run.completed", (source, results[-1].data)
            assert final_text(results) == "".join(TOKENS), f"{source}: no fresh-session notice, no failure"
            created.append(next(iter(state_updates(results).values()), None))
        seen = case.seen(server)
        assert len(seen) == 4, f"{source}: one request per message, no retries ({len(seen)})"
        if expect == "person":
            assert seen[0].user != seen[1].user
            assert (seen[2].user, seen[3].user) == (seen[0].user, seen[1].user)
            assert seen[2].conversation == created[0] and seen[3].conversation == created[1], source
            assert created[0] != created[1]
        else:
            assert len({s.user for s in seen}) == 1, source
            assert [s.conversation for s in seen[1:]] == [created[0]] * 3, source
        if source == "hashed":
            assert all(s.user.startswith("lb_") and "alice" not in s.user and "bob" not in s.user for s in seen)


# --- isolation between bots in one plugin process ------------------------------------------------------


async def test_two_bots_in_one_process_never_share_credentials_identity_or_cookies(case, server, host):
    need(case, "seen", "second_bot")
    from runners_cli.host import LocalHost

    case.answer(server, TOKENS, 0.02)
    server.extra_response_headers = {"Set-Cookie": "upstream_session=bot-cookie; Path=/"}
    if not case.secrets(server):
        pytest.skip(f"{case.plugin}'s contract config carries no credential to keep apart")
    key_a = case.secrets(server)[0]
    key_b = key_a + "-second-bot"
    cfg_a = case.config(server)
    cfg_b = case.second_bot(server, key_b)
    host_a = host
    host_b = LocalHost(runner_id=host.runner_id)
    runner_a = make_runner(case.plugin, host_a)
    runner_b = make_runner(case.plugin, host_b)

    async def chat(runner, h, cfg, actor, bot):
        out = []
        for _ in range(3):
            ident = Identity(conversation_id=f"conv-{bot}", actor_id=actor, bot_id=bot)
            out.append(await run(runner, h, config=cfg, identity=ident))
        return out

    res_a, res_b = await asyncio.gather(chat(runner_a, host_a, cfg_a, "alice", "bot-a"),
                                        chat(runner_b, host_b, cfg_b, "bob", "bot-b"))
    for results in res_a + res_b:
        assert rtype(terminal(results)) == "run.completed"
    seen = case.seen(server)
    assert len(seen) == 6
    for s in seen:
        assert s.cookie is None, "the shared client keeps no upstream cookies"
        assert (s.credential, "alice" in s.user) in ((key_a, True), (key_b, False)), s
        assert ("bob" in s.user) == (s.credential == key_b), s


# --- reasoning streams as a prefix extension ------------------------------------------------------------


@pytest.mark.parametrize("remove", [False, True])
async def test_reasoning_streams_as_a_prefix_extension(case, server, host, remove):
    need(case, "think")
    case.think(server, ["Let me think about ", "this question ", "carefully."], TOKENS)
    cfg = {**case.config(server), "remove-think": remove}
    results = await run(make_runner(case.plugin, host), host, config=cfg)
    assert rtype(terminal(results)) == "run.completed", results[-1].data
    seen = deltas(results)
    for a, b in zip(seen, seen[1:], strict=False):
        assert b.startswith(a), f"a delta rewrote text already shown:\n{a!r}\n{b!r}"
    text = final_text(results)
    assert text.startswith(seen[-1])
    if remove:
        assert "<think>" not in text and "think about" not in text and text == "".join(TOKENS)
        assert not any("<think>" in d for d in seen)
    else:
        assert text == "<think>\nLet me think about this question carefully.\n</think>\n" + "".join(TOKENS)
        assert text.count("<think>") == 1
