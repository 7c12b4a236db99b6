"""DashScopeAgent runner: the kit's runner driven by the DashScope adapter."""

from __future__ import annotations

from pathlib import Path

try:
    from runner_kit.config import ConfigSchema
    from runner_kit.runner import KitRunner
except ImportError as exc:  # packaged without the shared kit
    raise ImportError(
        "DashScopeAgent is missing its bundled runner_kit. Build the plugin from the langbot-agent-runners "
        "repository with `uv run runners build dashscope-agent` (plain `lbp build` does not include the kit)."
    ) from exc

from dashscope_agent.adapter import DashScopeAdapter


class DashScopeAgentRunner(KitRunner):
    """Answers with a Bailian agent or workflow app through the DashScope application API."""

    adapter = DashScopeAdapter
    schema = ConfigSchema.from_yaml(Path(__file__).with_suffix(".yaml"))
