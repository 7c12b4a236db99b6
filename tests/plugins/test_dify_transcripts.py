"""DifyAgent replaying plain-text wire transcripts byte for byte over a loopback socket.

The transcripts (transcripts/dify/*.sse) are reviewable in a diff; the outgoing request shape is
asserted in test_dify.py, because a replay cannot notice a dropped request field.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from runner_kit.http import close_shared_client
from runners_cli.host import LocalHost
from tests.fakes.http_server import FakeHTTPServer
from tests.helpers import deltas, failure, final_text, make_runner, rtype, run, state_updates, terminal

HERE = Path(__file__).parent / "transcripts" / "dify"


class Replay(FakeHTTPServer):
    """Serves one transcript as the /chat-messages SSE body, in small pieces."""

    def __init__(self, body: bytes):
        super().__init__()
        self.body = body
        self.add_route("POST", "/v1/chat-messages", self._chat)

    async def _chat(self, req, resp):
        await resp.start_stream(200, "text/event-stream; charset=utf-8")
        await resp.write_split(self.body)
        await resp.end()


@pytest.fixture(autouse=True)
async def _close():
    yield
    await close_shared_client()


async def replay(name: str, **config):
    with Replay((HERE / name).read_bytes()) as srv:
        host = LocalHost()
        cfg = {"base-url": srv.root_url + "/v1", "api-key": "app-replay", "app-type": "chat", **config}
        return await run(make_runner("dify-agent", host), host, config=cfg), srv


async def test_chat_with_crlf_pings_and_no_trailing_blank_line():
    results, _ = await replay("ok_chat_crlf_no_trailing.sse")
    assert final_text(results) == "Hello 世界"
    assert state_updates(results) == {"dify.conversation_id": "c-1"}
    assert terminal(results).usage.model_dump() == {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}


async def test_agent_thought_upserts_become_one_tool_call():
    results, srv = await replay("ok_agent_thought_upserts.sse", **{"app-type": "agent"})
    started = [r.data for r in results if rtype(r) == "tool.call.started"]
    completed = [r.data for r in results if rtype(r) == "tool.call.completed"]
    assert started == [{"tool_call_id": "th-1", "tool_name": "web_search",
                        "parameters": {"web_search": {"query": "weather"}}}]
    assert completed[0]["result"] == {"web_search": "sunny"}
    msg = [r for r in results if rtype(r) == "message.completed"][0].data["message"]["content"]
    assert msg[0]["text"] == "<think>\nI should search.\n</think>\nIt is sunny."
    assert msg[1]["image_url"]["url"] == srv.root_url + "/files/tools/abc.png?timestamp=1&sign=x"


async def test_new_agent_closing_message_replaces_not_appends():
    results, _ = await replay("ok_new_agent_closing_message.sse", **{"app-type": "agent"})
    assert final_text(results) == "Done now."
    assert all(d in ("Done", "Done now.") for d in deltas(results))


async def test_chatflow_failure_reports_the_workflow_error():
    results, _ = await replay("error_chatflow_failed.sse", **{"app-type": "chatflow"})
    code, retryable, message = failure(results)
    assert code == "upstream.error" and "model overloaded" in message
    assert state_updates(results) == {"dify.conversation_id": "c-4"}, "the conversation is kept for the next turn"


async def test_malformed_line_is_a_protocol_error():
    code, retryable, _ = failure((await replay("malformed_line.sse"))[0])
    assert (code, retryable) == ("upstream.protocol", False)


async def test_stream_ending_without_message_end_is_not_a_success():
    code, retryable, _ = failure((await replay("truncated_stream.sse"))[0])
    assert (code, retryable) == ("upstream.unavailable", True)
