"""ClaudeCodeAgent runner: the kit's runner driven by the Claude Code adapter."""

from __future__ import annotations

from pathlib import Path

try:
    from runner_kit.config import ConfigSchema
    from runner_kit.runner import KitRunner
except ImportError as exc:  # packaged without the shared kit
    raise ImportError(
        "ClaudeCodeAgent is missing its bundled runner_kit. Build the plugin from the langbot-agent-runners "
        "repository with `uv run runners build claude-code-agent` (plain `lbp build` does not include the kit)."
    ) from exc

from claude_code_agent.adapter import ClaudeCodeAdapter


class ClaudeCodeAgentRunner(KitRunner):
    """Answers with Claude Code."""

    adapter = ClaudeCodeAdapter
    schema = ConfigSchema.from_yaml(Path(__file__).with_suffix(".yaml"))
