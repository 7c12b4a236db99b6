"""codex-agent in the contract suite: the runner drives the scripted ``codex app-server``
(``tests/fakes/cli/fake_codex.py``), which calls the shared fake model API (OpenAI Responses) at the
base URL the runner writes into its generated ``config.toml``, with the key from the environment
variable the runner names there (as the real Codex 0.171.0 does)."""

from __future__ import annotations

import shutil
import stat
from pathlib import Path
from typing import Any

from tests.contract.cases import HTTP_FAULTS, PluginCase
from tests.contract.coding import (
    AgentModelAPI,
    openai_image_received,
    permission_question,
    seen_by_workspace,
    silent_stall,
    think,
)

FAKE = Path(__file__).resolve().parents[1] / "fakes" / "cli" / "fake_codex.py"
KEY = "sk-contract-codex-secret-key"
DATA_ENV = "RUNNER_KIT_DATA_DIR"

# What Codex 0.171.0 turns each model-API fault into (checked against the real CLI, transcripts in
# tests/plugins/transcripts/codex/captured/): a 200 whose body is not SSE (invalid_json), a stream
# with no event (empty) and bytes that are not UTF-8 (non_utf8) all end as "stream disconnected
# before completion: …" with codexErrorInfo "other" — to the owner a transient failure of the model
# API's stream, so retryable upstream.unavailable, not a protocol error of Codex itself (whose own
# JSON-RPC stays intact) and not an empty answer.
FAULTS: dict[str, tuple[str, bool]] = {
    **HTTP_FAULTS,
    "invalid_json": ("upstream.unavailable", True),
    "non_utf8": ("upstream.unavailable", True),
    "empty": ("upstream.unavailable", True),
}
# "oversized" (one 9 MiB SSE line) is dropped: Codex reads it as answer text and the turn succeeds,
# so there is no failure to surface (the runner cuts an answer that big to what LangBot can deliver).
del FAULTS["oversized"]


def _executable() -> str:
    mode = FAKE.stat().st_mode
    if not mode & stat.S_IXUSR:
        FAKE.chmod(mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return str(FAKE)


class CodexServer(AgentModelAPI):
    """The fake model API, plus the scripted Codex's event log."""

    def __init__(self) -> None:
        super().__init__(api_keys={KEY})

    def forget_threads(self) -> None:
        """Clear every CODEX_HOME's thread store (as if the rollouts were deleted)."""
        for home in self.homes("codex-agent"):
            shutil.rmtree(home / ".codex" / "sessions", ignore_errors=True)


def config(srv: Any, key: str = KEY) -> dict[str, Any]:
    return {
        "executable": _executable(),
        "base-url": srv.openai_base_url(),
        "api-key": key,
        "model": "fake-model",
        "advanced-settings": True,
        "max-retries": 0,  # a fault fails at once, as within the fault matrix's 3 s deadline it must
        "env": f"FAKE_CODEX_EVENTS={srv.log}",
        # the run-scoped LangBot MCP bridge is covered in tests/plugins/test_codex_agent.py (and the
        # claude-code-agent case runs with it on); off here so the deadline cells time the agent alone
        "langbot-tools": False,
    }


def cases() -> list[PluginCase]:
    return [
        PluginCase(
            plugin="codex-agent",
            startup=0.5,
            start_server=lambda: CodexServer().start(),
            config=config,
            key=KEY,
            faults=FAULTS,
            image_received=openai_image_received,
            cancel_seen=lambda srv: bool(srv.events("interrupt")),
            open_connections=lambda srv: srv.active_requests,
            stall=silent_stall("codex app-server sends nothing while it waits for the model: there are no keep-alives"),
            think=think,
            forget_sessions=lambda srv: srv.forget_threads(),
            seen=seen_by_workspace("thread-id"),
            # second_bot: the bots-isolation cell reads the end user from what the upstream sees;
            # Codex sends none (only its workspace), so that cell does not apply; two bots with
            # their own keys in one process are checked in tests/plugins/test_codex_agent.py
            # hashed: like actor (one thread per person); the lb_ id it derives never reaches Codex
            group_modes={"actor": "person", "conversation": "shared"},
            agent_pids=lambda srv: srv.agent_pids(),
            question=permission_question(),
        )
    ]
