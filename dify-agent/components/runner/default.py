"""DifyAgent runner: the kit's runner driven by the Dify adapter."""

from __future__ import annotations

from pathlib import Path

try:
    from runner_kit.config import ConfigSchema
    from runner_kit.runner import KitRunner
except ImportError as exc:  # packaged without the shared kit
    raise ImportError(
        "DifyAgent is missing its bundled runner_kit. Build the plugin from the langbot-agent-runners "
        "repository with `uv run runners build dify-agent` (plain `lbp build` does not include the kit)."
    ) from exc

from dify_agent.adapter import DifyAdapter


class DifyRunner(KitRunner):
    """Answers with a Dify app through the Dify Service API."""

    adapter = DifyAdapter
    schema = ConfigSchema.from_yaml(Path(__file__).with_suffix(".yaml"))
