"""Approvals from the chat on the real LangBot 4.11.2 (issue: a coding agent asks, the person who
asked it answers).

- the pipeline websocket (no buttons): the question arrives as a message while the run is open,
  the typed ``allow`` is claimed by the run as steering and answers it, the turn goes on;
- a webhook-mode ``lark-omni`` bot against the fake Lark API: the question arrives as a CardKit
  card with buttons, the run that asked ends, the click comes back as a new ``interaction.submitted``
  run that attaches to the waiting agent process, and the agent's answer is delivered to the Lark chat.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runners_cli.plugins import find
from tests.e2e.harness import FakeLark, Host, say, wait_for
from tests.fakes.dify import FakeDify

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

DIFY = find("dify-agent")


@pytest.fixture
def lark(tmp_path: Path) -> Iterator[FakeLark]:
    fake = FakeLark(tmp_path)
    try:
        yield fake
    finally:
        fake.stop()


def _replies(lark: FakeLark, after: int = 0) -> list[str]:
    """Texts of the messages the bot sent to the chat (im/v1 message create or reply bodies)."""
    out = []
    for call in lark.calls()[after:]:
        if "/im/v1/messages" in call["path"] and call["method"] == "POST" and isinstance(call["body"], dict):
            content = call["body"].get("content")
            out.append(content if isinstance(content, str) else json.dumps(content, ensure_ascii=False))
    return out


def test_a_lark_bot_answers_through_the_pipeline(langbot: Host, lark: FakeLark) -> None:
    """The plumbing the button round trip stands on: a Lark webhook message reaches the pipeline's
    runner and its answer goes back to the Lark chat."""
    langbot.install_plugin(DIFY)
    with FakeDify(api_key="app-lark-e2e") as dify:
        dify.answer_tokens = ["Hello ", "from ", "Dify."]
        pipeline = langbot.create_pipeline("lark-dify", {"base-url": dify.base_url, "api-key": "app-lark-e2e",
                                                         "app-type": "chat", "timeout": 30}, DIFY.runner_id)
        bot = langbot.create_lark_bot("lark-dify", pipeline, lark)
        resp = langbot.lark_webhook(bot, lark.message("hi"))
        assert resp.status_code == 200, resp.text
        wait_for("the answer in the Lark chat", lambda: any("from Dify" in t for t in _replies(lark)), 30)
    say(f"lark calls: {[c['path'] for c in lark.calls()]}")
