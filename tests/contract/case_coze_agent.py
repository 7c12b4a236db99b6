"""CozeAgent in the contract suite and the fault matrix, over the loopback fake Coze."""

from __future__ import annotations

from typing import Any

from tests.contract.cases import PluginCase, Question, Seen, keyed_second_bot

KEY = "pat_contract_secret_token_0001"
BOT = "7400000000000000042"


def _start() -> Any:
    from tests.fakes.coze import FakeCoze

    srv = FakeCoze(api_key=KEY, bot_id=BOT)
    srv.start()
    return srv


def _config(srv: Any, key: str = KEY) -> dict[str, Any]:
    return {"api-base": srv.base_url, "api-key": key, "bot-id": BOT}


def _stall(srv: Any, pings: bool) -> None:
    srv.answer_tokens = ["The first part ", "and the rest."]
    # Coze has no keep-alive event: "pings" are the empty deltas a reasoning model streams between pieces
    srv.fault = "stall_pings" if pings else "stall"


def _think(srv: Any, thoughts: list[str], tokens: list[str]) -> None:
    srv.reasoning = thoughts  # reasoning_content deltas before the answer
    srv.answer_tokens = tokens


def _image_received(srv: Any) -> bool:
    for chat in srv.chats.values():
        if chat.question.get("content_type") != "object_string":
            continue
        for part in chat.parts:
            if part.get("type") == "image" and str(part.get("file_id")) in srv.uploads:
                return True
    return False


def _seen(srv: Any) -> list[Seen]:
    out = []
    for r in srv.chat_requests():
        body = r.json()
        out.append(Seen(credential=r.headers.get("authorization", "").removeprefix("Bearer "),
                        user=body.get("user_id", ""), conversation=r.query.get("conversation_id", ""),
                        cookie=r.headers.get("cookie"), sent=r.body.decode("utf-8", "replace")))
    return out


def _ask(srv: Any, on: bool) -> None:
    # the bot calls a local function (get_local_time) and the chat ends in requires_action: a free-text
    # question, so anything the asker types is the answer
    srv.requires_action = on


# received: the tool output Coze got for the chat that waits
QUESTION = Question(ask=_ask, answer="14:05", click={"values": {"answer": "14:05"}},
                    received=lambda srv: srv.tool_outputs[-1]["output"] if srv.tool_outputs else None,
                    expect="14:05", shown="Coze asks", free_text=True)


def cases() -> list[PluginCase]:
    # Coze's http_* bodies carry Coze codes that agree with the status (4000/4100/4101/4200/4302/
    # 4009/5000), and its error event carries code 5000 (server error, retry later), so the shared
    # expectations hold unchanged.
    return [
        PluginCase(
            plugin="coze-agent",
            start_server=_start,
            config=_config,
            key=KEY,
            image_received=_image_received,
            cancel_seen=lambda srv: bool(srv.cancelled),
            base_url_key="api-base",
            stall=_stall,
            think=_think,
            forget_sessions=lambda srv: srv.forget_conversations(),
            seen=_seen,
            ended=lambda srv: list(srv.deleted),
            second_bot=keyed_second_bot(_config),
            group_modes={"actor": "person", "hashed": "person", "conversation": "shared",
                         "legacy-session": "shared", "legacy-bot": "shared"},
            question=QUESTION,
        )
    ]

