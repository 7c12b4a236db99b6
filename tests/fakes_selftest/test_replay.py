"""The shared transcript replay server serves replies in order, framed as the platform would."""

from __future__ import annotations

import httpx

from tests.fakes.replay import ReplayServer, Reply, json_reply


async def test_replies_in_order_then_the_last_repeats_and_streams_are_chunked():
    sse = Reply("data: é\n\n".encode(), headers={"X-Trace": "t1"})
    with ReplayServer({"POST /chat/{id}": [json_reply('{"a":1}', 201), sse]}) as srv:
        async with httpx.AsyncClient() as client:
            first = await client.post(srv.url("/chat/7"))
            second = await client.post(srv.url("/chat/7"))
            third = await client.post(srv.url("/chat/8"))
    assert (first.status_code, first.json()) == (201, {"a": 1})
    assert second.headers["transfer-encoding"] == "chunked" and second.headers["x-trace"] == "t1"
    assert second.text == third.text == "data: é\n\n"
    assert srv.served["POST /chat/{id}"] == 3


async def test_a_dropped_stream_is_a_transport_error_for_the_client():
    with ReplayServer({"GET /s": Reply(b"data: x\n\n", drop=True)}) as srv:
        async with httpx.AsyncClient() as client:
            try:
                await client.get(srv.url("/s"))
            except httpx.HTTPError:
                return
    raise AssertionError("a dropped chunked body must not read as complete")
