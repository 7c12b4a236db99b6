"""What the chat commands' run through the real LangBot 4.11.2 found (tests/e2e/test_chat_commands_e2e.py),
kept in the default suite.

The day's totals (``/cost``'s "Today" line, ``daily-budget-*``) are kept in runner scope, which
LangBot keeps per binding (``runner_state.binding_identity`` = ``agent_<pipeline uuid>_<runner>``),
and in the plugin process beside it. The process copy was keyed by platform, bot id and workspace
only; every pipeline's WebUI chat carries the one bot id ``websocket-proxy-bot``, so the second
pipeline a member tried showed the first one's turns as its own ("130 tokens in 2 turns" after one
turn) and a day budget used up in one pipeline refused the other. LangBot gives a runner no binding
id: the runner config (which an owner sets per binding) now tells bindings apart.
"""

from __future__ import annotations

import uuid
from types import SimpleNamespace
from typing import Any

from runner_kit import chat_commands as cc

WEBSOCKET_BOT = "websocket-proxy-bot"


def _ctx(config: dict[str, Any], runner_state: dict[str, Any] | None = None, bot: str = WEBSOCKET_BOT) -> Any:
    """A run's context as LangBot 4.11.2 builds it for a WebUI websocket chat of one pipeline."""
    conv = SimpleNamespace(bot_id=bot, workspace_id="ws-1", conversation_id=f"person_websocket_{uuid.uuid4().hex}",
                           launcher_type="person")
    return SimpleNamespace(conversation=conv, config=config, state=SimpleNamespace(runner=runner_state or {},
                                                                                  conversation={}))


def _config(workspace: str, **extra: Any) -> dict[str, Any]:
    return {"executable": "claude", "workspace": workspace, "api-key": "sk-x", **extra}


USAGE = {"total_tokens": 130, "cost_usd": 0.4}


def test_a_pipeline_does_not_count_another_pipelines_turns_today() -> None:
    first, second = _config(f"/srv/a-{uuid.uuid4().hex}"), _config(f"/srv/b-{uuid.uuid4().hex}")
    cc.Day(_ctx(first), "claude-code").add(USAGE)
    day = cc.Day(_ctx(second), "claude-code").totals
    assert (day["turns"], day["tokens"]) == (0, 0), day
    shown = cc.cost_text(cc.Book("k"), None, day, second)
    assert "Today (UTC, all chats of this bot): 0 turns." in shown, shown


def test_another_pipelines_spending_does_not_use_up_this_ones_day_budget() -> None:
    first = _config(f"/srv/a-{uuid.uuid4().hex}", **{"daily-budget-usd": 0.5})
    second = _config(f"/srv/b-{uuid.uuid4().hex}", **{"daily-budget-usd": 0.5})
    cc.Day(_ctx(first), "claude-code").add({**USAGE, "cost_usd": 0.6})
    assert cc.over_budget(first, None, cc.Day(_ctx(first), "claude-code").totals) is not None
    assert cc.over_budget(second, None, cc.Day(_ctx(second), "claude-code").totals) is None


def test_one_pipelines_runs_still_add_up_in_the_process() -> None:
    """What the process copy is for: two runs of one binding that started from the same stored
    snapshot (concurrent runs) both count."""
    config = _config(f"/srv/c-{uuid.uuid4().hex}")
    stored = {"day": cc.today(), "turns": 1, "tokens": 100, "cost": 0.1, "costed": True}
    a, b = cc.Day(_ctx(config, {cc.DAY_KEY: stored}), "claude-code"), cc.Day(_ctx(config, {cc.DAY_KEY: stored}), "claude-code")
    a.add(USAGE)
    total = b.add(USAGE)
    assert (total["turns"], total["tokens"]) == (3, 360), total
    again = cc.Day(_ctx(dict(config), {cc.DAY_KEY: stored}), "claude-code").totals
    assert (again["turns"], again["tokens"]) == (3, 360), again


def test_the_stored_day_still_wins_over_a_smaller_process_count() -> None:
    """Another process (or an earlier start) counted more for this binding: what is stored counts."""
    config = _config(f"/srv/d-{uuid.uuid4().hex}")
    cc.Day(_ctx(config), "claude-code").add(USAGE)
    stored = {"day": cc.today(), "turns": 9, "tokens": 9000, "cost": 2.0, "costed": True}
    day = cc.Day(_ctx(config, {cc.DAY_KEY: stored}), "claude-code").totals
    assert (day["turns"], day["tokens"]) == (9, 9000), day
