"""N8nAgent runner: the kit's runner driven by the n8n adapter."""

from __future__ import annotations

from pathlib import Path

try:
    from runner_kit.config import ConfigSchema
    from runner_kit.runner import KitRunner
except ImportError as exc:  # packaged without the shared kit
    raise ImportError(
        "N8nAgent is missing its bundled runner_kit. Build the plugin from the langbot-agent-runners "
        "repository with `uv run runners build n8n-agent` (plain `lbp build` does not include the kit)."
    ) from exc

from n8n_agent.adapter import N8nAdapter


class N8nAgentRunner(KitRunner):
    """Answers with an n8n workflow through its Webhook node."""

    adapter = N8nAdapter
    schema = ConfigSchema.from_yaml(Path(__file__).with_suffix(".yaml"))
