"""A scripted live session on the kit's turn loop: turn i answers ``reply i: <text>`` slowly, so
a follow-up sent over the chat arrives while a turn is still running."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from runner_kit import events as ev
from runner_kit.inputs import UserInput
from runner_kit.runner import Adapter


class SteerProbeAdapter(Adapter):
    platform = "SteerProbe"
    session_key = "steer_probe.session"
    multi_turn = True

    def __init__(self, env):  # type: ignore[no-untyped-def]
        super().__init__(env)
        self._stop = asyncio.Event()

    async def turn(self, inp: UserInput, index: int) -> AsyncIterator[ev.Event]:
        self._stop.clear()
        delay = float(self.env.config.get("turn-seconds") or 3.0)
        words = f"reply {index}: {inp.text}".split(" ")
        yield ev.Text(words[0])
        for word in words[1:]:
            try:
                await asyncio.wait_for(self._stop.wait(), delay / len(words))
                return
            except TimeoutError:
                pass
            yield ev.Text(" " + word)
        yield ev.Usage(prompt_tokens=len(inp.text), completion_tokens=len(words))

    async def interrupt(self) -> None:
        self._stop.set()

    async def close(self) -> None:
        self._stop.set()
