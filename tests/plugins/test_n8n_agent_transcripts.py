"""N8nAgent replaying wire transcripts byte for byte over a loopback socket.

- ``transcripts/n8n/real/``: what the real n8n 2.40.7 sent (copied unchanged from the shared
  fixtures real-peers/n8n/, README there); each response is replayed with its status, content type
  and, for streams, the HTTP chunk sizes n8n flushed (``*.chunks.json``).
- ``transcripts/n8n/*.ndjson``: hand-written streams for quirks the captures do not show (object
  content, several nodes, keep-alives, a broken line, a stream cut off), written in tiny pieces cut
  inside UTF-8 characters.

The outgoing request shape is asserted in test_n8n_agent.py: a replay cannot notice a dropped field.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from runners_cli.host import LocalHost
from tests.fakes.http_server import FakeHTTPServer
from tests.helpers import deltas, failure, final_text, make_runner, rtype, run, terminal

HERE = Path(__file__).parent / "transcripts" / "n8n"
REAL = HERE / "real"
NDJSON = "application/json; charset=utf-8"
_SEP = re.compile(rb"\r?\n\r?\n")
_LENGTH = re.compile(rb"(?im)^content-length:\s*(\d+)")


@dataclass
class Reply:
    body: bytes
    status: int = 200
    content_type: str = NDJSON
    chunks: list[int] | None = None  # stream: write these chunk sizes; None with stream=True: tiny pieces
    stream: bool = False
    drop: bool = False  # close the connection instead of ending the chunked body
    gaps: list[float] | None = None  # seconds before each chunk, as n8n flushed them (real streams)


def real(name: str) -> Reply:
    """One captured exchange: ``request``, blank line, response head, blank line, de-chunked body."""
    raw = (REAL / f"{name}.http").read_bytes()
    m = _SEP.search(raw)
    assert m is not None
    head, rest = raw[: m.start()], raw[m.end():]
    length = _LENGTH.search(head)
    rest = rest[int(length.group(1)) if length else 0:]
    if (sep := _SEP.match(rest)) is not None:
        rest = rest[sep.end():]
    m = _SEP.search(rest)
    assert m is not None
    response_head, body = rest[: m.start()], rest[m.end():]
    lines = response_head.decode("latin-1").splitlines()
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    chunked = headers.get("transfer-encoding", "").lower() == "chunked"
    sizes = gaps = None
    if chunked and (REAL / f"{name}.chunks.json").is_file():
        timing = json.loads((REAL / f"{name}.chunks.json").read_text())
        sizes = timing["http_chunk_sizes"]
        assert sum(sizes) == len(body), name
        # recv_log: [ms, bytes] for the head, then one entry per chunk, then the closing chunk
        stamps = [t for t, _ in timing["recv_log_ms_bytes"]]
        gaps = [max(b - a, 0.0) / 1000 for a, b in zip(stamps, stamps[1:], strict=False)][: len(sizes)]
    return Reply(body, status, headers.get("content-type", ""), sizes, stream=chunked, gaps=gaps)


def canned(name: str, **kw) -> Reply:
    return Reply((HERE / name).read_bytes(), stream=True, **kw)


class Replay(FakeHTTPServer):
    """Serves canned replies to POST /webhook/chat in order; the last one is repeated."""

    def __init__(self, *replies: Reply):
        super().__init__()
        self.replies = list(replies)
        self.served = 0
        self.add_route("POST", "/webhook/chat", self._hook)

    async def _hook(self, req, resp):
        reply = self.replies[min(self.served, len(self.replies) - 1)]
        self.served += 1
        if not reply.stream:
            await resp.send(reply.status, reply.body, reply.content_type or None)
            return
        await resp.start_stream(reply.status, reply.content_type)
        if reply.chunks is None:
            await resp.write_split(reply.body)
        else:
            pos = 0
            for n, size in enumerate(reply.chunks):
                if reply.gaps:
                    await asyncio.sleep(reply.gaps[n])
                await resp.write(reply.body[pos: pos + size])
                pos += size
        if reply.drop:
            await resp.abort()
        else:
            await resp.end()


async def replay(reply: Reply, text: str = "hi", **extra):
    with Replay(reply) as srv:
        host = LocalHost(runner_id="plugin:langbot-team/N8nAgent/default")
        cfg = {"webhook-url": srv.root_url + "/webhook/chat", **extra}
        return await run(make_runner("n8n-agent", host), host, text, config=cfg)


# -- the real n8n ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "answer"),
    [
        ("01-respond-node-json", "echo: hi"),  # {"reply": …}: output-key "response" is absent, reply is tried
        ("02-streaming-respond-node-json", "echo: hi"),  # item.content is the JSON body as a string
        ("03-streaming-respond-node-text", "echo: héllo 世界"),
        ("04-last-node", "echo: hi"),
        ("22-agent-stream", "Hello from the fake model."),
        ("23-agent-stream-same-session-2nd", "Hello from the fake model."),
        ("25-agent-last-node", "Hello from the fake model."),
    ],
)
async def test_real_answers(name, answer):
    results = await replay(real(name))
    assert rtype(terminal(results)) == "run.completed", terminal(results).data
    assert final_text(results) == answer
    assert terminal(results).usage is None, "n8n reports no usage; none is invented"


async def test_real_agent_stream_arrives_as_deltas():
    """Replayed at n8n's own pace (one token every ~20 ms): the chat sees the answer grow."""
    results = await replay(real("22-agent-stream"), **{"advanced-settings": True, "stream-max-delay": 0.04})
    shown = deltas(results)
    assert len(shown) >= 3 and all(b.startswith(a) for a, b in zip(shown, shown[1:], strict=False)), shown
    assert final_text(results) == "Hello from the fake model."


@pytest.mark.parametrize(
    ("name", "code", "words"),
    [
        ("06-streaming-stop-and-error", "upstream.error", "node 'Stop and Error'"),
        ("07-last-node-stop-and-error", "upstream.error", "workflow failed"),
        ("20-agent-stream-model-error-404", "upstream.error", "AI Agent': not found"),
        ("21-agent-last-node-model-error-404", "upstream.error", "Executions list"),
        ("24-agent-stream-model-error", "upstream.error", "fake upstream failure"),
        ("26-agent-last-node-model-error", "upstream.error", "workflow failed"),
        ("08-unknown-webhook", "upstream.not_found", "is not registered"),
        ("09-wrong-method", "upstream.not_found", "HTTP Method to POST"),
        ("10-respond-node-invalid-json-body", "upstream.bad_request", "Failed to parse request body"),
        ("05-on-received", "config.invalid", "Workflow was started"),
    ],
)
async def test_real_failures(name, code, words):
    got, retryable, message = failure(await replay(real(name)))
    assert got == code, message
    assert words in message
    assert "stacktrace" not in message and "/srv/" not in message and "live-webhooks" not in message
    if code == "upstream.error":
        assert not retryable


async def test_real_unknown_webhook_hint_names_the_production_url():
    _, _, message = failure(await replay(real("08-unknown-webhook")))
    assert "webhook-url" in message and "/webhook/" in message


async def test_real_on_received_is_fine_when_replies_are_ignored():
    results = await replay(real("05-on-received"), **{"response-handling": "ignore"})
    assert [rtype(r) for r in results if rtype(r) != "state.updated"] == ["run.completed"]


# -- quirks on hand-written streams ------------------------------------------------------------


async def test_object_content_is_read_as_text():
    results = await replay(canned("ok_object_content.ndjson"))
    assert final_text(results) == "你好，世界 🌍"


async def test_two_streaming_nodes_are_two_paragraphs():
    results = await replay(canned("ok_two_nodes.ndjson"))
    assert final_text(results) == "The agent's answer.\n\nSent by the Respond node."


async def test_keepalives_are_not_text():
    results = await replay(canned("ok_keepalive.ndjson"))
    assert final_text(results) == "Still here."


async def test_usage_from_a_respond_node_after_the_agent():
    results = await replay(canned("ok_usage_respond_node.ndjson"))
    assert final_text(results) == "Counted answer."
    assert terminal(results).usage.model_dump() == {"prompt_tokens": 20, "completion_tokens": 3, "total_tokens": 23}


async def test_malformed_line_is_a_protocol_error():
    code, retryable, _ = failure(await replay(canned("malformed_line.ndjson")))
    assert (code, retryable) == ("upstream.protocol", False)


@pytest.mark.parametrize("drop", [False, True], ids=["body-ends", "connection-drops"])
async def test_stream_cut_off_before_end_is_not_an_answer(drop):
    results = await replay(canned("truncated_stream.ndjson", drop=drop))
    code, retryable, message = failure(results)
    assert (code, retryable) == ("upstream.unavailable", True), message
    assert final_text(results).startswith("This answer was cut"), "the streamed part is kept, with a note"


async def test_error_after_text_keeps_the_partial_answer():
    results = await replay(canned("error_after_text.ndjson"))
    code, _, message = failure(results)
    assert code == "upstream.error" and "rate limit" in message
    assert final_text(results).startswith("Partial ")
