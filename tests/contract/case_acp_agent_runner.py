"""acp-agent-runner in the contract suite: the runner drives the scripted codex-acp-shaped test agent
(``tests/fakes/cli/acp_agent.py``, on the ``acp`` library), which calls the shared fake model API
(OpenAI Responses) at the base URL the runner hands it through codex-acp's own ``-c`` overrides."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

from tests.contract.cases import PluginCase, faults_with
from tests.contract.coding import (
    AgentModelAPI,
    openai_image_received,
    permission_question,
    seen_by_workspace,
    silent_stall,
    think,
)

AGENT = Path(__file__).resolve().parents[1] / "fakes" / "cli" / "acp_agent.py"
KEY = "sk-contract-acp-secret-key"

# What codex-acp turns each model-API fault into (the test agent answers in the Codex core's words):
# a stream the Codex client cannot finish reading (a 200 that is not SSE, bytes that are not UTF-8,
# an event line too large for it, a stream that ends without `response.completed`) is reported as
# "stream disconnected before completion: …" on the session/prompt error — a transient upstream
# failure the runner maps to retryable upstream.unavailable, not to a protocol or empty-answer error
# of the agent itself (the agent's own protocol stays intact).
FAULTS = faults_with(
    invalid_json=("upstream.unavailable", True),
    non_utf8=("upstream.unavailable", True),
    oversized=("upstream.unavailable", True),
    empty=("upstream.unavailable", True),
)


class _Server(AgentModelAPI):
    """The fake model API plus the test agent's session store and event log."""

    def __init__(self) -> None:
        super().__init__(api_keys={KEY})

    def start(self) -> _Server:
        super().start()
        self.state = self.scratch / "sessions"
        return self


def config(srv: Any, key: str = KEY) -> dict[str, Any]:
    return {
        "provider": "codex",
        "command": f"{sys.executable} {AGENT}",
        "base-url": srv.openai_base_url(),
        "api-key": key,
        "env": f"FAKE_ACP_STATE={srv.state}\nFAKE_ACP_LOG={srv.log}",
        # the run-scoped LangBot MCP bridge is covered in tests/plugins/test_acp_agent_runner.py (and the
        # claude-code-agent case runs with it on); off here so the deadline cells time the agent alone
        "langbot-tools": False,
    }


def _forget(srv: Any) -> None:
    shutil.rmtree(srv.state, ignore_errors=True)


def cases() -> list[PluginCase]:
    return [
        PluginCase(
            plugin="acp-agent-runner",
            startup=2.0,  # the test agent imports the acp library (pydantic): 0.8–1.7 s on a busy machine
            start_server=lambda: _Server().start(),
            config=config,
            key=KEY,
            faults=FAULTS,
            image_received=openai_image_received,
            cancel_seen=lambda srv: any(e.get("running") for e in srv.events("cancel")),
            open_connections=lambda srv: srv.active_requests,
            stall=silent_stall("ACP agents send nothing while they wait for the model: there are no keep-alives"),
            think=think,
            forget_sessions=_forget,
            seen=seen_by_workspace("session-id"),
            # second_bot: the bots-isolation cell reads the end user from what the upstream sees;
            # an ACP agent sees no user (only its workspace), so that cell does not apply
            group_modes={"actor": "person", "conversation": "shared"},
            agent_pids=lambda srv: srv.agent_pids(),
            question=permission_question(),
        )
    ]
