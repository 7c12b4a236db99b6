"""LangflowAgent runner: the kit's runner driven by the Langflow adapter."""

from __future__ import annotations

from pathlib import Path

try:
    from runner_kit.config import ConfigSchema
    from runner_kit.runner import KitRunner
except ImportError as exc:  # packaged without the shared kit
    raise ImportError(
        "LangflowAgent is missing its bundled runner_kit. Build the plugin from the langbot-agent-runners "
        "repository with `uv run runners build langflow-agent` (plain `lbp build` does not include the kit)."
    ) from exc

from langflow_agent.adapter import LangflowAdapter


class LangflowAgentRunner(KitRunner):
    """Answers with a Langflow flow through the /api/v1/run API."""

    adapter = LangflowAdapter
    schema = ConfigSchema.from_yaml(Path(__file__).with_suffix(".yaml"))
