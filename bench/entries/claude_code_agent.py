"""claude-code-agent in bench section 6: the runner drives the scripted ``claude``
(tests/fakes/cli/fake_claude.py) over the shared fake model API."""

from __future__ import annotations

from typing import Any

from bench.registry import FAKE_CLI_DIR, fake_model_agent


def _config(srv: Any, key: str) -> dict[str, Any]:
    return {"executable": str(FAKE_CLI_DIR / "fake_claude.py"), "base-url": srv.anthropic_base_url(), "api-key": key,
            "advanced-settings": True, "max-retries": 0}


ENTRY = fake_model_agent("claude-code-agent", _config)
