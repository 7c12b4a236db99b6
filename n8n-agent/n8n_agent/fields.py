"""What the workflow receives in ``$json.body``.

Two spellings side by side, so a workflow built for either keeps working:

- this plugin's: ``chatInput``, ``sessionId``, ``userId``, ``userName``, ``conversationId``,
  ``message``, ``msgCreateTime``, ``action``, ``params`` (the pipeline's variables as one object);
- LangBot 4.10's built-in ``n8n-service-api`` runner's, at the top level
  (LangBot v4.10.8 ``src/langbot/pkg/provider/runners/n8nsvapi.py`` ``_call_webhook``: ``chatInput``,
  ``message``, ``user_message_text``, ``conversation_id``, ``session_id``, ``user_id``,
  ``msg_create_time``, then every query variable — ``pipeline/preproc/preproc.py`` sets
  ``launcher_type``, ``launcher_id``, ``sender_id``, ``session_id``, ``conversation_id``,
  ``msg_create_time``, ``group_name``, ``sender_name``, ``user_message_text``). A migrated workflow
  whose memory node reads ``{{ $json.body.session_id }}`` needs them: without, n8n's memory nodes
  throw "Key parameter is empty". The variables LangBot 4.11.2 still passes (``adapter.extra.params``,
  ``query_entry_adapter.build_params``: internal and secret-looking ones left out) go to the top level
  too, as 4.10 put them there.

Who is speaking comes from the host's identity of the run, never from a variable: ``session_id`` is
the ``sessionId`` (the key the workflow's memory is kept under), ``user_id`` the ``userId``,
``sender_id``/``sender_name``/``launcher_*``/``conversation_id`` the run's actor and conversation, so
a variable that happens to carry such a name cannot make one member speak as another. Under
``user-id-source: hashed`` n8n sees no IM user id at all: the sender and launcher ids become opaque
digests, in ``params`` as well.
"""

from __future__ import annotations

import hashlib
from typing import Any

# the variables that carry IM ids (preproc.py): hidden under hashed
_IM_ID_KEYS = ("launcher_id", "sender_id", "session_id", "user_id")


def _opaque(ctx: Any, value: str) -> str:
    """``lb_`` + a digest of ``value`` scoped to the bot and workspace (as the kit's hashed user is)."""
    conv = getattr(ctx, "conversation", None)
    meta = getattr(getattr(ctx, "runtime", None), "metadata", None) or {}
    bot = getattr(conv, "bot_id", None) or meta.get("bot_id") or ""
    workspace = getattr(conv, "workspace_id", None) or meta.get("workspace_id") or ""
    text = "\x1f".join(("langbot-n8n-launcher/1", str(workspace), str(bot), value))
    return "lb_" + hashlib.sha256(text.encode()).hexdigest()[:32]


def body(env: Any, session_id: str) -> dict[str, Any]:
    """The webhook body's fields (files are added by the caller)."""
    ctx, inp = env.ctx, env.input
    conv = getattr(ctx, "conversation", None)
    actor = getattr(ctx, "actor", None)
    event = getattr(ctx, "event", None)
    hashed = str(env.config.get("user-id-source") or "") == "hashed"
    user = str(env.user)
    text = inp.text
    # getattr(None, …, None) is None: a run without a conversation or an actor sends empty strings
    name = str(getattr(actor, "actor_name", None) or "")
    conversation_id = str(getattr(conv, "conversation_id", None) or "")
    launcher_type = str(getattr(conv, "launcher_type", None) or "")
    launcher_id = str(getattr(conv, "launcher_id", None) or "")
    sender_id = str(getattr(conv, "sender_id", None) or getattr(actor, "actor_id", None) or "")
    params = dict(inp.params)
    if hashed:
        sender_id = user
        launcher_id = _opaque(ctx, f"{launcher_type}_{launcher_id}") if launcher_id else ""
        hidden = {"launcher_id": launcher_id, "sender_id": sender_id, "session_id": session_id, "user_id": user}
        for key in _IM_ID_KEYS:
            if key in params:
                params[key] = hidden[key]
    created = inp.params.get("msg_create_time", getattr(event, "event_time", None))
    group_name = params.get("group_name")
    legacy = {
        "message": text,
        "user_message_text": text,
        "conversation_id": conversation_id,
        "session_id": session_id,
        "user_id": user,
        "msg_create_time": created,
        "launcher_type": launcher_type,
        "launcher_id": launcher_id,
        "sender_id": sender_id,
        "sender_name": name,
        "group_name": group_name if isinstance(group_name, str) else "",
    }
    current = {
        "chatInput": text,
        "sessionId": session_id,
        "action": "sendMessage",  # what n8n's own chat sends, so a Chat Trigger accepts it too
        "userId": user,
        "userName": name,
        "conversationId": conversation_id,
        "message": text,  # the field LangBot's built-in n8n runner sent the text in
        "msgCreateTime": created,
        "params": params,
    }
    # 4.10 put every variable at the top level; the fields above always win over one of the same name
    return {**params, **legacy, **current}
