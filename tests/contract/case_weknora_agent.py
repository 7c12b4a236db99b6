"""WeKnoraAgent in the contract suite and the fault matrix, over the loopback fake WeKnora."""

from __future__ import annotations

from typing import Any

from tests.contract.cases import PluginCase, Seen, faults_with, keyed_second_bot

KEY = "sk-weknora-contract-secret-0001"


def _start() -> Any:
    from tests.fakes.weknora import FakeWeKnora

    srv = FakeWeKnora(api_key=KEY)
    srv.start()
    return srv


def _config(srv: Any, key: str = KEY) -> dict[str, Any]:
    return {"base-url": srv.base_url, "api-key": key, "app-type": "chat"}


def _answer(srv: Any, tokens: list[str], delay: float) -> None:
    srv.answer_tokens = tokens
    srv.token_delay = delay
    # real WeKnora chat streams carry no usage; the fake adds one so reading it is tested
    srv.include_usage = True


def _no_usage(srv: Any) -> None:
    srv.include_usage = False  # what a real WeKnora does


def _stall(srv: Any, pings: bool) -> None:
    srv.answer_tokens = ["The first part ", "and the rest."]
    # WeKnora has no keep-alive: "pings" are the empty thinking deltas it streams while reasoning
    srv.fault = "stall_pings" if pings else "stall"


def _think(srv: Any, thoughts: list[str], tokens: list[str]) -> None:
    srv.reasoning = thoughts
    srv.answer_tokens = tokens


def _image_received(srv: Any) -> bool:
    return any(
        str(img.get("data", "")).startswith("data:image/png;base64,")
        for r in srv.chat_requests()
        for img in (r.json().get("images") or [])
    )


def _seen(srv: Any) -> list[Seen]:
    out = []
    for r in srv.chat_requests():
        out.append(Seen(credential=r.headers.get("x-api-key", ""), user=r.headers.get("x-external-user-id", ""),
                        conversation=r.path.rsplit("/", 1)[-1], cookie=r.headers.get("cookie"),
                        sent=r.body.decode("utf-8", "replace")))
    return out


def cases() -> list[PluginCase]:
    # WeKnora's in-stream error carries only a message and the failed stage (no status, no code), so
    # a transient model outage cannot be told from a configuration problem: it is reported as
    # upstream.error with WeKnora's words, not retried blindly.
    faults = faults_with(error_event=("upstream.error", False))
    return [
        PluginCase(
            plugin="weknora-agent",
            start_server=_start,
            config=_config,
            key=KEY,
            answer=_answer,
            no_usage=_no_usage,
            faults=faults,
            image_received=_image_received,
            cancel_seen=lambda srv: bool(srv.stopped),
            stall=_stall,
            think=_think,
            forget_sessions=lambda srv: srv.forget_conversations(),
            seen=_seen,
            ended=lambda srv: list(srv.deleted),
            second_bot=keyed_second_bot(_config),
            group_modes={"actor": "person", "hashed": "person", "conversation": "shared",
                         "legacy-session": "shared", "legacy-bot": "shared"},
            question="WeKnora answers each question from its knowledge bases in full: nothing stops to ask the chat "
                     "and wait for an answer",
        )
    ]
