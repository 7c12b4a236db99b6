"""ClaudeCodeAgent plugin entry point."""

from __future__ import annotations

from langbot_plugin.api.definition.plugin import BasePlugin


class ClaudeCodeAgentPlugin(BasePlugin):
    """Binds Claude Code to LangBot as an agent runner."""

    async def initialize(self) -> None:
        pass
