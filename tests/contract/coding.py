"""What the coding-agent contract cases share: the fake model API their scripted CLIs call, with a
private runner data directory (workspaces, HOMEs) and a scratch directory for the fake's own state,
and the hooks that read the same way for every agent."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.contract.cases import Question, Seen
from tests.fakes.model_api import FakeModelAPI

DATA_ENV = "RUNNER_KIT_DATA_DIR"
FAKE_CLI = Path(__file__).resolve().parents[1] / "fakes" / "cli"


class AgentModelAPI(FakeModelAPI):
    """A ``FakeModelAPI`` that, while it runs, points ``RUNNER_KIT_DATA_DIR`` at a private
    directory (``data_dir``), and gives the scripted agent a scratch directory (``scratch``)."""

    def start(self) -> AgentModelAPI:
        # under the folder the tests' sandboxes may write (tests/conftest.py), so the scripted agent's
        # session store and log outlive its process
        shared = os.environ.get("LANGBOT_RUNNERS_SANDBOX_WRITE", "").split(os.pathsep)[0] or None
        self.scratch = Path(tempfile.mkdtemp(prefix="agent-case-", dir=shared))
        self.data_dir = self.scratch / "data"
        self.log = self.scratch / "agent-events.jsonl"  # where a scripted agent records what it did
        self._old_data = os.environ.get(DATA_ENV)
        os.environ[DATA_ENV] = str(self.data_dir)
        super().start()
        return self

    def stop(self) -> None:
        try:
            super().stop()
        finally:
            if self._old_data is None:
                os.environ.pop(DATA_ENV, None)
            else:
                os.environ[DATA_ENV] = self._old_data
            shutil.rmtree(self.scratch, ignore_errors=True)

    def events(self, name: str) -> list[dict[str, Any]]:
        """The scripted agent's records named ``name`` (it writes JSON lines to ``log``)."""
        if not self.log.is_file():
            return []
        return [e for e in map(json.loads, self.log.read_text().splitlines()) if e.get("event") == name]

    def homes(self, platform_dir: str) -> list[Path]:
        """The private HOMEs the runner made for its agents."""
        return sorted((self.data_dir / platform_dir / "homes").glob("*"))


def silent_stall(why: str) -> Callable[[Any, bool], None]:
    """A ``stall`` hook for agents that pass nothing on while the model call stalls (``why``)."""

    def stall(srv: Any, pings: bool) -> None:
        if pings:
            pytest.skip(why)
        srv.answer_tokens = ["The first part ", "and the rest."]
        srv.fault = "stall"

    return stall


def think(srv: Any, thoughts: list[str], tokens: list[str]) -> None:
    srv.think_tokens = list(thoughts)
    srv.answer_tokens = list(tokens)


def seen_by_workspace(conversation_header: str) -> Callable[[Any], list[Seen]]:
    """``seen`` for agents that send no end user: a session is scoped by its workspace, which the
    scripted agent names in a test header; ``conversation_header`` carries its session id."""

    def seen(srv: Any) -> list[Seen]:
        return [Seen(credential=r.headers.get("authorization", "").removeprefix("Bearer "),
                     user=r.headers.get("x-fake-agent-cwd", ""), conversation=r.headers.get(conversation_header, ""),
                     cookie=r.headers.get("cookie"), sent=json.dumps(r.body, ensure_ascii=False))
                for r in srv.model_requests() if r.api == "openai"]

    return seen


def openai_image_received(srv: Any) -> bool:
    """A Responses request carried the chat's image as an ``input_image`` data URL."""
    return any(c.get("type") == "input_image" and str(c.get("image_url", "")).startswith("data:image/")
               for r in srv.model_requests() for item in r.body.get("input") or []
               if isinstance(item, dict) for c in item.get("content") or [] if isinstance(c, dict))


# the tool the scripted agent asks to run (it writes, so every agent asks before it runs it); its
# output ("ok-42") is not in the command's own text, so a model request carrying it proves it ran
ASKED_COMMAND = "touch asked.txt && echo ok-$((6*7))"


def _tool_answer(srv: Any) -> str | None:
    """"allowed" once the agent sent the model the asked command's output, "denied" when it sent a
    tool result without it (the person said no), None while the agent still waits."""
    bodies = [json.dumps(r.body, ensure_ascii=False) for r in srv.model_requests()]
    if any("ok-42" in b for b in bodies):
        return "allowed"
    if any('"tool_result"' in b or '"function_call_output"' in b for b in bodies):
        return "denied"
    return None


def permission_question() -> Question:
    """A coding agent's question under ``permission-mode: ask``: the model asks to run a shell
    command, the agent asks the chat for permission; "yes" (or the Allow button) lets it run."""

    def ask(srv: Any, on: bool) -> None:
        srv.tool_command = ASKED_COMMAND if on else None

    return Question(ask=ask, answer="yes", click={"action_id": "allow"}, received=_tool_answer, expect="allowed",
                    config={"advanced-settings": True, "permission-mode": "ask"}, shown="wants to")
