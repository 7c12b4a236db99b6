"""CozeAgent runner: the kit's runner driven by the Coze adapter."""

from __future__ import annotations

from pathlib import Path

try:
    from runner_kit.config import ConfigSchema
    from runner_kit.runner import KitRunner
except ImportError as exc:  # packaged without the shared kit
    raise ImportError(
        "CozeAgent is missing its bundled runner_kit. Build the plugin from the langbot-agent-runners "
        "repository with `uv run runners build coze-agent` (plain `lbp build` does not include the kit)."
    ) from exc

from coze_agent.adapter import CozeAdapter


class CozeAgentRunner(KitRunner):
    """Answers with a published Coze bot through the Coze Open API v3."""

    adapter = CozeAdapter
    schema = ConfigSchema.from_yaml(Path(__file__).with_suffix(".yaml"))
