"""SteerProbe runner."""

from __future__ import annotations

from pathlib import Path

from steer_probe.adapter import SteerProbeAdapter

from runner_kit.config import ConfigSchema
from runner_kit.runner import KitRunner


class SteerProbeRunner(KitRunner):
    adapter = SteerProbeAdapter
    schema = ConfigSchema.from_yaml(Path(__file__).with_suffix(".yaml"))
