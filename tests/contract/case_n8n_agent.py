"""N8nAgent in the contract suite and the fault matrix, against tests/fakes/n8n.py.

The contract config uses header auth (the secret the suite must never leak is the header value) and
a streaming AI-Agent workflow. Cells that differ from HTTP_FAULTS, and why:

- ``http_500``: n8n answers 500 only with ``{"message":"Error in workflow"}``, i.e. the workflow
  itself failed (a node threw); that is ``upstream.error`` and not worth retrying blindly.
- ``error_event``: a streamed ``{"type":"error"}`` item is likewise a node's failure
  (``upstream.error``, not retryable); the contract's partial-answer cell accepts it.

Usage: n8n reports none. A workflow can return ``tokenUsage`` next to its answer (here a Respond to
Webhook node after the agent); ``answer`` makes the fake do that and ``no_usage`` stops it, so the
usage cell checks both that returned usage is recorded and that nothing is invented without it.
Conversations: the sessionId is LangBot's (n8n memory nodes key on it); n8n never says one is gone,
so there is no ``forget_sessions`` hook.
"""

from __future__ import annotations

from typing import Any

from tests.contract.cases import PluginCase, Seen, faults_with

KEY = "n8n-contract-secret-key"
HEADER = "X-N8N-Key"


def _config(srv: Any, key: str = KEY) -> dict[str, Any]:
    return {"webhook-url": srv.webhook_url, "auth-type": "header", "header-name": HEADER, "header-value": key}


def cases() -> list[PluginCase]:
    from tests.fakes.n8n import FakeN8n

    def start() -> Any:
        srv = FakeN8n()
        srv.auth = "header"
        srv.header_name = HEADER
        srv.api_keys = {KEY}
        srv.start()
        return srv

    def answer(srv: Any, tokens: list[str], delay: float) -> None:
        srv.mode = "streaming"
        srv.answer_tokens = tokens
        srv.token_delay = delay
        srv.include_usage = True

    def no_usage(srv: Any) -> None:
        srv.include_usage = False

    def set_fault(srv: Any, name: str) -> None:
        srv.fault = name

    def stall(srv: Any, pings: bool) -> None:
        srv.mode = "streaming"
        srv.answer_tokens = ["The first part ", "and the rest."]
        srv.fault = "stall_pings" if pings else "stall"

    def think(srv: Any, thoughts: list[str], tokens: list[str]) -> None:
        # n8n has no reasoning channel: a reasoning model behind the AI Agent streams its <think> block
        # inline, as text deltas, and the runner separates it
        srv.mode = "streaming"
        srv.answer_tokens = ["<think>\n", *thoughts, "\n</think>\n", *tokens]  # as R1-style models write it

    def seen(srv: Any) -> list[Seen]:
        out = []
        for r in srv.find_requests("POST"):
            if not r.path.startswith("/webhook"):
                continue
            body = r.json()
            out.append(Seen(credential=r.headers.get(HEADER, ""), user=body.get("userId", ""),
                            conversation=body.get("sessionId") or "", cookie=r.headers.get("cookie"),
                            sent=r.body.decode("utf-8", "replace")))
        return out

    def second_bot(srv: Any, key: str) -> dict[str, Any]:
        srv.api_keys.add(key)
        return _config(srv, key)

    faults = faults_with(http_500=("upstream.error", False), error_event=("upstream.error", False))
    return [
        PluginCase(
            plugin="n8n-agent",
            start_server=start,
            config=_config,
            key=KEY,
            answer=answer,
            no_usage=no_usage,
            set_fault=set_fault,
            faults=faults,
            image_received=lambda srv: any(
                (ctype or "").startswith("image/") for t in srv.turns for (_, ctype, _) in t.files.values()
            ),
            stall=stall,
            think=think,
            seen=seen,
            second_bot=second_bot,
            group_modes={"actor": "person", "hashed": "person", "conversation": "shared", "legacy-session": "shared"},
            question="the webhook answers each message in full: a workflow that waits for a person (n8n's 'send "
                     "and wait' nodes) waits for a form or link outside the chat, not for a chat message",
            base_url_key="webhook-url",
        )
    ]
