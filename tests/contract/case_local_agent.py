"""The contract case for local-agent: the runner calls LangBot's model layer (``ctx.api``), which the
local host serves from FakeOpenAI as LangBot 4.11.2's litellm requester does. Faults are set on
the fake model; LangBot hands the runner only its own error text for them
(``RequesterError: Model request failed: <reason>``, runners_cli/host_models.py reproduces the
mapping), so several cells read differently from a runner that sees the HTTP response itself."""

from __future__ import annotations

import json
import os
from typing import Any

from runners_cli.host import LocalHost
from runners_cli.host_models import OpenAIChatModel
from tests.contract.cases import HTTP_FAULTS, PluginCase, Seen, stream_tokens
from tests.fakes.openai import FakeOpenAI

KEY = "sk-contract-local-agent-key"

FAULTS = dict(HTTP_FAULTS)
FAULTS.update({
    # LangBot has no "forbidden": a 403 is litellm's PermissionDeniedError, which none of
    # _handle_litellm_error's mappings name, so LangBot says "Unknown error" (litellm 1.x: it is not
    # a litellm.APIError; the local host says "API error"), and the runner can only read that as
    # the provider failing: upstream.unavailable, retryable, as for a 5xx
    "http_403": ("upstream.unavailable", True),
    "html_403": ("upstream.unavailable", True),
    # 413 is no mapped status either: the same generic provider failure
    "http_413": ("upstream.unavailable", True),
    "html_413": ("upstream.unavailable", True),
    # a body that is not an OpenAI answer, an empty body, invalid UTF-8 and a 9 MiB line all fail
    # inside LangBot's requester with its generic "API error"/"Unknown error": the runner learns no
    # more than "the provider failed" (retryable), not that the bytes were malformed
    "invalid_json": ("upstream.unavailable", True),
    "non_utf8": ("upstream.unavailable", True),
    "oversized": ("upstream.unavailable", True),
    "empty": ("upstream.unavailable", True),
})
# refused / connect_timeout change ``base_url_key`` in the runner's config; LocalAgent's config has
# no base URL (the model's endpoint is LangBot's provider setting), so both are covered in
# tests/plugins/test_local_agent.py by pointing the host's model at a closed port / a blackhole
del FAULTS["refused"]
del FAULTS["connect_timeout"]


def start() -> FakeOpenAI:
    srv = FakeOpenAI(api_key=KEY)
    srv.start()
    return srv


def prepare_host(srv: FakeOpenAI, host: LocalHost) -> None:
    """LangBot's model provider pointing at the fake: the model the runner's config selects."""
    host.add_model(OpenAIChatModel("m-main", base_url=srv.base_url, api_key=KEY, model_name="gpt-fake"))


def config(srv: FakeOpenAI) -> dict[str, Any]:
    # what LangBot's model-fallback-selector stores
    return {"model": {"primary": "m-main", "fallbacks": [], "reasoning": {}}}


def stall(srv: FakeOpenAI, pings: bool) -> None:
    if pings:
        import pytest

        pytest.skip("LangBot's model stream carries chunks only: the provider's SSE keep-alives never "
                    "reach a runner, so there are none to count as life")
    srv.answer_tokens = ["The first part ", "and the rest."]
    srv.fault = "stall"


def think(srv: FakeOpenAI, thoughts: list[str], tokens: list[str]) -> None:
    srv.reasoning = "".join(thoughts)
    srv.answer_tokens = list(tokens)


def image_received(srv: FakeOpenAI) -> bool:
    return any(
        part.get("type") == "image_url" and str((part.get("image_url") or {}).get("url", "")).startswith("data:image/")
        for body in srv.chat_requests
        for m in body.get("messages") or []
        if isinstance(m.get("content"), list)
        for part in m["content"]
    )


def seen(srv: FakeOpenAI) -> list[Seen]:
    """Each model request LangBot made for the runner. LocalAgent keeps no upstream conversation:
    its conversation is LangBot's own (the transcript it reads back), one per LangBot conversation,
    so there is no user or conversation id upstream, only what each request carried."""
    return [Seen(credential="", user="", conversation="", sent=json.dumps(body, ensure_ascii=False))
            for body in srv.chat_requests]


def cases() -> list[PluginCase]:
    return [
        PluginCase(
            plugin="local-agent",
            start_server=start,
            prepare_host=prepare_host,
            config=config,
            key=KEY,
            answer=stream_tokens,
            faults=FAULTS,
            image_received=image_received,
            # the interrupt the host sees is the model request itself ending: the fake's stream
            # connection is closed (open_connections) — there is no separate upstream task to stop
            cancel_seen=lambda srv: srv.active_requests == 0,
            # the model (not the runner config) points at the fake; a garbage model id is the
            # runner-config value that can be wrong here
            base_url_key="model",
            stall=stall,
            think=think,
            # the agent loop runs inside the plugin process: every model request is made by it, so
            # "one live agent process for the whole run" is this process for each request
            agent_pids=lambda srv: [os.getpid()] * len(srv.chat_requests),
            seen=seen,
            question="LocalAgent runs LangBot's own tools, which LangBot runs without asking anyone: nothing waits "
                     "for an answer in the chat",
        )
    ]
