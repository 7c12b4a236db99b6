"""A local LangBot host: implements the plugin-runtime ``call_action`` side of the published SDK
with the real host's response shapes and error strings (host-contract.md §3), records every call,
and applies ``state.updated`` results the way LangBot does. Used by ``runners chat`` (state in a
SQLite file) and by the test suite (state in memory).
"""

from __future__ import annotations

import base64
import json
import sqlite3
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langbot_plugin.api.entities.builtin.runner.context import RunnerContext
from langbot_plugin.entities.io.errors import ActionCallError

SCOPES = ("conversation", "actor", "subject", "runner")
MAX_STATE_VALUE = 256 * 1024


class StateStore:
    """Scope-keyed state rows; in memory, or in SQLite when given a path."""

    def __init__(self, path: str | Path | None = None):
        self._db = sqlite3.connect(str(path) if path else ":memory:")
        self._db.execute("CREATE TABLE IF NOT EXISTS state (scope_key TEXT, key TEXT, value TEXT, PRIMARY KEY (scope_key, key))")
        self._db.execute("CREATE TABLE IF NOT EXISTS storage (key TEXT PRIMARY KEY, value BLOB)")
        self._db.commit()

    def get(self, scope_key: str, key: str) -> Any:
        row = self._db.execute("SELECT value FROM state WHERE scope_key=? AND key=?", (scope_key, key)).fetchone()
        return json.loads(row[0]) if row else None

    def set(self, scope_key: str, key: str, value: Any) -> None:
        text = json.dumps(value, ensure_ascii=False)
        if len(text.encode()) > MAX_STATE_VALUE:
            raise ActionCallError(f"Value size {len(text.encode())} exceeds limit {MAX_STATE_VALUE}")
        self._db.execute("INSERT OR REPLACE INTO state VALUES (?,?,?)", (scope_key, key, text))
        self._db.commit()

    def delete(self, scope_key: str, key: str) -> bool:
        cur = self._db.execute("DELETE FROM state WHERE scope_key=? AND key=?", (scope_key, key))
        self._db.commit()
        return cur.rowcount > 0

    def keys(self, scope_key: str, prefix: str | None) -> list[str]:
        rows = self._db.execute("SELECT key FROM state WHERE scope_key=? ORDER BY key", (scope_key,)).fetchall()
        return [r[0] for r in rows if not prefix or r[0].startswith(prefix)]

    def snapshot(self, scope_key: str) -> dict[str, Any]:
        rows = self._db.execute("SELECT key, value FROM state WHERE scope_key=?", (scope_key,)).fetchall()
        return {k: json.loads(v) for k, v in rows}

    def reset(self, scope_key: str) -> None:
        self._db.execute("DELETE FROM state WHERE scope_key=?", (scope_key,))
        self._db.commit()

    # plugin storage
    def storage_get(self, key: str) -> bytes | None:
        row = self._db.execute("SELECT value FROM storage WHERE key=?", (key,)).fetchone()
        return bytes(row[0]) if row else None

    def storage_set(self, key: str, value: bytes) -> None:
        self._db.execute("INSERT OR REPLACE INTO storage VALUES (?,?)", (key, value))
        self._db.commit()

    def storage_delete(self, key: str) -> None:
        self._db.execute("DELETE FROM storage WHERE key=?", (key,))
        self._db.commit()

    def storage_keys(self) -> list[str]:
        return [r[0] for r in self._db.execute("SELECT key FROM storage ORDER BY key").fetchall()]

    def close(self) -> None:
        self._db.close()


@dataclass
class Identity:
    """Who is talking: the fields a host derives scope keys and the context from."""

    conversation_id: str | None = "conv-1"
    actor_type: str = "user"
    actor_id: str | None = "u-1"
    actor_name: str | None = "Tester"
    bot_id: str | None = "bot-1"
    workspace_id: str | None = "ws-1"
    launcher_type: str | None = None
    launcher_id: str | None = None
    thread_id: str | None = None


@dataclass
class Call:
    action: str
    data: dict[str, Any]


@dataclass
class LocalHost:
    """The host side of the plugin runtime connection."""

    store: StateStore = field(default_factory=StateStore)
    runner_id: str = "plugin:langbot-team/Test/default"
    calls: list[Call] = field(default_factory=list)
    steering: deque[dict[str, Any]] = field(default_factory=deque)
    history: list[dict[str, Any]] = field(default_factory=list)
    prompt: list[dict[str, Any]] = field(default_factory=list)
    tool_results: dict[str, Any] = field(default_factory=dict)
    kb_results: list[dict[str, Any]] = field(default_factory=list)
    _runs: dict[str, Identity] = field(default_factory=dict)

    # --- context ----------------------------------------------------------------------------

    def scope_key(self, ident: Identity, scope: str) -> str | None:
        if scope == "conversation":
            return f"conv:{ident.conversation_id}:{ident.thread_id or ''}" if ident.conversation_id else None
        if scope == "actor":
            return f"actor:{ident.actor_type}:{ident.actor_id}" if ident.actor_id else None
        if scope == "subject":
            return None
        return "runner"

    def make_context(
        self,
        text: str = "hello",
        *,
        config: dict[str, Any] | None = None,
        identity: Identity | None = None,
        timeout: float | None = None,
        contents: list[dict[str, Any]] | None = None,
        attachments: list[dict[str, Any]] | None = None,
        params: dict[str, Any] | None = None,
        steering: bool = False,
        deadline_at: float | None = None,
        surface: str = "platform",
    ) -> RunnerContext:
        """Build a RunnerContext the way LangBot 4.11.2's context builder does for a pipeline run."""
        ident = identity or Identity()
        config = dict(config or {})
        run_id = str(uuid.uuid4())
        self._runs[run_id] = ident
        # like the real host: a missing timeout is 300 s; 0, negative, blank or unparsable is no deadline
        t = config.get("timeout", 300.0) if timeout is None else timeout
        try:
            t = float(t) if t is not None else 0.0
        except (TypeError, ValueError):
            t = 0.0
        if deadline_at is None and t > 0:
            deadline_at = time.time() + t
        state: dict[str, dict[str, Any]] = {}
        for scope in SCOPES:
            sk = self.scope_key(ident, scope)
            state[scope] = self.store.snapshot(sk) if sk else {}
        if ident.conversation_id:
            state["conversation"].setdefault("external.conversation_id", ident.conversation_id)
        conv = None
        if ident.conversation_id:
            conv = {
                "conversation_id": ident.conversation_id,
                "thread_id": ident.thread_id,
                "launcher_type": ident.launcher_type,
                "launcher_id": ident.launcher_id,
                "sender_id": ident.actor_id,
                "bot_id": ident.bot_id,
                "workspace_id": ident.workspace_id,
            }
        data = {
            "run_id": run_id,
            "trigger": {"type": "message.received", "source": "platform", "timestamp": int(time.time())},
            "event": {
                "event_id": str(uuid.uuid4()),
                "event_type": "message.received",
                "event_time": int(time.time()),
                "source": "platform",
            },
            "conversation": conv,
            "actor": {"actor_type": ident.actor_type, "actor_id": ident.actor_id, "actor_name": ident.actor_name}
            if ident.actor_id
            else None,
            "input": {
                "text": text,
                "contents": contents if contents is not None else ([{"type": "text", "text": text}] if text else []),
                "attachments": attachments or [],
            },
            # a pipeline delivers automatically; agent debug (surface webui) does not
            "delivery": {"surface": surface, "automatic_reply": surface == "platform", "supports_streaming": True},
            "resources": {"storage": {"plugin_storage": True, "workspace_storage": False}},
            "context": {
                "conversation_id": ident.conversation_id,
                "available_apis": {
                    "state": True,
                    "storage": True,
                    "history_page": bool(ident.conversation_id),
                    "steering_pull": steering and bool(ident.conversation_id),
                    "prompt_get": True,
                },
            },
            "state": state,
            "runtime": {
                "langbot_version": "4.11.2",
                "deadline_at": deadline_at,
                "metadata": {"bot_id": ident.bot_id, "workspace_id": ident.workspace_id, "streaming_supported": True},
            },
            "variables": {"query_id": 1},
            "config": config,
            "adapter": {"extra": {"params": params or {}}},
        }
        return RunnerContext.model_validate(data)

    # --- result side (what the orchestrator does with results) -----------------------------

    def apply_result(self, run_id: str, result: Any) -> None:
        """Persist ``state.updated`` like LangBot (invalid scopes/identities are dropped)."""
        rtype = getattr(result.type, "value", result.type)
        if rtype != "state.updated":
            return
        ident = self._runs.get(run_id)
        data = result.data
        scope = data.get("scope")
        if ident is None or scope not in SCOPES:
            return
        sk = self.scope_key(ident, scope)
        if sk is None:
            return
        try:
            self.store.set(sk, data["key"], data.get("value"))
        except ActionCallError:
            return

    def reset_conversation(self, identity: Identity | None = None) -> None:
        sk = self.scope_key(identity or Identity(), "conversation")
        if sk:
            self.store.reset(sk)

    # --- the plugin-runtime handler interface --------------------------------------------------

    async def call_action(self, action: Any, data: dict[str, Any], timeout: float = 15.0) -> dict[str, Any]:
        name = getattr(action, "value", action)
        self.calls.append(Call(name, dict(data)))
        run_id = data.get("run_id")
        if not run_id:
            raise ActionCallError("run_id is required")
        ident = self._runs.get(run_id)
        if ident is None:
            raise ActionCallError(f"Run session {run_id} not found or expired")
        if name.startswith("state_"):
            scope = data.get("scope")
            if scope not in SCOPES:
                raise ActionCallError(f'Scope "{scope}" is not enabled by binding policy')
            sk = self.scope_key(ident, scope)
            if sk is None:
                raise ActionCallError(f'Scope key not available for scope "{scope}"')
            if name == "state_get":
                return {"value": self.store.get(sk, data["key"])}
            if name == "state_set":
                self.store.set(sk, data["key"], data.get("value"))
                return {"success": True}
            if name == "state_delete":
                return {"success": self.store.delete(sk, data["key"])}
            if name == "state_list":
                keys = self.store.keys(sk, data.get("prefix"))
                limit = min(int(data.get("limit") or 100), 100)
                return {"keys": keys[:limit], "has_more": len(keys) > limit}
        if name == "set_plugin_storage":
            self.store.storage_set(data["key"], base64.b64decode(data["value_base64"]))
            return {}
        if name == "get_plugin_storage":
            value = self.store.storage_get(data["key"])
            if value is None:
                raise ActionCallError(f"Plugin storage key {data['key']} not found")
            return {"value_base64": base64.b64encode(value).decode()}
        if name == "get_plugin_storage_keys":
            return {"keys": self.store.storage_keys()}
        if name == "delete_plugin_storage":
            self.store.storage_delete(data["key"])
            return {}
        if name == "steering_pull":
            limit = data.get("limit")
            if limit is not None and int(limit) <= 0:
                raise ActionCallError("limit must be > 0")
            n = 1 if data.get("mode") in ("one", "one-at-a-time") else min(int(limit or 100), 100)
            items = []
            while self.steering and len(items) < n:
                items.append(self.steering.popleft())
            return {"items": items}
        if name == "history_page":
            limit = int(data.get("limit") or 50)
            items = self.history[-limit:]
            return {"items": items, "next_cursor": None, "prev_cursor": None, "has_more": len(self.history) > limit}
        if name == "get_prompt":
            return {"prompt": list(self.prompt)}
        if name == "call_tool":
            tool = data.get("tool_name")
            if tool not in self.tool_results:
                raise ActionCallError(f"Tool {tool} not found")
            return {"result": self.tool_results[tool]}
        if name == "retrieve_knowledge_base":
            return {"results": list(self.kb_results)}
        raise ActionCallError(f"Unsupported action: {name}")

    def call_action_generator(self, action: Any, data: dict[str, Any], timeout: float = 15.0):
        raise ActionCallError("LLM streaming is not available in the local host")

    def queue_steering(self, run_ctx: RunnerContext, text: str) -> None:
        """Claim a follow-up message for an active run (what LangBot does on a new message)."""
        self.steering.append(
            {
                "claimed_run_id": run_ctx.run_id,
                "runner_id": self.runner_id,
                "claimed_at": int(time.time()),
                "event": {"event_id": str(uuid.uuid4()), "event_type": "message.received", "source": "platform"},
                "input": {"text": text, "contents": [{"type": "text", "text": text}]},
            }
        )


async def run_and_collect(runner: Any, host: LocalHost, ctx: RunnerContext) -> list[Any]:
    """Invoke a bound runner, apply its results to the host, and return them all."""
    out = []
    async for result in runner.invoke(ctx):
        host.apply_result(ctx.run_id, result)
        out.append(result)
    return out
