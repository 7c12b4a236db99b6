"""ACPRunner runner: the kit's runner driven by the ACP adapter."""

from __future__ import annotations

from pathlib import Path

try:
    from runner_kit.config import ConfigSchema
    from runner_kit.runner import KitRunner
except ImportError as exc:  # packaged without the shared kit
    raise ImportError(
        "ACPRunner is missing its bundled runner_kit. Build the plugin from the langbot-agent-runners "
        "repository with `uv run runners build acp-agent-runner` (plain `lbp build` does not include the kit)."
    ) from exc

from acp_agent_runner.adapter import ACPAdapter


class ACPRunnerRunner(KitRunner):
    """Drives an ACP coding agent."""

    adapter = ACPAdapter
    schema = ConfigSchema.from_yaml(Path(__file__).with_suffix(".yaml"))
