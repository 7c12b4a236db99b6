"""A platform that works silently shows the person that it is still working (issue 33 item 14):
after ``STILL_WORKING_AFTER`` seconds with nothing shown, a line "<agent> is still working… (N s)" in
the person's language, renewed as long after, replaced by the answer and never part of it; the
agent's own progress line (a tool it runs) is never overwritten."""

from __future__ import annotations

import asyncio

import pytest

from runner_kit import events as ev
from runner_kit import runner as kit_runner
from runner_kit.config import ConfigSchema
from tests.helpers import deltas, final_text, rtype, run, scripted_runner, terminal

SCHEMA = ConfigSchema.from_items([
    {"name": "api-key", "type": "secret", "default": "sk-still-1"},
    {"name": "timeout", "type": "float", "default": 60},
])
EVERY = 0.05


@pytest.fixture(autouse=True)
def quick(monkeypatch):
    monkeypatch.setattr(kit_runner, "STILL_WORKING_AFTER", EVERY)


class Silent(kit_runner.Adapter):
    platform = "Slowpoke"
    session_key = "slowpoke.id"
    script: list = []

    async def stream(self):
        for step in type(self).script:
            if isinstance(step, float):
                await asyncio.sleep(step)
            else:
                yield step


async def answer(script, text="hello"):
    runner, host, _ = scripted_runner(Silent, SCHEMA, script=script)
    results = await run(runner, host, text)
    assert rtype(terminal(results)) == "run.completed"
    return results


async def test_a_silent_platform_says_it_is_still_working_and_the_answer_replaces_the_line():
    results = await answer([EVERY * 5.5, ev.Text("the answer")])
    shown = deltas(results)
    assert [d for d in shown if "Slowpoke is still working… (" in d], shown
    assert final_text(results) == "the answer"
    assert shown[-1] == "the answer", "the answer replaces the line"


async def test_the_line_speaks_the_persons_language():
    results = await answer([EVERY * 2.5, ev.Text("好的")], text="请帮我查一下")
    assert any("Slowpoke 仍在处理中……" in d for d in deltas(results))


async def test_a_quick_answer_shows_no_line_and_a_streaming_answer_is_never_interrupted_by_one():
    results = await answer([ev.Text("part one"), EVERY * 3, ev.Text(", part two")])
    assert not any("still working" in d for d in deltas(results))
    assert final_text(results) == "part one, part two"


async def test_the_agents_own_progress_line_is_kept():
    results = await answer([ev.Progress("searching the knowledge base"), EVERY * 3, ev.Text("found")])
    shown = deltas(results)
    assert any("searching the knowledge base" in d for d in shown)
    assert not any("still working" in d for d in shown)


def test_the_line_is_renewed_with_the_time_and_never_replaces_the_agents_own():
    from runner_kit.results import ResultBuilder

    builder = ResultBuilder("run-1")
    assert builder.still_working("X is still working… (20 s)") is not None
    assert builder.still_working("X is still working… (40 s)") is not None, "renewed"
    builder.set_progress("running the tool 'search'")
    assert builder.still_working("X is still working… (60 s)") is None
    builder.add_text("answer")
    assert builder.still_working("X is still working… (80 s)") is None
