"""The shared payload readers the plugins use."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from runner_kit.errors import RunnerError
from runner_kit.streams import iter_sse
from runner_kit.wire import as_float, cut_off, first_error, json_object, maybe_json, sse_objects, tool_input


def test_json_object_only_for_objects():
    assert json_object(b' {"a": 1} ') == {"a": 1}
    assert json_object('{"a": 1}') == {"a": 1}
    for not_one in (b"[1]", b"<html>", b"{bad", b"", "\xff"):
        assert json_object(not_one) is None


def test_as_float_reads_numbers_and_numeric_strings():
    assert as_float(1700000000) == 1700000000.0 and as_float("12.5") == 12.5
    assert as_float(None) is None and as_float("") is None
    assert as_float("soon") is None and as_float({}) is None


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


async def _chunks(*pieces, fail: BaseException | None = None):
    for piece in pieces:
        yield piece
    if fail is not None:
        raise fail


async def _objects(*pieces, fail=None, complete=False):
    return [d async for d in sse_objects(iter_sse(_chunks(*pieces, fail=fail)), "Plat", complete=lambda: complete)]


async def test_sse_objects_skips_keepalives_and_yields_each_object():
    got = await _objects(b": ping\n\n", b'data: {"a": 1}\n\nevent: ping\ndata:\n\n', b'data: {"b": 2}\n\n')
    assert got == [{"a": 1}, {"b": 2}]


async def test_sse_objects_refuses_data_that_is_not_an_object():
    with pytest.raises(RunnerError) as err:
        await _objects(b'data: [1, 2]\n\n')
    assert err.value.code == "upstream.protocol" and "Plat" in err.value.message


async def test_a_cut_after_the_answer_was_complete_ends_quietly_but_not_before():
    cut = httpx.RemoteProtocolError("peer closed connection without sending complete message body")
    assert await _objects(b'data: {"a": 1}\n\n', fail=cut, complete=True) == [{"a": 1}]
    with pytest.raises(httpx.RemoteProtocolError):
        await _objects(b'data: {"a": 1}\n\n', fail=cut, complete=False)
