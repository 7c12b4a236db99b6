"""acp-agent-runner in the contract suite: the runner drives the scripted codex-acp-shaped test agent
(``tests/fakes/cli/acp_agent.py``, on the ``acp`` library), which calls the shared fake model API
(OpenAI Responses) at the base URL the runner hands it through codex-acp's own ``-c`` overrides."""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from tests.contract.cases import PluginCase, Seen, faults_with

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


class _Server:
    """The fake model API plus the test agent's session store and event log."""

    def __init__(self) -> None:
        from tests.fakes.model_api import FakeModelAPI

        self.api = FakeModelAPI(api_keys={KEY})
        self.dir = Path(tempfile.mkdtemp(prefix="acp-case-"))
        self.state = self.dir / "sessions"
        self.log = self.dir / "agent.jsonl"

    def __getattr__(self, name: str) -> Any:
        return getattr(self.api, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("api", "dir", "state", "log"):
            object.__setattr__(self, name, value)
        else:
            setattr(self.api, name, value)

    def start(self) -> _Server:
        self.api.start()
        return self

    def stop(self) -> None:
        self.api.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def events(self, name: str) -> list[dict[str, Any]]:
        if not self.log.is_file():
            return []
        return [e for e in map(json.loads, self.log.read_text().splitlines()) if e.get("event") == name]


def config(srv: Any, key: str = KEY) -> dict[str, Any]:
    return {
        "provider": "codex",
        "command": f"{sys.executable} {AGENT}",
        "base-url": srv.api.openai_base_url(),
        "api-key": key,
        "env": f"FAKE_ACP_STATE={srv.state}\nFAKE_ACP_LOG={srv.log}",
        # the run-scoped LangBot MCP bridge is covered in tests/plugins/test_acp_agent_runner.py (and the
        # claude-code-agent case runs with it on); off here so the deadline cells time the agent alone
        "langbot-tools": False,
    }


def _stall(srv: Any, pings: bool) -> None:
    if pings:
        pytest.skip("ACP agents send nothing while they wait for the model: there are no keep-alives")
    srv.answer_tokens = ["The first part ", "and the rest."]
    srv.fault = "stall"


def _think(srv: Any, thoughts: list[str], tokens: list[str]) -> None:
    srv.think_tokens = list(thoughts)
    srv.answer_tokens = list(tokens)


def _seen(srv: Any) -> list[Seen]:
    # the agent sees no end user: what scopes a session is its workspace (one per session scope)
    return [Seen(credential=r.headers.get("authorization", "").removeprefix("Bearer "),
                 user=r.headers.get("x-fake-agent-cwd", ""), conversation=r.headers.get("session-id", ""),
                 cookie=r.headers.get("cookie"))
            for r in srv.api.model_requests() if r.api == "openai"]


def _forget(srv: Any) -> None:
    shutil.rmtree(srv.state, ignore_errors=True)


def _image(srv: Any) -> bool:
    return any(c.get("type") == "input_image" and str(c.get("image_url", "")).startswith("data:image/")
               for r in srv.api.model_requests() for item in r.body.get("input") or []
               if isinstance(item, dict) for c in item.get("content") or [] if isinstance(c, dict))


def cases() -> list[PluginCase]:
    return [
        PluginCase(
            plugin="acp-agent-runner",
            startup=2.0,  # the test agent imports the acp library (pydantic): 0.8–1.7 s on a busy machine
            start_server=lambda: _Server().start(),
            config=config,
            key=KEY,
            faults=FAULTS,
            image_received=_image,
            cancel_seen=lambda srv: any(e.get("running") for e in srv.events("cancel")),
            open_connections=lambda srv: srv.api.active_requests,
            stall=_stall,
            think=_think,
            forget_sessions=_forget,
            seen=_seen,
            # second_bot: the bots-isolation cell reads the end user from what the upstream sees;
            # an ACP agent sees no user (only its workspace), so that cell does not apply
            group_modes={"actor": "person", "conversation": "shared"},
            agent_pids=lambda srv: srv.api.agent_pids(),
        )
    ]
