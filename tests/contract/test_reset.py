"""A LangBot reset, for every plugin (issue 33 item 15): the next message starts a new upstream
conversation, and where the platform can end or delete one (``PluginCase.ended``), the one the reset
left behind is ended, once, as the user it belongs to; where it cannot, the plugin does not pretend
to (no ``end_conversation``). The reset is the local host's, done the way LangBot 4.11.2 does it
(``LocalHost.reset_conversation``: conversation state deleted, a new reset generation)."""

from __future__ import annotations

import asyncio

import pytest

from runner_kit.runner import Adapter
from runners_cli.host import Identity
from runners_cli.plugins import find, load_runner_class
from tests.helpers import final_text, make_runner, rtype, run, terminal

TOKENS = ["Hello", " from", " the", " contract."]
ALICE = Identity(actor_id="alice", actor_name="Alice")
BOB = Identity(actor_id="bob", actor_name="Bob")


def _ends(plugin: str) -> bool:
    adapter = load_runner_class(find(plugin)).adapter
    return adapter.end_conversation is not Adapter.end_conversation


async def _turn(case, server, host, who=ALICE, source="actor"):
    config = {**case.config(server), "user-id-source": source}
    results = await run(make_runner(case.plugin, host), host, identity=who, config=config)
    assert rtype(terminal(results)) == "run.completed", terminal(results).data
    assert final_text(results).endswith("".join(TOKENS))
    return case.seen(server)[-1]


async def _ended(case, server, n: int) -> list[str]:
    for _ in range(300):
        if len(case.ended(server)) >= n:
            break
        await asyncio.sleep(0.01)
    return case.ended(server)


def test_a_plugin_ends_conversations_exactly_where_its_case_says_the_platform_can(case):
    assert _ends(case.plugin) == (case.ended is not None), (
        f"{case.plugin}: end_conversation {'is' if _ends(case.plugin) else 'is not'} implemented but its "
        "contract case says the platform " + ("cannot" if case.ended is None else "can"))


async def test_a_reset_starts_a_new_upstream_conversation_and_ends_the_old_one(case, server, host):
    if case.seen is None or "actor" not in case.group_modes:
        pytest.skip(f"{case.plugin}: its contract case cannot see which upstream conversation a turn used")
    case.answer(server, TOKENS, 0.0)
    first = await _turn(case, server, host)
    second = await _turn(case, server, host)
    old = second.conversation
    assert old and first.conversation in ("", old), "the second message continued the conversation"
    host.reset_conversation(ALICE)
    third = await _turn(case, server, host)
    assert third.conversation != old, "the reset started a new upstream conversation"
    if case.ended is None:
        return
    assert await _ended(case, server, 1) == [old], "the conversation the reset left is ended, once"
    await _turn(case, server, host)
    await asyncio.sleep(0.05)
    assert case.ended(server) == [old], "nothing more is ended without another reset"


async def test_in_a_group_a_reset_ends_each_members_own_conversation_only_when_they_write(case, server, host):
    if case.seen is None or case.ended is None or case.group_modes.get("actor") != "person":
        pytest.skip(f"{case.plugin}: no per-person conversations to end" if case.ended is not None else
                    f"{case.plugin}: the platform has no API to end a conversation")
    case.answer(server, TOKENS, 0.0)
    await _turn(case, server, host, ALICE)  # a platform that creates conversations names one only
    await _turn(case, server, host, BOB)  # on the next request (Dify, Coze)
    alice = (await _turn(case, server, host, ALICE)).conversation
    bob = (await _turn(case, server, host, BOB)).conversation
    assert alice != bob
    host.reset_conversation(ALICE)
    await _turn(case, server, host, BOB)
    assert await _ended(case, server, 1) == [bob], "Bob's own, when Bob writes"
    await asyncio.sleep(0.05)
    assert case.ended(server) == [bob], "Alice's waits for Alice"
    await _turn(case, server, host, ALICE)
    assert await _ended(case, server, 2) == [bob, alice]
