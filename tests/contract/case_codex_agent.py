"""codex-agent in the contract suite: the runner drives the scripted ``codex app-server``
(``tests/fakes/cli/fake_codex.py``), which calls the shared fake model API (OpenAI Responses) at the
base URL the runner writes into its generated ``config.toml``, with the key from the environment
variable the runner names there (as the real Codex 0.171.0 does)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Any

import pytest

from tests.contract.cases import HTTP_FAULTS, PluginCase, Seen

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


class CodexServer:
    """The fake model API, plus a private data directory for the runner (workspaces, CODEX_HOMEs)
    and the scripted Codex's event log."""

    def __init__(self) -> None:
        from tests.fakes.model_api import FakeModelAPI

        self.api = FakeModelAPI(api_keys={KEY})
        self.dir = Path(tempfile.mkdtemp(prefix="codex-case-"))
        self.log = self.dir / "codex-events.jsonl"
        self._old_data: str | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.api, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("api", "dir", "log", "_old_data"):
            object.__setattr__(self, name, value)
        else:
            setattr(self.api, name, value)

    def start(self) -> CodexServer:
        self._old_data = os.environ.get(DATA_ENV)
        os.environ[DATA_ENV] = str(self.dir / "data")
        self.api.start()
        return self

    def stop(self) -> None:
        self.api.stop()
        if self._old_data is None:
            os.environ.pop(DATA_ENV, None)
        else:
            os.environ[DATA_ENV] = self._old_data
        shutil.rmtree(self.dir, ignore_errors=True)

    def events(self, name: str) -> list[dict[str, Any]]:
        if not self.log.is_file():
            return []
        return [e for e in map(json.loads, self.log.read_text().splitlines()) if e.get("event") == name]

    def forget_threads(self) -> None:
        """Clear every CODEX_HOME's thread store (as if the rollouts were deleted)."""
        for sessions in (self.dir / "data").glob("codex-agent/homes/*/.codex/sessions"):
            shutil.rmtree(sessions, ignore_errors=True)


def config(srv: Any, key: str = KEY) -> dict[str, Any]:
    return {
        "executable": _executable(),
        "base-url": srv.api.openai_base_url(),
        "api-key": key,
        "model": "fake-model",
        "advanced-settings": True,
        "max-retries": 0,  # a fault fails at once, as within the fault matrix's 3 s deadline it must
        "env": f"FAKE_CODEX_EVENTS={srv.log}",
        # the run-scoped LangBot MCP bridge is covered in tests/plugins/test_codex_agent.py (and the
        # claude-code-agent case runs with it on); off here so the deadline cells time the agent alone
        "langbot-tools": False,
    }


def _answer(srv: Any, tokens: list[str], delay: float) -> None:
    srv.answer_tokens = list(tokens)
    srv.token_delay = delay


def _stall(srv: Any, pings: bool) -> None:
    if pings:
        pytest.skip("codex app-server sends nothing while it waits for the model: there are no keep-alives")
    srv.answer_tokens = ["The first part ", "and the rest."]
    srv.fault = "stall"


def _think(srv: Any, thoughts: list[str], tokens: list[str]) -> None:
    srv.think_tokens = list(thoughts)
    srv.answer_tokens = list(tokens)


def _seen(srv: Any) -> list[Seen]:
    # Codex sends no end user upstream: what a thread is scoped by is its workspace (one per
    # session scope, so per person or per group), which the scripted Codex names in a test header
    return [Seen(credential=r.headers.get("authorization", "").removeprefix("Bearer "),
                 user=r.headers.get("x-fake-agent-cwd", ""), conversation=r.headers.get("thread-id", ""),
                 cookie=r.headers.get("cookie"))
            for r in srv.api.model_requests() if r.api == "openai"]


def _image(srv: Any) -> bool:
    return any(c.get("type") == "input_image" and str(c.get("image_url", "")).startswith("data:image/png;base64,")
               for r in srv.api.model_requests() for item in r.body.get("input") or []
               if isinstance(item, dict) for c in item.get("content") or [] if isinstance(c, dict))


def cases() -> list[PluginCase]:
    extra: dict[str, Any] = {}
    if "agent_pids" in PluginCase.__dataclass_fields__:
        extra["agent_pids"] = lambda srv: srv.api.agent_pids()
    return [
        PluginCase(
            plugin="codex-agent",
            startup=0.5,
            start_server=lambda: CodexServer().start(),
            config=config,
            secrets=lambda srv: [KEY],
            answer=_answer,
            no_usage=lambda srv: setattr(srv, "include_usage", False),
            set_fault=lambda srv, name: setattr(srv, "fault", name),
            faults=FAULTS,
            image_received=_image,
            cancel_seen=lambda srv: bool(srv.events("interrupt")),
            open_connections=lambda srv: srv.api.active_requests,
            stall=_stall,
            think=_think,
            forget_sessions=lambda srv: srv.forget_threads(),
            seen=_seen,
            # second_bot: the bots-isolation cell reads the end user from what the upstream sees;
            # Codex sends none (only its workspace), so that cell does not apply; two bots with
            # their own keys in one process are checked in tests/plugins/test_codex_agent.py
            # hashed: like actor (one thread per person); the lb_ id it derives never reaches Codex
            group_modes={"actor": "person", "conversation": "shared"},
            **extra,
        )
    ]
