"""runner_kit.history: the recent turns of a conversation from LangBot's transcript."""

from __future__ import annotations

from types import SimpleNamespace

from runner_kit.history import recent_messages


def _ctx(items, allowed=True, fail=False):
    async def history_page(**kw):
        if fail:
            raise RuntimeError("host refused")
        return {"items": items, "next_cursor": None, "prev_cursor": None, "has_more": False}

    return SimpleNamespace(context=SimpleNamespace(available_apis=SimpleNamespace(history_page=allowed)),
                           api=SimpleNamespace(history_page=history_page))


def _item(seq, role, content, kind="message"):
    return {"seq": seq, "role": role, "content": content, "item_type": kind}


# LangBot pages newest first, and the message being answered is already recorded
PAGE = [_item(6, "user", "third?"), _item(5, "assistant", "two"), _item(4, "user", "second?"),
        _item(3, "tool", "x", "tool_result"), _item(2, "assistant", "one"), _item(1, "user", "first?")]


async def test_whole_exchanges_oldest_first_without_the_current_message():
    got = await recent_messages(_ctx(PAGE), 5, "third?")
    assert got == [{"role": "user", "content": "first?"}, {"role": "assistant", "content": "one"},
                   {"role": "user", "content": "second?"}, {"role": "assistant", "content": "two"}]


async def test_bounded_by_turns_and_never_starting_with_an_answer():
    assert await recent_messages(_ctx(PAGE), 1, "third?") == [
        {"role": "user", "content": "second?"}, {"role": "assistant", "content": "two"}]
    assert await recent_messages(_ctx(PAGE[:2]), 5, "third?") == [], "the answer's question fell off the page"


async def test_not_offered_or_failing_is_none_not_an_error():
    assert await recent_messages(_ctx(PAGE, allowed=False), 5, "x") is None
    assert await recent_messages(_ctx(PAGE, fail=True), 5, "x") is None
    assert await recent_messages(_ctx(PAGE), 0, "x") is None
