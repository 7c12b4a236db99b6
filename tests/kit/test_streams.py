"""Tests for runner_kit.streams: every case is fed whole, split at every byte offset, and 1 byte at a time."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from runner_kit.errors import RunnerError
from runner_kit.streams import (
    DEFAULT_MAX_BYTES,
    ConcatJSONDecoder,
    NDJSONDecoder,
    SSEDecoder,
    SSEEvent,
    iter_concat_json,
    iter_ndjson,
    iter_sse,
)

# --- helpers ---------------------------------------------------------------------------------


def splittings(data: bytes) -> Iterator[list[bytes]]:
    """The body whole, cut in two at every offset, and one byte at a time."""
    yield [data]
    for i in range(len(data) + 1):
        yield [data[:i], data[i:]]
    yield [data[i : i + 1] for i in range(len(data))]


def decode_all(make: Callable[[], Any], parts: list[bytes]) -> list[Any]:
    dec = make()
    out: list[Any] = []
    for part in parts:
        out.extend(dec.feed(part))
    out.extend(dec.close())
    return out


def check_all(make: Callable[[], Any], data: bytes, expected: list[Any]) -> None:
    for parts in splittings(data):
        assert decode_all(make, parts) == expected, [bytes(p) for p in parts]


def check_raises_all(make: Callable[[], Any], data: bytes, fragment: str, *, in_feed: bool = False) -> None:
    """Every splitting raises upstream.protocol; with in_feed, before close() is reached."""
    for parts in splittings(data):
        dec = make()
        with pytest.raises(RunnerError) as info:
            for part in parts:
                dec.feed(part)
            if in_feed:
                pytest.fail(f"feed() did not raise for {parts!r}")
            dec.close()
        assert info.value.code == "upstream.protocol"
        assert fragment in info.value.message, info.value.message


def ev(data: str = "", event: str = "message", id: str | None = None, retry: int | None = None) -> SSEEvent:
    return SSEEvent(event=event, data=data, id=id, retry=retry)


async def agen(parts: list[bytes]) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


# --- SSE: fields -----------------------------------------------------------------------------

SSE_CASES: list[tuple[str, bytes, list[SSEEvent]]] = [
    ("data_with_space", b"data: hello\n\n", [ev("hello")]),
    ("data_without_space", b"data:hello\n\n", [ev("hello")]),
    ("only_one_space_stripped", b"data:  two spaces\n\n", [ev(" two spaces")]),
    ("tab_not_stripped", b"data:\tx\n\n", [ev("\tx")]),
    ("event_with_space", b"event: message_end\ndata: {}\n\n", [ev("{}", "message_end")]),
    ("event_without_space", b"event:message\ndata:{}\n\n", [ev("{}")]),
    ("multiline_data_joined", b"data: a\ndata:b\ndata:  c\n\n", [ev("a\nb\n c")]),
    ("empty_data_line", b"data:\n\n", [ev("")]),
    ("empty_data_lines_joined", b"data\ndata\n\n", [ev("\n")]),
    ("field_without_colon_is_empty_data", b"data\n\n", [ev("")]),
    ("value_may_contain_colons", b"data: a: b:c\n\n", [ev("a: b:c")]),
    ("id_and_retry", b"id: 7\nretry: 1500\ndata: x\n\n", [ev("x", id="7", retry=1500)]),
    ("id_without_space", b"id:abc\ndata:x\n\n", [ev("x", id="abc")]),
    ("empty_id", b"id\ndata: x\n\n", [ev("x", id="")]),
    ("id_with_nul_ignored", b"id: a\x00b\ndata: x\n\n", [ev("x")]),
    ("bad_retry_ignored", b"retry: 12a\ndata: x\n\nretry: -1\ndata: y\n\n", [ev("x"), ev("y")]),
    ("unknown_field_ignored", b"foo: bar\ndata: x\n\n", [ev("x")]),
    ("field_names_case_sensitive", b"Data: x\nEVENT: y\ndata: z\n\n", [ev("z")]),
    ("two_events", b"data: 1\n\ndata: 2\n\n", [ev("1"), ev("2")]),
    ("event_state_resets", b"event: a\nid: 1\ndata: x\n\ndata: y\n\n", [ev("x", "a", "1"), ev("y")]),
    ("extra_blank_lines", b"\n\n\ndata: x\n\n\n\n", [ev("x")]),
    ("bom_stripped", b"\xef\xbb\xbfdata: x\n\n", [ev("x")]),
    (
        "json_payload_kept_verbatim",
        b'data: {"a": "b\\n", "c": [1, 2]}\n\n',
        [ev('{"a": "b\\n", "c": [1, 2]}')],
    ),
]


@pytest.mark.parametrize("body,expected", [c[1:] for c in SSE_CASES], ids=[c[0] for c in SSE_CASES])
def test_sse_fields(body: bytes, expected: list[SSEEvent]) -> None:
    check_all(SSEDecoder, body, expected)


# --- SSE: line endings -----------------------------------------------------------------------

LINE_ENDING_CASES: list[tuple[str, bytes, list[SSEEvent]]] = [
    ("lf", b"event: a\ndata: 1\n\ndata: 2\n\n", [ev("1", "a"), ev("2")]),
    ("crlf", b"event: a\r\ndata: 1\r\n\r\ndata: 2\r\n\r\n", [ev("1", "a"), ev("2")]),
    ("cr", b"event: a\rdata: 1\r\rdata: 2\r\r", [ev("1", "a"), ev("2")]),
    ("mixed", b"data: 1\r\ndata: 2\rdata: 3\n\r\ndata: 4\r\r\n", [ev("1\n2\n3"), ev("4")]),
    # "\r\n" is ONE line ending even when the chunk boundary falls between the two bytes
    ("crlf_is_one_ending", b"data: a\r\ndata: b\r\n\r\n", [ev("a\nb")]),
    ("cr_then_crlf", b"data: a\r\r\ndata: b\r\n\r\n", [ev("a"), ev("b")]),
    ("lf_cr_is_two_endings", b"data: a\n\rdata: b\n\n", [ev("a"), ev("b")]),
    ("cr_cr_lf_lf", b"data: a\r\r\n\ndata: b\n\n", [ev("a"), ev("b")]),
]


@pytest.mark.parametrize(
    "body,expected", [c[1:] for c in LINE_ENDING_CASES], ids=[c[0] for c in LINE_ENDING_CASES]
)
def test_sse_line_endings(body: bytes, expected: list[SSEEvent]) -> None:
    check_all(SSEDecoder, body, expected)


def test_sse_crlf_split_across_chunks_explicitly() -> None:
    dec = SSEDecoder()
    assert dec.feed(b"data: a\r") == []
    # the "\n" completes the "\r\n" of the line above; it is not a blank line
    assert dec.feed(b"\ndata: b\r") == []
    assert dec.feed(b"\n\r") == [ev("a\nb")]
    assert dec.feed(b"\n") == []
    assert dec.feed(b"data: c\r\n\r\n") == [ev("c")]
    assert dec.close() == []


def test_sse_lone_cr_at_chunk_end_then_other_text() -> None:
    dec = SSEDecoder()
    assert dec.feed(b"data: a\r") == []
    assert dec.feed(b"\r") == [ev("a")]
    assert dec.feed(b"data: b\r") == []
    assert dec.feed(b"") == []  # an empty chunk does not lose the pending "\r"
    assert dec.feed(b"\ndata: c\n\n") == [ev("b\nc")]


# --- SSE: comments and dispatch rules --------------------------------------------------------

DISPATCH_CASES: list[tuple[str, bytes, list[SSEEvent]]] = [
    ("heartbeat_comment", b": heartbeat\n\ndata: x\n\n: heartbeat\n\n", [ev("x")]),
    (
        "dashscope_status_comment",
        b":HTTP_STATUS/200\nid:1\nevent:result\ndata:{}\n\n",
        [ev("{}", "result", "1")],
    ),
    ("comment_inside_event", b"data: a\n: note\ndata: b\n\n", [ev("a\nb")]),
    ("comment_like_data_kept", b"data: : not a comment\n\n", [ev(": not a comment")]),
    ("bare_colon_comment", b":\ndata: x\n\n", [ev("x")]),
    ("bare_event_ping_dispatched", b"event: ping\n\n", [ev("", "ping")]),
    (
        "dify_ping_between_events",
        b'data: {"a":1}\n\nevent: ping\n\ndata: {"a":2}\n\n',
        [ev('{"a":1}'), ev("", "ping"), ev('{"a":2}')],
    ),
    ("id_only_not_dispatched", b"id: 5\n\n", []),
    ("retry_only_not_dispatched", b"retry: 100\n\n", []),
    ("empty_event_name_not_dispatched", b"event:\n\n", []),
    ("empty_event_name_means_message", b"event:\ndata: x\n\n", [ev("x")]),
    ("comment_only_not_dispatched", b": a\n: b\n\n", []),
    ("unknown_field_only_not_dispatched", b"foo: bar\n\n", []),
    ("blank_lines_only", b"\n\n\r\n\r\r", []),
    ("empty_body", b"", []),
]


@pytest.mark.parametrize("body,expected", [c[1:] for c in DISPATCH_CASES], ids=[c[0] for c in DISPATCH_CASES])
def test_sse_comments_and_dispatch(body: bytes, expected: list[SSEEvent]) -> None:
    check_all(SSEDecoder, body, expected)


# --- SSE: end of body ------------------------------------------------------------------------

EOF_CASES: list[tuple[str, bytes, list[SSEEvent]]] = [
    ("coze_done_without_newline", b'event:done\ndata:"[DONE]"', [ev('"[DONE]"', "done")]),
    ("one_newline_only", b"data: 1\n\ndata: 2\n", [ev("1"), ev("2")]),
    ("crlf_without_blank_line", b"data: 1\r\n", [ev("1")]),
    ("cr_without_blank_line", b"data: 1\r", [ev("1")]),
    ("bare_event_at_eof", b"data: 1\n\nevent: ping", [ev("1"), ev("", "ping")]),
    ("comment_at_eof", b"data: 1\n\n: bye", [ev("1")]),
    ("id_at_eof_not_dispatched", b"data: 1\n\nid: 9", [ev("1")]),
]


@pytest.mark.parametrize("body,expected", [c[1:] for c in EOF_CASES], ids=[c[0] for c in EOF_CASES])
def test_sse_close_flushes_pending_event(body: bytes, expected: list[SSEEvent]) -> None:
    check_all(SSEDecoder, body, expected)


def test_sse_close_resets_decoder() -> None:
    dec = SSEDecoder()
    assert dec.feed(b"event: a\ndata: 1") == []
    assert dec.close() == [ev("1", "a")]
    assert dec.close() == []
    assert dec.feed(b"data: 2\n\n") == [ev("2")]


def test_sse_last_event_id_and_retry_are_sticky_on_decoder() -> None:
    dec = SSEDecoder()
    assert dec.last_event_id is None and dec.retry_ms is None
    out = dec.feed(b"id: 1\nretry: 3000\ndata: a\n\nid: 2\n\ndata: b\n\n")
    assert out == [ev("a", id="1", retry=3000), ev("b")]
    assert dec.last_event_id == "2"
    assert dec.retry_ms == 3000


# --- SSE: realistic platform bodies ----------------------------------------------------------

DIFY_BODY = (
    'data: {"event": "message", "answer": "Hel", "conversation_id": "c1"}\n\n'
    "event: ping\n\n"
    'data: {"event": "message", "answer": "lo 世界 👋", "conversation_id": "c1"}\n\n'
    'data: {"event": "message_end", "metadata": {}}\n\n'
).encode()

LANGGRAPH_BODY = (
    b'event: metadata\r\ndata: {"run_id": "r1"}\r\nid: 0\r\n\r\n'
    b": heartbeat\r\n\r\n"
    b'event: values\r\ndata: {"messages": []}\r\nid: 1\r\n\r\n'
    b"event: end\r\ndata: null\r\n\r\n"
)


def test_sse_dify_body() -> None:
    expected = [
        ev('{"event": "message", "answer": "Hel", "conversation_id": "c1"}'),
        ev("", "ping"),
        ev('{"event": "message", "answer": "lo 世界 👋", "conversation_id": "c1"}'),
        ev('{"event": "message_end", "metadata": {}}'),
    ]
    check_all(SSEDecoder, DIFY_BODY, expected)
    assert [e.json().get("answer") for e in expected if e.data] == ["Hel", "lo 世界 👋", None]


def test_sse_langgraph_crlf_body() -> None:
    check_all(
        SSEDecoder,
        LANGGRAPH_BODY,
        [
            ev('{"run_id": "r1"}', "metadata", "0"),
            ev('{"messages": []}', "values", "1"),
            ev("null", "end"),
        ],
    )


# --- SSE: UTF-8 ------------------------------------------------------------------------------


def test_sse_multibyte_characters_split_everywhere() -> None:
    body = "event: 消息\ndata: héllo 世界 👋🏽\ndata: ü\n\n".encode()
    check_all(SSEDecoder, body, [ev("héllo 世界 👋🏽\nü", "消息")])


@pytest.mark.parametrize(
    "body",
    [b"data: \xff\n\n", b"data: ab\xc3(\n\n", b"event: \xe4\xb8\n\n", b"data: \xed\xa0\x80\n\n"],
    ids=["invalid_start_byte", "bad_continuation", "truncated_in_line", "encoded_surrogate"],
)
def test_sse_invalid_utf8_raises(body: bytes) -> None:
    check_raises_all(SSEDecoder, body, "not valid UTF-8", in_feed=True)


def test_sse_truncated_utf8_at_eof_raises() -> None:
    check_raises_all(SSEDecoder, b"data: \xe4\xb8", "not valid UTF-8")


def test_sse_partial_bom_at_eof_raises() -> None:
    check_raises_all(SSEDecoder, b"\xef\xbb", "not valid UTF-8")


def test_sse_bom_only_once() -> None:
    # a BOM later in the stream is content, not stripped
    check_all(SSEDecoder, b"\xef\xbb\xbfdata: \xef\xbb\xbfx\n\n", [ev("\ufeffx")])


# --- SSE: size limit -------------------------------------------------------------------------


def test_sse_event_at_limit_passes_and_over_limit_raises() -> None:
    limit = 64
    line = b"data: " + b"x" * (limit - 6)  # exactly `limit` bytes of event lines
    check_all(lambda: SSEDecoder(limit), line + b"\n\n", [ev("x" * (limit - 6))])
    check_raises_all(
        lambda: SSEDecoder(limit), line + b"x\n\n", f"upstream event exceeds {limit} bytes", in_feed=True
    )


def test_sse_limit_counts_all_lines_of_one_event() -> None:
    limit = 50
    body = b"event: e\n" + b"data: 0123456789\n" * 4 + b"\n"  # 8 + 4 * 16 = 72 bytes
    check_raises_all(lambda: SSEDecoder(limit), body, "exceeds 50 bytes", in_feed=True)
    # the same lines spread over several events are fine
    body = b"data: 0123456789\n\n" * 10
    check_all(lambda: SSEDecoder(limit), body, [ev("0123456789")] * 10)


def test_sse_limit_counts_utf8_bytes_not_characters() -> None:
    value = "世" * 10  # 30 bytes
    check_all(lambda: SSEDecoder(36), f"data: {value}\n\n".encode(), [ev(value)])
    check_raises_all(lambda: SSEDecoder(35), f"data: {value}\n\n".encode(), "exceeds 35 bytes", in_feed=True)


def test_sse_unterminated_line_raises_before_buffering_past_limit() -> None:
    limit = 1000
    dec = SSEDecoder(limit)
    fed = 0
    with pytest.raises(RunnerError, match="exceeds 1000 bytes"):
        dec.feed(b"data: ")
        for _ in range(10_000):
            dec.feed(b"x" * 100)
            fed += 100
    assert fed <= limit  # raised by the chunk that crossed the limit


def test_sse_comment_lines_do_not_count_toward_event_size() -> None:
    body = b": keepalive\n" * 20 + b"data: x\n\n"
    check_all(lambda: SSEDecoder(32), body, [ev("x")])


# --- SSE: json() -----------------------------------------------------------------------------


def test_sse_event_json() -> None:
    assert ev('{"a": [1, "b"]}').json() == {"a": [1, "b"]}
    assert ev("null").json() is None


def test_sse_event_json_invalid_raises_with_short_message() -> None:
    payload = "{not json " + "z" * 5000
    with pytest.raises(RunnerError) as info:
        ev(payload, "message").json()
    assert info.value.code == "upstream.protocol"
    assert "invalid JSON" in info.value.message
    assert "z" * 201 not in info.value.message
    assert len(info.value.message) < 400


def test_sse_event_json_empty_data_raises() -> None:
    with pytest.raises(RunnerError) as info:
        ev("", "ping").json()
    assert info.value.code == "upstream.protocol"


# --- SSE: async iterator and volume ----------------------------------------------------------


async def test_iter_sse_flushes_last_event() -> None:
    body = b"data: 1\n\nevent: done\ndata: 2"
    out = [e async for e in iter_sse(agen([body[:5], body[5:13], body[13:]]))]
    assert out == [ev("1"), ev("2", "done")]


async def test_iter_sse_passes_limit() -> None:
    with pytest.raises(RunnerError, match="exceeds 10 bytes"):
        async for _ in iter_sse(agen([b"data: 0123456789\n\n"]), max_event_bytes=10):
            pass


def test_sse_ten_thousand_events() -> None:
    body = b"".join(b'data: {"n": %d, "text": "tok"}\n\n' % i for i in range(10_000))
    dec = SSEDecoder()
    out: list[SSEEvent] = []
    for i in range(0, len(body), 4096):
        out.extend(dec.feed(body[i : i + 4096]))
    out.extend(dec.close())
    assert len(out) == 10_000
    assert [e.json()["n"] for e in out] == list(range(10_000))


def test_sse_accepts_bytearray_and_memoryview() -> None:
    dec = SSEDecoder()
    assert dec.feed(bytearray(b"data: a\n")) == []
    assert dec.feed(memoryview(b"\n")) == [ev("a")]


def test_decoders_reject_non_positive_limits() -> None:
    for cls in (SSEDecoder, NDJSONDecoder, ConcatJSONDecoder):
        with pytest.raises(ValueError):
            cls(0)


def test_default_limit() -> None:
    assert DEFAULT_MAX_BYTES == 8 * 1024 * 1024


# --- NDJSON ----------------------------------------------------------------------------------

N8N_BODY = (
    '{"type":"begin","metadata":{"nodeId":"n1","nodeName":"AI Agent","itemIndex":0,"runIndex":0,"timestamp":1}}\n'
    '{"type":"item","content":"Hel","metadata":{"nodeId":"n1"}}\n'
    '{"type":"item","content":"lo 世界","metadata":{"nodeId":"n1"}}\n'
    '{"type":"item","content":{"text_chunk":"!","metadata":{}},"metadata":{"nodeId":"n1"}}\n'
    '{"type":"end","metadata":{"nodeId":"n1"}}\n'
).encode()

NDJSON_CASES: list[tuple[str, bytes, list[Any]]] = [
    ("lf", b'{"a":1}\n{"b":2}\n', [{"a": 1}, {"b": 2}]),
    ("crlf", b'{"a":1}\r\n{"b":2}\r\n', [{"a": 1}, {"b": 2}]),
    ("blank_lines_skipped", b'\n{"a":1}\n\n\r\n  \t\n{"b":2}\n\n', [{"a": 1}, {"b": 2}]),
    ("no_final_newline", b'{"a":1}\n{"b":2}', [{"a": 1}, {"b": 2}]),
    ("no_final_newline_crlf", b'{"a":1}\r\n{"b":2}\r', [{"a": 1}, {"b": 2}]),
    ("any_json_value", b'1\n"s"\n[1,2]\nnull\ntrue\n', [1, "s", [1, 2], None, True]),
    ("surrounding_whitespace", b'  {"a": 1}  \n', [{"a": 1}]),
    ("escaped_newline_in_string", b'{"a":"x\\ny"}\n', [{"a": "x\ny"}]),
    ("multibyte", '{"t":"héllo 世界 👋"}\n'.encode(), [{"t": "héllo 世界 👋"}]),
    ("empty", b"", []),
    ("only_blank", b"\n\r\n \n", []),
]


@pytest.mark.parametrize("body,expected", [c[1:] for c in NDJSON_CASES], ids=[c[0] for c in NDJSON_CASES])
def test_ndjson(body: bytes, expected: list[Any]) -> None:
    check_all(NDJSONDecoder, body, expected)


def test_ndjson_n8n_body() -> None:
    out = decode_all(NDJSONDecoder, [N8N_BODY])
    assert [o["type"] for o in out] == ["begin", "item", "item", "item", "end"]
    check_all(NDJSONDecoder, N8N_BODY, out)


def test_ndjson_line_waits_for_newline() -> None:
    dec = NDJSONDecoder()
    assert dec.feed(b'{"a":') == []
    assert dec.feed(b"1}") == []
    assert dec.feed(b"\n{") == [{"a": 1}]
    assert dec.feed(b"}\n") == [{}]
    assert dec.close() == []


@pytest.mark.parametrize(
    "body,in_feed",
    [
        (b"not json\n", True),
        (b'{"a":1}\n{"a":\n{"b":2}\n', True),
        (b'{"a":1}\n{"a":', False),
        (b"{}}\n", True),
    ],
    ids=["garbage", "truncated_line", "truncated_at_eof", "trailing_data"],
)
def test_ndjson_invalid_json_raises(body: bytes, in_feed: bool) -> None:
    check_raises_all(NDJSONDecoder, body, "invalid JSON", in_feed=in_feed)


def test_ndjson_invalid_json_message_is_short() -> None:
    dec = NDJSONDecoder()
    with pytest.raises(RunnerError) as info:
        dec.feed(b"{" + b"q" * 10_000 + b"\n")
    assert info.value.code == "upstream.protocol"
    assert "q" * 201 not in info.value.message


def test_ndjson_invalid_utf8_raises() -> None:
    check_raises_all(NDJSONDecoder, b'{"a":"\xff"}\n', "not valid UTF-8", in_feed=True)
    check_raises_all(NDJSONDecoder, b'{"a":"\xe4\xb8"}', "not valid UTF-8")


def test_ndjson_size_limit() -> None:
    line = b'{"a":"' + b"x" * 10 + b'"}'  # 18 bytes
    check_all(lambda: NDJSONDecoder(18), line + b"\n" + line + b"\n", [{"a": "x" * 10}] * 2)
    check_raises_all(lambda: NDJSONDecoder(17), line + b"\n", "upstream event exceeds 17 bytes", in_feed=True)


def test_ndjson_unterminated_line_raises_before_buffering_past_limit() -> None:
    dec = NDJSONDecoder(1000)
    fed = 0
    with pytest.raises(RunnerError, match="exceeds 1000 bytes"):
        for _ in range(10_000):
            dec.feed(b"x" * 100)
            fed += 100
    assert fed <= 1000


async def test_iter_ndjson() -> None:
    out = [v async for v in iter_ndjson(agen([N8N_BODY[:7], N8N_BODY[7:100], N8N_BODY[100:], b'{"x":1}']))]
    assert len(out) == 6 and out[-1] == {"x": 1}


def test_ndjson_ten_thousand_lines() -> None:
    body = b"".join(b'{"type":"item","content":"t%d"}\n' % i for i in range(10_000))
    dec = NDJSONDecoder()
    out: list[Any] = []
    for i in range(0, len(body), 1000):
        out.extend(dec.feed(body[i : i + 1000]))
    out.extend(dec.close())
    assert len(out) == 10_000 and out[-1]["content"] == "t9999"


# --- concatenated JSON (Langflow) ------------------------------------------------------------

LANGFLOW_EVENTS = [
    {"event": "add_message", "data": {"text": "hi", "sender": "User", "properties": {"state": "complete"}}},
    {"event": "token", "data": {"chunk": "Hel", "id": "m1"}},
    {"event": "token", "data": {"chunk": 'lo {world} [1] "q" \\ 世界', "id": "m1"}},
    {"event": "end", "data": {"result": {"session_id": "s", "outputs": []}}},
]
LANGFLOW_BODY = "".join(json.dumps(e, ensure_ascii=False) + "\n\n" for e in LANGFLOW_EVENTS).encode()

CONCAT_CASES: list[tuple[str, bytes, list[Any]]] = [
    ("blank_line_separated", b'{"a":1}\n\n{"b":2}\n\n', [{"a": 1}, {"b": 2}]),
    ("back_to_back", b'{"a":1}{"b":2}[3]', [{"a": 1}, {"b": 2}, [3]]),
    ("any_whitespace", b' \r\n\t{"a":1} \t\r\n\r\n  {"b":2}  ', [{"a": 1}, {"b": 2}]),
    ("crlf_blank_lines", b'{"a":1}\r\n\r\n{"b":2}\r\n\r\n', [{"a": 1}, {"b": 2}]),
    ("pretty_printed", b'{\n  "a": [\n    1,\n    {"b": {}}\n  ]\n}\n{\n}\n', [{"a": [1, {"b": {}}]}, {}]),
    ("braces_in_strings", b'{"s":"}{]["}{"t":"{"}', [{"s": "}{]["}, {"t": "{"}]),
    ("escaped_quotes", b'{"s":"a\\"}\\"{"}\n{"t":"\\""}', [{"s": 'a"}"{'}, {"t": '"'}]),
    ("escaped_backslash_before_quote", b'{"s":"x\\\\"}{"t":"\\\\\\""}', [{"s": "x\\"}, {"t": '\\"'}]),
    ("unicode_escapes", b'{"s":"\\u4e16\\ud83d\\udc4b"}', [{"s": "世👋"}]),
    ("top_level_arrays", b'[1,[2,{"a":[]}]]\n[]', [[1, [2, {"a": []}]], []]),
    ("nested_empty", b'{"a":{"b":{"c":{}}}}', [{"a": {"b": {"c": {}}}}]),
    ("multibyte", '{"t":"héllo 世界 👋"}\n\n'.encode(), [{"t": "héllo 世界 👋"}]),
    ("empty", b"", []),
    ("whitespace_only", b"\n\n \r\n", []),
]


@pytest.mark.parametrize("body,expected", [c[1:] for c in CONCAT_CASES], ids=[c[0] for c in CONCAT_CASES])
def test_concat_json(body: bytes, expected: list[Any]) -> None:
    check_all(ConcatJSONDecoder, body, expected)


def test_concat_json_langflow_body() -> None:
    check_all(ConcatJSONDecoder, LANGFLOW_BODY, LANGFLOW_EVENTS)


def test_concat_json_partial_object_waits() -> None:
    dec = ConcatJSONDecoder()
    assert dec.feed(b'{"event": "token", "data": {"chunk": "a}') == []
    assert dec.feed(b'"}') == []
    assert dec.feed(b"}\n\n{") == [{"event": "token", "data": {"chunk": "a}"}}]
    assert dec.feed(b'"x": tr') == []
    assert dec.feed(b"ue}") == [{"x": True}]
    assert dec.close() == []


@pytest.mark.parametrize(
    "body",
    [b"not json\n\n", b'{"a":1}\n\nnot json\n', b"1\n", b'"s"\n', b"}\n", b'{"a":1}}'],
    ids=[
        "garbage_line",
        "garbage_after_object",
        "top_level_number",
        "top_level_string",
        "stray_close",
        "extra_brace",
    ],
)
def test_concat_json_garbage_raises_during_feed(body: bytes) -> None:
    check_raises_all(ConcatJSONDecoder, body, "invalid JSON", in_feed=True)


@pytest.mark.parametrize(
    "body",
    [b'{"a": nope}\n\n', b'{"a" 1}\n', b"{'a': 1}\n", b'{"a": [1}\n]', b'{"a":1,}', b'{"a":"x\ny"}'],
    ids=[
        "bad_literal",
        "missing_colon",
        "single_quotes",
        "mismatched_brackets",
        "trailing_comma",
        "raw_newline_in_string",
    ],
)
def test_concat_json_complete_but_invalid_raises_during_feed(body: bytes) -> None:
    check_raises_all(ConcatJSONDecoder, body, "invalid JSON", in_feed=True)


@pytest.mark.parametrize(
    "body",
    [b'{"a":1}\n\n{"b":', b'{"a": "unterminated', b"[1, 2", b'{"s":"x\\', b"{"],
    ids=["truncated_object", "truncated_string", "truncated_array", "truncated_escape", "lone_brace"],
)
def test_concat_json_truncated_at_close_raises(body: bytes) -> None:
    check_raises_all(ConcatJSONDecoder, body, "truncated")


def test_concat_json_invalid_json_message_is_short() -> None:
    dec = ConcatJSONDecoder()
    with pytest.raises(RunnerError) as info:
        dec.feed(b'{"a": ' + b"q" * 10_000 + b"}")
    assert "q" * 201 not in info.value.message
    with pytest.raises(RunnerError) as info:
        ConcatJSONDecoder().feed(b"w" * 10_000)
    assert "w" * 201 not in info.value.message


def test_concat_json_invalid_utf8_raises() -> None:
    check_raises_all(ConcatJSONDecoder, b'{"a":"\xff"}', "not valid UTF-8", in_feed=True)
    check_raises_all(ConcatJSONDecoder, b'{"a":"\xe4\xb8', "not valid UTF-8")


def test_concat_json_size_limit() -> None:
    obj = b'{"a":"' + b"x" * 10 + b'"}'  # 18 bytes
    check_all(lambda: ConcatJSONDecoder(18), obj + b"\n\n" + obj, [{"a": "x" * 10}] * 2)
    check_raises_all(
        lambda: ConcatJSONDecoder(17), obj + b"\n\n", "upstream event exceeds 17 bytes", in_feed=True
    )


def test_concat_json_size_limit_counts_utf8_bytes() -> None:
    obj = '{"a":"世界世界"}'.encode()  # 8 + 12 = 20 bytes, 12 characters
    check_all(lambda: ConcatJSONDecoder(20), obj, [{"a": "世界世界"}])
    check_raises_all(lambda: ConcatJSONDecoder(19), obj, "exceeds 19 bytes", in_feed=True)


def test_concat_json_unterminated_object_raises_before_buffering_past_limit() -> None:
    dec = ConcatJSONDecoder(1000)
    fed = 0
    with pytest.raises(RunnerError, match="exceeds 1000 bytes"):
        dec.feed(b'{"a": "')
        for _ in range(10_000):
            dec.feed(b"x" * 100)
            fed += 100
    assert fed <= 1000


def test_concat_json_close_resets() -> None:
    dec = ConcatJSONDecoder()
    assert dec.feed(b'{"a":1}\n') == [{"a": 1}]
    assert dec.close() == []
    assert dec.feed(b'{"b":2}') == [{"b": 2}]


async def test_iter_concat_json() -> None:
    parts = [LANGFLOW_BODY[i : i + 7] for i in range(0, len(LANGFLOW_BODY), 7)]
    assert [v async for v in iter_concat_json(agen(parts))] == LANGFLOW_EVENTS


async def test_iter_concat_json_truncated_raises() -> None:
    with pytest.raises(RunnerError, match="truncated"):
        async for _ in iter_concat_json(agen([b'{"a":1}', b'{"b":'])):
            pass


def test_concat_json_ten_thousand_objects() -> None:
    body = b"".join(b'{"event": "token", "data": {"chunk": "t%d", "id": "m"}}\n\n' % i for i in range(10_000))
    dec = ConcatJSONDecoder()
    out: list[Any] = []
    for i in range(0, len(body), 4096):
        out.extend(dec.feed(body[i : i + 4096]))
    out.extend(dec.close())
    assert len(out) == 10_000 and out[-1]["data"]["chunk"] == "t9999"
