"""LangflowAgent in the contract suite and the fault matrix, against tests/fakes/langflow.py.

Cells that differ from the shared HTTP defaults, and why:

- ``http_403``: Langflow answers a missing or wrong API key with 403 ``{"detail": "Invalid or missing
  API key"}`` (401 is only for an invalid browser JWT), so a JSON 403 from Langflow is ``upstream.auth``.
  A proxy's HTML 403 page stays ``upstream.forbidden``.
- ``http_404``: Langflow's 404 on the run route means the flow does not exist
  (``{"detail": "Flow identifier … not found"}``): the bot's ``flow-id`` is wrong, ``config.invalid``.
  FastAPI's bare ``{"detail": "Not Found"}`` (a wrong route, i.e. base URL) and HTML pages stay
  ``upstream.not_found``.
- ``error_event``: Langflow's stream ``error`` events mean the flow failed inside a component (the
  model refused, a URL was blocked, a tweak was wrong); the embedded status is always 500 whatever the
  cause, so it is ``upstream.error``, not retryable, with the component's own message.

No ``forget_sessions``: Langflow never says a session is gone (an unknown ``session_id`` just starts
with empty memory), so there is nothing to detect and no fresh-session notice to show. ``think``:
the run API has no reasoning events; a reasoning model's ``<think>`` block comes inside its text
tokens, which the kit keeps or (``remove-think``) strips. No ``cancel_seen``: Langflow has no cancel endpoint for
``/api/v1/run`` (``interrupt: false``); closing the connection is all a client can do.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.contract.cases import PluginCase, Seen, faults_with

KEY = "sk-langflow-contract-secret-key"


def cases() -> list[PluginCase]:
    from tests.fakes.langflow import FakeLangflow

    def start() -> Any:
        srv = FakeLangflow(api_key=KEY)
        srv.start()
        return srv

    def config(srv: Any, key: str = KEY) -> dict[str, Any]:
        return {"base-url": srv.base_url, "api-key": key, "flow-id": srv.flow_id}

    def answer(srv: Any, tokens: list[str], delay: float) -> None:
        srv.mode = "llm"
        srv.answer_tokens = tokens
        srv.token_delay = delay

    def no_usage(srv: Any) -> None:
        srv.include_usage = False

    def set_fault(srv: Any, name: str) -> None:
        srv.fault = name

    def stall(srv: Any, pings: bool) -> None:
        if pings:
            pytest.skip("Langflow's run stream has no keep-alives (only add_message/token/end/error events)")
        srv.mode = "llm"
        srv.answer_tokens = ["The first part ", "and the rest."]
        srv.fault = "stall"

    def think(srv: Any, thoughts: list[str], tokens: list[str]) -> None:
        # Langflow has no reasoning events: a reasoning model's <think> block arrives inside its text
        srv.mode = "llm"
        srv.answer_tokens = ["<think>\n", *thoughts, "\n</think>\n", *tokens]

    def seen(srv: Any) -> list[Seen]:
        out = []
        for r in srv.find_requests("POST"):
            if not r.path.startswith("/api/v1/run/"):
                continue
            body = r.json()
            out.append(Seen(credential=r.headers.get("x-api-key", ""), user=body.get("user_id") or "",
                            conversation=body.get("session_id") or "", cookie=r.headers.get("cookie"),
                            sent=r.body.decode("utf-8", "replace")))
        return out

    def image_received(srv: Any) -> bool:
        return any(path in srv.uploads and srv.uploads[path].startswith(b"\x89PNG")
                   for run in srv.runs for path in run.files)

    faults = faults_with(http_403=("upstream.auth", False), http_404=("config.invalid", False),
                         error_event=("upstream.error", False))

    return [
        PluginCase(
            plugin="langflow-agent",
            start_server=start,
            config=config,
            key=KEY,
            answer=answer,
            no_usage=no_usage,
            set_fault=set_fault,
            faults=faults,
            image_received=image_received,
            stall=stall,
            think=think,
            seen=seen,
            ended=lambda srv: list(srv.deleted_sessions),
            second_bot=lambda srv, key: (srv.api_keys.add(key), config(srv, key))[1],
            group_modes={"actor": "person", "hashed": "person", "conversation": "shared",
                         "legacy-session": "shared", "legacy-bot": "shared"},
            question="Langflow's run API has no step that pauses a flow for a person's answer: a flow that asks "
                     "something asks it in its answer, and the reply is an ordinary next message",
        )
    ]
