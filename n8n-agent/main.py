"""N8nAgent plugin entry point."""

from __future__ import annotations

from langbot_plugin.api.definition.plugin import BasePlugin


class N8nAgentPlugin(BasePlugin):
    """Binds n8n to LangBot as an agent runner."""

    async def initialize(self) -> None:
        pass
