"""LocalAgent plugin entry point."""

from __future__ import annotations

from langbot_plugin.api.definition.plugin import BasePlugin


class LocalAgentPlugin(BasePlugin):
    """LangBot's built-in agent loop on LangBot's own models, tools and knowledge bases."""

    async def initialize(self) -> None:
        pass
