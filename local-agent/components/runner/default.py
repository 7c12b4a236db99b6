"""LocalAgent runner: the kit's runner driven by the LangBot models adapter."""

from __future__ import annotations

from pathlib import Path

try:
    from runner_kit.config import ConfigSchema
    from runner_kit.runner import KitRunner
except ImportError as exc:  # packaged without the shared kit
    raise ImportError(
        "LocalAgent is missing its bundled runner_kit. Build the plugin from the langbot-agent-runners "
        "repository with `uv run runners build local-agent` (plain `lbp build` does not include the kit)."
    ) from exc

from local_agent.adapter import LocalAdapter


class LocalAgentRunner(KitRunner):
    """Answers with LangBot models."""

    adapter = LocalAdapter
    schema = ConfigSchema.from_yaml(Path(__file__).with_suffix(".yaml"))
