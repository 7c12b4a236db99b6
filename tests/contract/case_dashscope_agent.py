"""DashScopeAgent in the contract suite and the fault matrix, over tests/fakes/dashscope.py."""

from __future__ import annotations

import json
from typing import Any

from tests.contract.cases import PluginCase, Seen

KEY = "sk-contract-secret-key"
APP = "app-contract"


def _start() -> Any:
    from tests.fakes.dashscope import FakeDashScope

    srv = FakeDashScope(api_key=KEY, app_id=APP)
    srv.start()
    return srv


def _config(srv: Any, key: str = KEY) -> dict[str, Any]:
    return {"base-url": srv.base_url, "api-key": key, "app-id": APP, "app-type": "agent"}


def _answer(srv: Any, tokens: list[str], delay: float) -> None:
    srv.mode = "agent"
    srv.answer_tokens = tokens
    srv.token_delay = delay


def _stall(srv: Any, pings: bool) -> None:
    srv.mode = "agent"
    srv.answer_tokens = ["The first part ", "and the rest."]
    srv.fault = "stall_pings" if pings else "stall"


def _think(srv: Any, thoughts: list[str], tokens: list[str]) -> None:
    srv.mode = "agent"  # an agent app on a reasoning model: reasoning thoughts, then the answer
    srv.reasoning = thoughts
    srv.answer_tokens = tokens


def _seen(srv: Any) -> list[Seen]:
    # DashScope has no end-user field: a session is the only thing that scopes a conversation, so
    # the "user" a request speaks as is the session it ends up in (its own new one, or the one it continues)
    return [
        Seen(credential=c.credential, user=c.session_out or c.session_in, conversation=c.session_in,
             cookie=c.headers.get("cookie"), sent=json.dumps(c.body, ensure_ascii=False))
        for c in srv.calls
    ]


def cases() -> list[PluginCase]:
    return [
        PluginCase(
            plugin="dashscope-agent",
            start_server=_start,
            config=_config,
            key=KEY,
            answer=_answer,
            stall=_stall,
            think=_think,
            forget_sessions=lambda srv: srv.forget_conversations(),
            seen=_seen,
            # no second_bot: the two-bots cell checks that each bot's *user id* reaches the platform,
            # and DashScope takes none; credential and cookie isolation between two bots is checked in
            # tests/plugins/test_dashscope_agent.py instead
            second_bot=None,
            # "hashed" is left out: it differs from "actor" only in the user id sent upstream, and
            # DashScope is sent none (the group behaviour of hashed is tested in the plugin tests)
            group_modes={"actor": "person", "conversation": "shared", "legacy-session": "shared",
                         "legacy-bot": "shared"},
            question="a DashScope application call always answers in full: an app cannot stop to ask the chat "
                     "something and wait for the answer",
        )
    ]
