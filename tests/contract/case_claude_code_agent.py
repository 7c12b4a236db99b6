"""The contract case for claude-code-agent: the runner drives the scripted ``claude``
(tests/fakes/cli/fake_claude.py, the real CLI's stream-json shapes) which calls the shared fake
Anthropic Messages API (tests/fakes/model_api.py). Faults are set on the model API; the cells say
what the claude CLI turns each into (checked against claude 2.1.197, real-peers.md §3)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from runner_kit.process import alive
from tests.contract.cases import HTTP_FAULTS, PluginCase, Seen, keyed_second_bot
from tests.contract.coding import AgentModelAPI, permission_question, silent_stall, think
from tests.fakes.model_api import ANTHROPIC

FAKE_CLAUDE = str(Path(__file__).resolve().parents[1] / "fakes" / "cli" / "fake_claude.py")
KEY = "sk-ant-contract-claude-key"
PLATFORM_DIR = "claude-code"

FAULTS = dict(HTTP_FAULTS)
FAULTS.update({
    # a body that is not JSON: claude says "API Error: Failed to parse JSON" (no status)
    "invalid_json": ("upstream.protocol", False),
    # a cut-off stream, a stream ended by an error event and an empty stream all read the same from
    # claude: "API returned an empty or malformed response (HTTP 200) — check for a proxy or gateway"
    # with api_error_status null (checked on 2.1.197); a gateway hiccup, so retryable
    "truncated": ("upstream.unavailable", True),
    "error_event": ("upstream.unavailable", True),
    "empty": ("upstream.unavailable", True),
})
# invalid UTF-8 in a delta: claude (Node) decodes it as U+FFFD and answers; nothing to surface
del FAULTS["non_utf8"]
# a 9 MiB SSE line: claude has no event size limit and answers with it; nothing to surface
del FAULTS["oversized"]


class ClaudeModelAPI(AgentModelAPI):
    """The fake model API, with a private data directory for the runner (workspaces, HOMEs)."""

    def forget_sessions(self) -> None:
        """What an expired or wiped claude session store looks like: every session file gone."""
        for home in self.homes(PLATFORM_DIR):
            shutil.rmtree(home / ".claude" / "projects", ignore_errors=True)


def config(srv: ClaudeModelAPI, key: str = KEY) -> dict[str, Any]:
    # each member their own session, so the contract's per-person cases (identity, two bots) apply
    return {"executable": FAKE_CLAUDE, "base-url": srv.anthropic_base_url(), "api-key": key, "user-id-source": "actor"}


def start() -> ClaudeModelAPI:
    srv = ClaudeModelAPI(api_keys={KEY})
    srv.start()
    return srv


stall = silent_stall("claude does not pass the model API's SSE pings to its stdout (checked on 2.1.197): "
                     "nothing reaches the runner while a model call stalls")


def seen(srv: Any) -> list[Seen]:
    out = []
    for r in srv.model_requests():
        if r.api != ANTHROPIC:
            continue
        h = r.headers
        credential = h.get("x-api-key") or h.get("authorization", "").removeprefix("Bearer ")
        out.append(Seen(credential=credential, user=h.get("x-langbot-user", ""),
                        conversation=h.get("x-claude-code-session-id", ""), cookie=h.get("cookie"),
                        sent=json.dumps(r.body, ensure_ascii=False)))
    return out


def image_received(srv: Any) -> bool:
    return any(
        block.get("type") == "image" and (block.get("source") or {}).get("type") == "base64"
        for r in srv.model_requests()
        for m in r.body.get("messages") or []
        if isinstance(m.get("content"), list)
        for block in m["content"]
    )


def cancel_seen(srv: Any) -> bool:
    """The claude process behind the cancelled run (and so its model call) is gone."""
    pids = srv.agent_pids()
    return bool(pids) and not any(alive(p) for p in pids)


def cases() -> list[PluginCase]:
    return [
        PluginCase(
            plugin="claude-code-agent",
            startup=0.5,
            start_server=start,
            config=config,
            key=KEY,
            # claude always prints result.usage; when the model API reports none it is all zeros,
            # which the runner reads as unknown
            no_usage=lambda srv: setattr(srv, "include_usage", False),
            set_fault=lambda srv, name: setattr(srv, "fault", name),
            faults=FAULTS,
            image_received=image_received,
            cancel_seen=cancel_seen,
            stall=stall,
            think=think,
            forget_sessions=lambda srv: srv.forget_sessions(),
            seen=seen,
            second_bot=keyed_second_bot(config),
            # the identity reaches the model API as the x-langbot-user header; the session (and the
            # default workspace) is per person or shared the same way
            group_modes={"actor": "person", "hashed": "person", "conversation": "shared"},
            agent_pids=lambda srv: srv.agent_pids(),
            question=permission_question(),
        )
    ]
