"""ev.State: an adapter's value for LangBot's persistent state reaches the host as one
``state.updated`` result in the scope it names, and the next run's context carries it."""

from __future__ import annotations

from collections.abc import AsyncIterator

from runner_kit import events as ev
from runner_kit.config import ConfigSchema
from runner_kit.runner import Adapter
from tests.helpers import Identity, final_text, rtype, run, scripted_runner

SCHEMA = ConfigSchema.from_items([{"name": "timeout", "type": "float", "default": 30}])


class Remembers(Adapter):
    platform = "Test"

    async def stream(self) -> AsyncIterator[ev.Event]:
        seen = (self.env.ctx.state.conversation or {}).get("test.note")
        yield ev.State("test.note", {"runs": (seen or {}).get("runs", 0) + 1})
        yield ev.State("test.pref", "terse", scope="actor")
        yield ev.Text(f"seen before: {seen}")


async def test_state_event_becomes_state_updated_and_persists():
    runner, host, _ = scripted_runner(Remembers, SCHEMA)
    ident = Identity(conversation_id="c-state")
    first = await run(runner, host, "hi", identity=ident)
    updates = [(r.data["scope"], r.data["key"], r.data["value"]) for r in first if rtype(r) == "state.updated"]
    assert updates == [("conversation", "test.note", {"runs": 1}), ("actor", "test.pref", "terse")]
    assert final_text(first) == "seen before: None"
    second = await run(runner, host, "again", identity=ident)
    assert final_text(second) == "seen before: {'runs': 1}"
