"""SteerProbe: a test-only plugin for the end-to-end suite (never published)."""

from __future__ import annotations

from langbot_plugin.api.definition.plugin import BasePlugin


class SteerProbePlugin(BasePlugin):
    async def initialize(self) -> None:
        pass
