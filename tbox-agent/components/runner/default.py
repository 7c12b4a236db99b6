"""TboxAgent runner: the kit's runner driven by the Tbox adapter."""

from __future__ import annotations

from pathlib import Path

try:
    from runner_kit.config import ConfigSchema
    from runner_kit.runner import KitRunner
except ImportError as exc:  # packaged without the shared kit
    raise ImportError(
        "TboxAgent is missing its bundled runner_kit. Build the plugin from the langbot-agent-runners "
        "repository with `uv run runners build tbox-agent` (plain `lbp build` does not include the kit)."
    ) from exc

from tbox_agent.adapter import TboxAdapter


class TboxAgentRunner(KitRunner):
    """Answers with Tbox."""

    adapter = TboxAdapter
    schema = ConfigSchema.from_yaml(Path(__file__).with_suffix(".yaml"))
