"""The shared payload readers the plugins use."""

from __future__ import annotations

import asyncio

import httpx

from runner_kit.errors import RunnerError
from runner_kit.wire import cut_off, first_error, json_object, maybe_json, tool_input


def test_json_object_only_for_objects():
    assert json_object(b' {"a": 1} ') == {"a": 1}
    assert json_object('{"a": 1}') == {"a": 1}
    for not_one in (b"[1]", b"<html>", b"{bad", b"", "\xff"):
        assert json_object(not_one) is None


def test_maybe_json_and_tool_input():
    assert maybe_json(' {"q": "x"}') == {"q": "x"}
    assert maybe_json("[1, 2]") == [1, 2]
    assert maybe_json("{not json") == "{not json"
    assert maybe_json(7) == 7
    assert tool_input('{"city": "Paris"}') == {"city": "Paris"}
    assert tool_input("plain words") == {"input": "plain words"}
    assert tool_input(None) == {} and tool_input("") == {}


def test_first_error_unwraps_nested_groups():
    inner = RunnerError("upstream.too_large", "file too large")
    group = BaseExceptionGroup("outer", [BaseExceptionGroup("inner", [inner]), ValueError("later")])
    assert first_error(group) is inner


def test_cut_off_is_transport_trouble_not_an_answer():
    assert cut_off(httpx.ReadError("reset"))
    assert cut_off(RunnerError("upstream.unavailable", "dropped"))
    assert cut_off(RunnerError("upstream.timeout", "stalled"))
    assert not cut_off(RunnerError("upstream.auth", "bad key"))
    assert not cut_off(asyncio.CancelledError())
