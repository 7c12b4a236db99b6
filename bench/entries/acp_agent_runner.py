"""acp-agent-runner in bench section 6: the runner drives the test ACP agent
(tests/fakes/cli/acp_agent.py, on the agent-client-protocol library, shaped like codex-acp) over the
shared fake model API."""

from __future__ import annotations

import sys
from typing import Any

from bench.registry import FAKE_CLI_DIR, fake_model_agent


def _config(srv: Any, key: str) -> dict[str, Any]:
    return {"provider": "codex", "command": f"{sys.executable} {FAKE_CLI_DIR / 'acp_agent.py'}",
            "base-url": srv.openai_base_url(), "api-key": key, "env": f"FAKE_ACP_STATE={srv.bench_shared}/sessions"}


ENTRY = fake_model_agent("acp-agent-runner", _config)
