"""codex-agent in bench section 6: the runner drives the scripted ``codex app-server``
(tests/fakes/cli/fake_codex.py) over the shared fake model API."""

from __future__ import annotations

from typing import Any

from bench.registry import FAKE_CLI_DIR, fake_model_agent


def _config(srv: Any, key: str) -> dict[str, Any]:
    return {"executable": str(FAKE_CLI_DIR / "fake_codex.py"), "base-url": srv.openai_base_url(), "api-key": key,
            "model": "fake-model", "advanced-settings": True, "max-retries": 0}


ENTRY = fake_model_agent("codex-agent", _config)
