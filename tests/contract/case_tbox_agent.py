"""TboxAgent in the contract suite and the fault matrix, over the loopback fake Tbox."""

from __future__ import annotations

from typing import Any

from tests.contract.cases import PluginCase, Seen, faults_with, keyed_second_bot

KEY = "pat_contract_tbox_secret_0001"
APP = "202501010000000042"


def _start() -> Any:
    from tests.fakes.tbox import FakeTbox

    srv = FakeTbox(api_key=KEY, app_id=APP)
    srv.start()
    return srv


def _config(srv: Any, key: str = KEY) -> dict[str, Any]:
    return {"base-url": srv.base_url, "api-key": key, "app-id": APP}


def _no_usage(srv: Any) -> None:
    srv.include_usage = False  # no charge message: Tbox then says nothing about tokens


def _stall(srv: Any, pings: bool) -> None:
    srv.answer_tokens = ["The first part ", "and the rest."]
    # Tbox has no keep-alive event: "pings" are the empty text chunks it streams between pieces
    srv.fault = "stall_pings" if pings else "stall"


def _think(srv: Any, thoughts: list[str], tokens: list[str]) -> None:
    srv.thinking = thoughts  # thinking messages before the answer's header
    srv.answer_tokens = tokens


def _image_received(srv: Any) -> bool:
    return any(f.get("type") == "IMAGE" and f.get("fileId") in srv.uploads
               and srv.uploads[f["fileId"]][1].startswith(b"\x89PNG") for chat in srv.chats for f in chat.files)


def _seen(srv: Any) -> list[Seen]:
    out = []
    for r in srv.chat_requests():
        body = r.json()
        out.append(Seen(credential=r.headers.get("authorization", ""), user=body.get("userId", ""),
                        conversation=body.get("conversationId") or "", cookie=r.headers.get("cookie"),
                        sent=r.body.decode("utf-8", "replace")))
    return out


def cases() -> list[PluginCase]:
    # Tbox's ``event: error`` carries only a description (here a model failure), with no status or
    # code that says it is transient, so it is an ordinary upstream error, not a retryable outage.
    faults = faults_with(error_event=("upstream.error", False))
    return [
        PluginCase(
            plugin="tbox-agent",
            start_server=_start,
            config=_config,
            key=KEY,
            no_usage=_no_usage,
            faults=faults,
            image_received=_image_received,
            stall=_stall,
            think=_think,
            forget_sessions=lambda srv: srv.forget_conversations(),
            seen=_seen,
            second_bot=keyed_second_bot(_config),
            group_modes={"actor": "person", "hashed": "person", "conversation": "shared",
                         "legacy-session": "shared", "legacy-bot": "shared"},
            question="Tbox's chat API answers each message in full: an app cannot stop to ask the chat something "
                     "and wait for the answer",
        )
    ]
