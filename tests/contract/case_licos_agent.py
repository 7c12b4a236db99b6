"""LicosAgent in the contract suite and the fault matrix, against tests/fakes/licos.py.

The case runs the **managed** protocol (a project with ``agent_runtime`` enabled, behind a LICOS
platform that checks the user token sent as ``api-key``): only managed streams the model's tokens
(``graph_event`` message chunks). The legacy ``/stream_run`` sends each model turn whole, so
"text reaches the host before the upstream finishes" cannot hold for one turn there; legacy is
covered by tests/plugins/test_licos_agent*.py, including the real transcripts.

Every fault cell keeps the shared HTTP default:

- ``truncated``: the managed stream is resumed from its last ``id:``; the fake's sticky fault cuts
  the resumed streams too, so after the last resume the run fails ``upstream.unavailable``.
- ``error_event``: a managed ``run_status failed`` with the model provider's 500
  (``OpenAIAPIError``), retryable ``upstream.unavailable``.

No ``forget_sessions``: the plugin chooses the ``session_id`` and LICOS never says one is gone (an
unknown session just starts with empty memory). No keep-alives in the managed stream (``stall`` with pings is
skipped): while a tool runs the plugin asks the run's status instead; the legacy stream pings every
30 s, so ``idle-timeout`` defaults to 90 s.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.contract.cases import PluginCase, Seen

TOKEN = "licos-contract-user-token"


def cases() -> list[PluginCase]:
    from tests.fakes.licos import FakeLicos

    def start() -> Any:
        srv = FakeLicos(TOKEN, managed=True)
        srv.start()
        return srv

    def config(srv: Any, key: str = TOKEN) -> dict[str, Any]:
        return {"base-url": srv.base_url, "api-key": key, "protocol": "managed", "thinking": True}

    def answer(srv: Any, tokens: list[str], delay: float) -> None:
        srv.answer_tokens = tokens
        srv.token_delay = delay

    def no_usage(srv: Any) -> None:
        srv.include_usage = False

    def set_fault(srv: Any, name: str) -> None:
        srv.fault = name

    def stall(srv: Any, pings: bool) -> None:
        if pings:
            pytest.skip("a LICOS agent stream sends no keep-alives")
        srv.answer_tokens = ["The first part ", "and the rest."]
        srv.fault = "stall"

    def think(srv: Any, thoughts: list[str], tokens: list[str]) -> None:
        srv.reasoning = "".join(thoughts)  # one thinking_delta (forward_to_frontend on in the project)
        srv.answer_tokens = tokens

    def seen(srv: Any) -> list[Seen]:
        return [Seen(credential=r.headers.get("authorization", "").removeprefix("Bearer "),
                     user=r.headers.get("x-licos-current-user-id", ""),
                     conversation=(r.json().get("session_id") or ""), cookie=r.headers.get("cookie"),
                     sent=r.body.decode("utf-8", "replace"))
                for r in srv.find_requests("POST", "/stream_run")]

    return [
        PluginCase(
            plugin="licos-agent",
            start_server=start,
            config=config,
            key=TOKEN,
            answer=answer,
            no_usage=no_usage,
            set_fault=set_fault,
            image_received=lambda srv: any(v.startswith(b"\x89PNG") for v in srv.uploads.values()),
            cancel_seen=lambda srv: bool(srv.cancelled),
            stall=stall,
            think=think,
            seen=seen,
            ended=lambda srv: list(srv.deleted_sessions),
            second_bot=lambda srv, key: (srv.api_keys.add(key), config(srv, key))[1],
            group_modes={"actor": "person", "hashed": "person", "conversation": "shared"},
            question="a LICOS agent run has no step that waits for a person's answer: what it asks, it asks in its "
                     "answer, and the reply is an ordinary next message",
        )
    ]
