"""ACPRunner plugin entry point."""

from __future__ import annotations

from langbot_plugin.api.definition.plugin import BasePlugin


class ACPRunnerPlugin(BasePlugin):
    """Binds ACP to LangBot as an agent runner."""

    async def initialize(self) -> None:
        pass
