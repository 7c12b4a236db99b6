"""WeKnoraAgent plugin entry point."""

from __future__ import annotations

from langbot_plugin.api.definition.plugin import BasePlugin


class WeKnoraAgentPlugin(BasePlugin):
    """Binds WeKnora to LangBot as an agent runner."""

    async def initialize(self) -> None:
        pass
