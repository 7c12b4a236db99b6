"""A local LangBot host: implements the plugin-runtime ``call_action`` side of the published SDK
with the real host's response shapes and error strings (host-contract.md §3), records every call,
applies ``state.updated`` results the way LangBot does, and keeps each conversation's transcript
(every user message when its run starts, every run's first completed assistant message) that
``history_page`` serves in LangBot's shape. Used by ``runners chat`` (state and transcript in a
SQLite file, so the next process sees earlier turns) and by the test suite (in memory).

It also stands in for LangBot's model layer, tool manager and knowledge bases: models
(``add_model``: ``OpenAIChatModel``, ``LocalReranker``), tools (``add_tool``) and knowledge bases
(``add_knowledge_base``) from ``runners_cli.host_models`` answer ``invoke_llm``,
``invoke_llm_stream``, ``count_tokens``, ``invoke_rerank``, ``call_tool``, ``get_tool_detail`` and
``retrieve_knowledge_base``. ``make_context`` grants a run what LangBot's resource builder would for
its config, and every such action is checked against those frozen grants with LangBot's texts.
"""

from __future__ import annotations

import base64
import json
import sqlite3
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langbot_plugin.api.entities.builtin.runner.context import RunnerContext
from langbot_plugin.entities.io.errors import ActionCallError

from .host_models import LocalKnowledgeBase, LocalTool

SCOPES = ("conversation", "actor", "subject", "runner")
MAX_STATE_VALUE = 256 * 1024
# LangBot 4.11.2's TranscriptStore: content is cut to 4000 characters, a page holds at most 100 items
MAX_TRANSCRIPT_CONTENT = 4000
HISTORY_HARD_LIMIT = 100


class StateStore:
    """Scope-keyed state rows; in memory, or in SQLite when given a path."""

    def __init__(self, path: str | Path | None = None):
        self._db = sqlite3.connect(str(path) if path else ":memory:")
        self._db.execute("CREATE TABLE IF NOT EXISTS state (scope_key TEXT, key TEXT, value TEXT, PRIMARY KEY (scope_key, key))")
        self._db.execute("CREATE TABLE IF NOT EXISTS storage (key TEXT PRIMARY KEY, value BLOB)")
        # the conversation transcript LangBot keeps and serves through history_page; seq is the
        # row id (one counter for all conversations, like LangBot's), the cursor is str(seq).
        # ``seeded`` rows were handed to ``LocalHost.history`` by a test and belong to every scope.
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS transcript (seq INTEGER PRIMARY KEY AUTOINCREMENT, transcript_id TEXT,"
            " event_id TEXT, conversation_id TEXT, bot_id TEXT, workspace_id TEXT, thread_id TEXT, role TEXT,"
            " item_type TEXT, content TEXT, content_json TEXT, attachment_refs_json TEXT, run_id TEXT,"
            " runner_id TEXT, created_at INTEGER, metadata_json TEXT, seeded INTEGER DEFAULT 0)"
        )
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

    # conversation transcript (LangBot's TranscriptStore)
    def append_transcript(self, item: dict[str, Any], *, seeded: bool = False) -> int:
        """Store one transcript item (a TranscriptItem-shaped dict); returns its seq."""
        content = item.get("content")
        if isinstance(content, str) and len(content) > MAX_TRANSCRIPT_CONTENT:
            content = content[: MAX_TRANSCRIPT_CONTENT - 3] + "..."

        def dumped(key: str) -> str | None:
            value = item.get(key)
            return json.dumps(value, ensure_ascii=False) if value else None

        cur = self._db.execute(
            "INSERT INTO transcript (seq, transcript_id, event_id, conversation_id, bot_id, workspace_id, thread_id,"
            " role, item_type, content, content_json, attachment_refs_json, run_id, runner_id, created_at,"
            " metadata_json, seeded) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                item.get("seq") if seeded else None,
                item.get("transcript_id") or str(uuid.uuid4()),
                item.get("event_id") or str(uuid.uuid4()),
                item.get("conversation_id"),
                item.get("bot_id"),
                item.get("workspace_id"),
                item.get("thread_id"),
                item.get("role"),
                item.get("item_type") or "message",
                content,
                dumped("content_json"),
                dumped("attachment_refs"),
                item.get("run_id"),
                item.get("runner_id"),
                int(item.get("created_at") or time.time()),
                dumped("metadata"),
                int(seeded),
            ),
        )
        self._db.commit()
        return int(cur.lastrowid or 0)

    def page_transcript(
        self,
        scope: dict[str, str | None],
        *,
        before_seq: int | None = None,
        after_seq: int | None = None,
        limit: int = 50,
        direction: str = "backward",
        include_attachments: bool = False,
    ) -> tuple[list[dict[str, Any]], int | None, int | None, bool]:
        """LangBot's ``page_transcript``: (items, next_seq, prev_seq, has_more). ``scope`` holds
        conversation_id/bot_id/workspace_id/thread_id (thread compared strictly, NULL included);
        Without a cursor both directions list newest first, as LangBot does."""
        limit = min(int(limit), HISTORY_HARD_LIMIT)
        parts: list[str] = ["conversation_id=?"]
        args: list[Any] = [scope["conversation_id"]]
        for column in ("bot_id", "workspace_id", "thread_id"):
            value = scope.get(column)
            if value is not None:
                parts.append(f"{column}=?")
                args.append(value)
            elif column == "thread_id":  # LangBot compares the thread strictly
                parts.append("thread_id IS NULL")
        where = [f"(seeded=1 OR ({' AND '.join(parts)}))"]
        if direction == "backward" and before_seq is not None:
            where.append("seq<?")
            args.append(before_seq)
            order = "DESC"
        elif direction == "forward" and after_seq is not None:
            where.append("seq>?")
            args.append(after_seq)
            order = "ASC"
        else:
            order = "DESC"
        found = self._transcript_rows(
            f"SELECT * FROM transcript WHERE {' AND '.join(where)} ORDER BY seq {order} LIMIT ?", (*args, limit + 1)
        )
        items = [_transcript_item(row, include_attachments) for row in found[:limit]]
        has_more = len(found) > limit
        next_seq = items[-1]["seq"] if items and has_more else None
        prev_seq = items[0]["seq"] if items else None
        return items, next_seq, prev_seq, has_more

    def transcript(self) -> list[dict[str, Any]]:
        """Every stored transcript item, oldest first."""
        return [_transcript_item(row, True) for row in self._transcript_rows("SELECT * FROM transcript ORDER BY seq")]

    def _transcript_rows(self, sql: str, args: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        cur = self._db.cursor()
        cur.row_factory = sqlite3.Row
        return [dict(row) for row in cur.execute(sql, args).fetchall()]

    def reset_transcript(self, conversation_id: str | None = None) -> None:
        """Forget one conversation's transcript (all of it when None), like a LangBot context reset."""
        if conversation_id is None:
            self._db.execute("DELETE FROM transcript")
        else:
            self._db.execute("DELETE FROM transcript WHERE conversation_id=?", (conversation_id,))
        self._db.commit()

    def close(self) -> None:
        self._db.close()


def _redacted(item: Any, *fields: str) -> Any:
    """LangBot keeps no inline bytes in the transcript: base64 bodies (and an attachment's
    ``content``) become None with ``content_redacted: true``."""
    if hasattr(item, "model_dump"):
        item = item.model_dump(mode="json")
    if not isinstance(item, dict):
        return item
    out = dict(item)
    for key in (*fields, "image_base64", "file_base64", "base64"):
        if out.get(key):
            out[key] = None
            out["content_redacted"] = True
    url = out.get("image_url")
    if isinstance(url, dict) and str(url.get("url", "")).startswith("data:"):
        out["image_url"] = {**url, "url": None}
        out["content_redacted"] = True
    return out


def _transcript_item(row: dict[str, Any], include_attachments: bool) -> dict[str, Any]:
    """A transcript row as LangBot's ``_row_to_dict`` returns it (the SDK's TranscriptItem)."""

    def loaded(column: str) -> Any:
        return json.loads(row[column]) if row.get(column) else None

    return {
        "transcript_id": row["transcript_id"],
        "event_id": row["event_id"],
        "bot_id": row["bot_id"],
        "workspace_id": row["workspace_id"],
        "conversation_id": row["conversation_id"],
        "thread_id": row["thread_id"],
        "role": row["role"],
        "item_type": row["item_type"],
        "content": row["content"],
        "content_json": loaded("content_json"),
        "seq": row["seq"],
        "cursor": str(row["seq"]),
        "created_at": row["created_at"],
        "metadata": loaded("metadata_json") or {},
        "attachment_refs": (loaded("attachment_refs_json") or []) if include_attachments else [],
    }


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
    prompt: list[dict[str, Any]] = field(default_factory=list)
    tool_results: dict[str, Any] = field(default_factory=dict)
    kb_results: list[dict[str, Any]] = field(default_factory=list)
    #: LLM and rerank models by id (``add_model``), host tools by name, knowledge bases by id
    models: dict[str, Any] = field(default_factory=dict)
    tools: dict[str, LocalTool] = field(default_factory=dict)
    knowledge_bases: dict[str, LocalKnowledgeBase] = field(default_factory=dict)
    #: False: ``count_tokens`` fails like a provider without token counting
    count_tokens_supported: bool = True
    #: SkillResource dicts (``skill_name``, ``display_name``, ``description``) granted to every run
    skills: list[dict[str, Any]] = field(default_factory=list)
    _runs: dict[str, Identity] = field(default_factory=dict)
    _grants: dict[str, dict[str, dict[str, set[str]]]] = field(default_factory=dict)
    _configs: dict[str, dict[str, Any]] = field(default_factory=dict)
    _answered: set[str] = field(default_factory=set)  # runs whose assistant message is in the transcript
    #: interaction requests runs asked for (``action.requested`` / ``interaction.requested``), in order
    interactions: list[dict[str, Any]] = field(default_factory=list)
    #: active runs that may take follow-ups (``steering=True``), oldest first, until their terminal
    #: result is applied (``end_run``): what LangBot's session registry picks a steering target from
    _steerable: dict[str, RunnerContext] = field(default_factory=dict)

    # --- conversation transcript (what history_page serves) --------------------------------

    @property
    def history(self) -> list[dict[str, Any]]:
        """Every transcript item the host holds, oldest first (the SQLite file's, when there is one)."""
        return self.store.transcript()

    @history.setter
    def history(self, items: list[dict[str, Any]]) -> None:
        """Replace the transcript with ``items`` (TranscriptItem dicts; ``seq`` kept when given).
        Items without a ``conversation_id`` are served to every conversation."""
        self.store.reset_transcript()
        for item in items:
            self.store.append_transcript(item, seeded=not item.get("conversation_id"))

    @staticmethod
    def _transcript_scope(ident: Identity) -> dict[str, str | None]:
        return {"conversation_id": ident.conversation_id, "bot_id": ident.bot_id,
                "workspace_id": ident.workspace_id, "thread_id": ident.thread_id}

    def _record_user(self, ident: Identity, event_id: str, text: str, contents: list[Any], attachments: list[Any]) -> None:
        """LangBot writes the user's message before it invokes the runner, so a run's own message
        is already on the page it reads."""
        self.store.append_transcript({
            **self._transcript_scope(ident), "event_id": event_id, "role": "user", "content": text,
            "content_json": {"role": "user", "content": [_redacted(c) for c in contents]},
            "attachment_refs": [_redacted(a, "content") for a in attachments],
            "metadata": {"actor_type": ident.actor_type if ident.actor_id else None, "actor_id": ident.actor_id},
        })

    def _record_assistant(self, run_id: str, ident: Identity, result: Any, rtype: str) -> None:
        """The first completed assistant message of a run (``message.completed``, or a
        ``run.completed`` carrying one) goes into the transcript, once, as LangBot's orchestrator does."""
        message = (result.data or {}).get("message") if isinstance(result.data, dict) else None
        if rtype not in ("message.completed", "run.completed") or not message or run_id in self._answered:
            return
        if not isinstance(message, dict):
            message = message.model_dump(mode="json") if hasattr(message, "model_dump") else {"content": str(message)}
        self._answered.add(run_id)
        body = message.get("content")
        if isinstance(body, list):
            texts = [c.get("text", "") for c in body if isinstance(c, dict) and c.get("type") == "text"]
            body = " ".join(texts) if texts else None
        elif not isinstance(body, str):
            body = None
        self.store.append_transcript({
            **self._transcript_scope(ident), "role": "assistant", "content": body, "content_json": message,
            "run_id": run_id, "runner_id": self.runner_id, "metadata": {"run_id": run_id, "runner_id": self.runner_id},
        })

    # --- models, tools, knowledge bases -----------------------------------------------------

    def add_model(self, model: Any) -> None:
        """Register an LLM model (``OpenAIChatModel``) or a rerank model (``LocalReranker``)."""
        self.models[model.model_id] = model

    def add_tool(self, tool: LocalTool) -> None:
        self.tools[tool.name] = tool

    def add_knowledge_base(self, kb: LocalKnowledgeBase) -> None:
        self.knowledge_bases[kb.kb_id] = kb

    def _model_of(self, model_id: Any, kind: str) -> Any:
        model = self.models.get(model_id) if isinstance(model_id, str) else None
        return model if model is not None and getattr(model, "model_type", None) == kind else None

    def granted_resources(self, config: dict[str, Any]) -> dict[str, Any]:
        """What LangBot's resource builder grants a run of this config from what the host has:
        the LLM models named by ``model`` (an id, or ``{"primary", "fallbacks"}``), the
        ``rerank-model``, every host tool with ``enable-all-tools`` (else those in ``tools``), the
        ``knowledge-bases``, and the host's skills. Ids the host does not know are left out."""
        selected = config.get("model")
        if isinstance(selected, dict):
            fallbacks = selected.get("fallbacks")
            names = [selected.get("primary"), *(fallbacks if isinstance(fallbacks, list) else [])]
        else:
            names = [selected]
        models: list[dict[str, Any]] = []
        for name in dict.fromkeys(n for n in names if isinstance(n, str)):
            if self._model_of(name, "llm") is not None:
                models.append({"model_id": name, "model_type": "llm", "provider": self.models[name].provider,
                               "operations": ["invoke", "stream", "count_tokens"]})
        reranker = self._model_of(config.get("rerank-model"), "rerank")
        if reranker is not None:
            models.append({"model_id": reranker.model_id, "model_type": "rerank", "provider": reranker.provider,
                           "operations": ["rerank"]})
        if _truthy(config.get("enable-all-tools", True)):  # LangBot's resource policy defaults it on
            tool_names = list(self.tools)
        else:
            listed = config.get("tools")
            tool_names = [n for n in listed if n in self.tools] if isinstance(listed, list) else []
        tools = [{"tool_name": n, "tool_type": "plugin", "description": self.tools[n].description,
                  "parameters": self.tools[n].parameters, "operations": ["detail", "call"]}
                 for n in dict.fromkeys(tool_names)]
        listed_kbs = config.get("knowledge-bases")
        kb_ids = [k for k in listed_kbs if k in self.knowledge_bases] if isinstance(listed_kbs, list) else []
        kbs = [{"kb_id": k, "kb_name": self.knowledge_bases[k].name, "kb_type": self.knowledge_bases[k].kb_type,
                "operations": ["list", "retrieve"]} for k in dict.fromkeys(kb_ids)]
        return {"models": models, "tools": tools, "knowledge_bases": kbs, "skills": [dict(s) for s in self.skills]}

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
        resources: dict[str, Any] | None = None,
        interactions: bool = False,
        interaction: dict[str, Any] | None = None,
    ) -> RunnerContext:
        """Build a RunnerContext the way LangBot 4.11.2's context builder does for a pipeline run.
        The run is granted what ``granted_resources`` derives from ``config``; ``resources`` adds to
        that (``{"tools": [{"tool_name": ..., "operations": ["call"]}], "knowledge_bases": [...]}``;
        plugin storage is granted unless it says otherwise). The grants are frozen for the run and
        every model, tool and knowledge-base action is checked against them.

        ``interactions``: the platform renders interactions (a lark-omni style adapter: buttons, or
        one field). ``interaction``: this run is a button click on an earlier request
        (``{"interaction_id", "action_id", "values"}``), which LangBot delivers as a new
        ``interaction.submitted`` run whose text is the literal ``submitted``."""
        ident = identity or Identity()
        config = dict(config or {})
        run_id = str(uuid.uuid4())
        self._runs[run_id] = ident
        self._configs[run_id] = config
        granted = _merged_resources(self.granted_resources(config), resources or {})
        self._grants[run_id] = _grant_index(granted)
        runtime_metadata: dict[str, Any] = {"bot_id": ident.bot_id, "workspace_id": ident.workspace_id,
                                            "streaming_supported": True}
        primary = next((m for m in granted.get("models") or [] if m.get("model_type") in (None, "llm")), None)
        window = getattr(self.models.get(primary["model_id"]), "context_window", None) if primary else None
        if window:
            runtime_metadata["model_context_window_tokens"] = int(window)
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
        if ident.conversation_id:  # LangBot seeds its conversation id, or the reset generation after a reset
            state["conversation"].setdefault("external.conversation_id",
                                             self._generation(ident) or ident.conversation_id)
        event_id = str(uuid.uuid4())
        event_type = "message.received"
        submitted: dict[str, Any] = {}
        if interaction is not None:
            submitted = {"interaction": {"submitted_at": int(time.time()), "values": {}, **interaction}}
            event_type, text, contents = "interaction.submitted", "submitted", None
        contents = contents if contents is not None else ([{"type": "text", "text": text}] if text else [])
        if ident.conversation_id:
            self._record_user(ident, event_id, text, contents, attachments or [])
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
            "trigger": {"type": event_type, "source": "platform", "timestamp": int(time.time())},
            "event": {
                "event_id": event_id,
                "event_type": event_type,
                "event_time": int(time.time()),
                "source": "platform",
            },
            "conversation": conv,
            "actor": {"actor_type": ident.actor_type, "actor_id": ident.actor_id, "actor_name": ident.actor_name}
            if ident.actor_id
            else None,
            "input": {
                "text": text,
                "contents": contents,
                "attachments": attachments or [],
                **submitted,
            },
            # a pipeline delivers automatically; agent debug (surface webui) does not
            "delivery": {"surface": surface, "automatic_reply": surface == "platform", "supports_streaming": True,
                         **({"interactions": {"field_types": ["text", "textarea", "number", "select"],
                                              "action_styles": ["default", "primary", "danger"],
                                              "supports_updates": True, "max_fields": 1}}
                            if interactions else {})},
            "resources": granted,
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
                "metadata": runtime_metadata,
            },
            "variables": {"query_id": 1},
            "config": config,
            "adapter": {"extra": {"params": params or {}}},
        }
        ctx = RunnerContext.model_validate(data)
        if steering and ident.conversation_id:
            self._steerable[run_id] = ctx
        return ctx

    # --- result side (what the orchestrator does with results) -----------------------------

    def apply_result(self, run_id: str, result: Any) -> None:
        """Persist ``state.updated`` like LangBot (invalid scopes/identities are dropped) and put the
        run's completed assistant message into the conversation transcript."""
        rtype = getattr(result.type, "value", result.type)
        ident = self._runs.get(run_id)
        if rtype == "action.requested" and (result.data or {}).get("action") == "interaction.requested":
            self.interactions.append(dict(result.data.get("payload") or {}))
        if ident is not None and ident.conversation_id:
            self._record_assistant(run_id, ident, result, rtype)
        if rtype in ("run.completed", "run.failed"):
            self.end_run(run_id)
        if rtype != "state.updated":
            return
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
        """A member's reset, as LangBot 4.11.2 does it (``agent/runner/context_reset.py``): the
        conversation's state is deleted, the earlier history hidden, and a new reset generation
        seeds ``external.conversation_id`` from the next run on."""
        ident = identity or Identity()
        sk = self.scope_key(ident, "conversation")
        if sk:
            self.store.reset(sk)
        if ident.conversation_id:  # LangBot's context reset hides the earlier history too
            self.store.reset_transcript(ident.conversation_id)
            self.store.set(self._reset_scope(ident), "generation", str(uuid.uuid4()))

    @staticmethod
    def _reset_scope(ident: Identity) -> str:
        return "host-reset:" + json.dumps([ident.workspace_id, ident.bot_id, ident.conversation_id])

    def _generation(self, ident: Identity) -> str | None:
        value = self.store.snapshot(self._reset_scope(ident)).get("generation")
        return str(value) if value else None

    # --- the plugin-runtime handler interface --------------------------------------------------

    async def call_action(self, action: Any, data: dict[str, Any], timeout: float = 15.0) -> dict[str, Any]:
        name = getattr(action, "value", action)
        self.calls.append(Call(name, dict(data)))
        if name == "get_langbot_version":  # not run-scoped
            return {"version": "4.11.2", "api_features": ["llm.reasoning_level"]}
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
            asked = data.get("limit")
            if asked is not None and int(asked) <= 0:
                raise ActionCallError("limit must be > 0")
            n = 1 if data.get("mode") in ("one", "one-at-a-time") else min(int(asked or 100), 100)
            # each run's own queue (LangBot keeps one per run): items claimed for another run stay
            items: list[dict[str, Any]] = []
            kept: deque[dict[str, Any]] = deque()
            while self.steering:
                item = self.steering.popleft()
                if len(items) < n and item.get("claimed_run_id") in (None, run_id):
                    items.append(item)
                else:
                    kept.append(item)
            self.steering.extend(kept)
            return {"items": items}
        if name == "history_page":
            return self._history_page(ident, data)
        if name == "get_prompt":
            return {"prompt": self._prompt(run_id)}
        handler = _RESOURCE_ACTIONS.get(name)
        if handler is not None:
            return await handler(self, run_id, data)
        raise ActionCallError(f"Unsupported action: {name}")

    def _history_page(self, ident: Identity, data: dict[str, Any]) -> dict[str, Any]:
        """LangBot 4.11.2's HISTORY_PAGE handler over this host's transcript."""
        asked = data.get("conversation_id")
        if asked:
            if not ident.conversation_id:
                raise ActionCallError("History page is not available without a run conversation")
            if asked != ident.conversation_id:
                raise ActionCallError(f"Conversation {asked} is not accessible by this run")
        if not ident.conversation_id:
            return {"items": [], "next_cursor": None, "prev_cursor": None, "has_more": False}
        try:
            before = int(data["before_cursor"]) if data.get("before_cursor") else None
            after = int(data["after_cursor"]) if data.get("after_cursor") else None
        except ValueError as exc:
            raise ActionCallError(f"History page error: {exc}") from None
        items, next_seq, prev_seq, has_more = self.store.page_transcript(
            self._transcript_scope(ident), before_seq=before, after_seq=after, limit=data.get("limit", 50),
            direction=data.get("direction", "backward"), include_attachments=bool(data.get("include_attachments")),
        )
        return {"items": items, "next_cursor": str(next_seq) if next_seq else None,
                "prev_cursor": str(prev_seq) if prev_seq else None, "has_more": has_more}

    async def call_action_generator(
        self, action: Any, data: dict[str, Any], timeout: float = 15.0
    ) -> AsyncIterator[dict[str, Any]]:
        """The streaming actions; only ``invoke_llm_stream`` (``{"chunk": …}`` items, then
        ``{"usage": …}``) exists, served by a registered model."""
        name = getattr(action, "value", action)
        self.calls.append(Call(name, dict(data)))
        if name != "invoke_llm_stream":
            raise ActionCallError(f"Unsupported action: {name}")
        if not any(getattr(m, "model_type", None) == "llm" for m in self.models.values()):
            raise ActionCallError("LLM streaming is not available in the local host")
        run_id = self._run_of(data)
        model = self._granted_model(run_id, data, "stream")
        stream = model.stream(data.get("messages") or [], self._effective_funcs(model, data),
                              data.get("extra_args") or {}, remove_think=self._remove_think(run_id, data))
        async with aclosing(stream) as items:
            async for item in items:
                yield item

    # --- model, tool and knowledge-base actions (LangBot 4.11.2's handler.py) -------------------

    def _run_of(self, data: dict[str, Any]) -> str:
        run_id = data.get("run_id")
        if not run_id:
            raise ActionCallError("run_id is required")
        if run_id not in self._runs:
            raise ActionCallError(f"Run session {run_id} not found or expired")
        return str(run_id)

    def _authorize(self, run_id: str, resource_type: str, resource_id: Any, operation: str) -> None:
        """LangBot's ``_validate_run_authorization``: the resource must be in the run's frozen grants
        with this operation."""
        operations = self._grants.get(run_id, {}).get(resource_type, {}).get(str(resource_id))
        if operations is None or operation not in operations:
            raise ActionCallError(
                f"{resource_type} {resource_id} is not authorized for operation {operation} for this agent run")

    def _remove_think(self, run_id: str, data: dict[str, Any]) -> bool:
        if data.get("remove_think") is not None:
            return bool(data["remove_think"])
        return _truthy(self._configs.get(run_id, {}).get("remove-think"))

    @staticmethod
    def _effective_funcs(model: Any, data: dict[str, Any]) -> list[dict[str, Any]]:
        """LangBot sends tools only to a model with the ``func_call`` ability."""
        return list(data.get("funcs") or []) if "func_call" in (getattr(model, "abilities", ()) or ()) else []

    def _prompt(self, run_id: str) -> list[dict[str, Any]]:
        """The run's effective prompt: ``host.prompt``, else the config's prompt-editor value."""
        if self.prompt:
            return list(self.prompt)
        configured = self._configs.get(run_id, {}).get("prompt")
        if isinstance(configured, str) and configured:
            return [{"role": "system", "content": configured}]
        return [dict(m) for m in configured if isinstance(m, dict)] if isinstance(configured, list) else []

    def _granted_model(self, run_id: str, data: dict[str, Any], operation: str) -> Any:
        """The model an action names, once the run's grants allow ``operation`` on it."""
        field_name, kind, label = (("rerank_model_uuid", "rerank", "Rerank model") if operation == "rerank"
                                   else ("llm_model_uuid", "llm", "LLM model"))
        model_id = data.get(field_name)
        self._authorize(run_id, "model", model_id, operation)
        model = self._model_of(model_id, kind)
        if model is None:
            raise ActionCallError(f"{label} with {field_name} {model_id} not found")
        return model

    async def _invoke_llm(self, run_id: str, data: dict[str, Any]) -> dict[str, Any]:
        model = self._granted_model(run_id, data, "invoke")
        result = await model.invoke(data.get("messages") or [], self._effective_funcs(model, data),
                                    data.get("extra_args") or {}, remove_think=self._remove_think(run_id, data))
        out = {"message": result["message"]}
        if result.get("usage") is not None:
            out["usage"] = result["usage"]
        return out

    async def _count_tokens(self, run_id: str, data: dict[str, Any]) -> dict[str, Any]:
        model = self._granted_model(run_id, data, "count_tokens")
        if not self.count_tokens_supported:
            raise ActionCallError("LLM provider does not support token counting")
        return {"tokens": model.count_tokens(data.get("messages") or [], data.get("funcs") or [])}

    async def _invoke_rerank(self, run_id: str, data: dict[str, Any]) -> dict[str, Any]:
        model = self._granted_model(run_id, data, "rerank")
        scored = model.rerank(str(data.get("query") or ""), list(data.get("documents") or [])[:64])
        scored = sorted(scored, key=lambda r: r.get("relevance_score", 0), reverse=True)
        top_k = data.get("top_k")
        return {"results": scored[: int(top_k)] if top_k is not None else scored}

    async def _call_tool(self, run_id: str, data: dict[str, Any]) -> dict[str, Any]:
        tool = data.get("tool_name")
        if "parameters" not in data:
            raise ActionCallError("parameters is required for Runner tool calls")
        self._authorize(run_id, "tool", tool, "call")
        local = self.tools.get(str(tool))
        if local is not None:
            try:
                return {"result": await local.call(data.get("parameters") or {})}
            except Exception as exc:  # noqa: BLE001 - LangBot reports any tool failure in words
                raise ActionCallError(f"Failed to execute tool {tool}: {exc}") from None
        if tool not in self.tool_results:
            raise ActionCallError(f"Tool {tool} not found")
        return {"result": self.tool_results[tool]}

    async def _get_tool_detail(self, run_id: str, data: dict[str, Any]) -> dict[str, Any]:
        tool = data.get("tool_name")
        self._authorize(run_id, "tool", tool, "detail")
        local = self.tools.get(str(tool))
        if local is not None:
            return {"tool": local.detail()}
        if tool not in self.tool_results:
            raise ActionCallError(f"Tool {tool} not found")
        return {"tool": {"name": tool, "description": "", "parameters": {"type": "object", "properties": {}}}}

    async def _retrieve_knowledge_base(self, run_id: str, data: dict[str, Any]) -> dict[str, Any]:
        kb_id = data.get("kb_id")
        self._authorize(run_id, "knowledge_base", kb_id, "retrieve")
        kb = self.knowledge_bases.get(str(kb_id))
        if kb is not None:
            return {"results": kb.retrieve(str(data.get("query_text") or ""), int(data.get("top_k") or 5))}
        if self.kb_results:
            return {"results": list(self.kb_results)}
        raise ActionCallError(f"Knowledge base {kb_id} not found")

    def queue_steering(self, run_ctx: RunnerContext, text: str, identity: Identity | None = None) -> str:
        """Claim a follow-up message for an active run (what LangBot does on a new message);
        ``identity`` is who sent it (default: the run's own sender). Like LangBot 4.11.2
        (``orchestrator._build_steering_item``) the item names the sender (``actor``) and the
        conversation it came from (without launcher or sender fields). Returns the item's event id."""
        ident = identity or self._runs.get(run_ctx.run_id) or Identity()
        event_id = str(uuid.uuid4())
        self.steering.append(
            {
                "actor": {"actor_type": ident.actor_type, "actor_id": ident.actor_id,
                          "actor_name": ident.actor_name} if ident.actor_id else None,
                "claimed_run_id": run_ctx.run_id,
                "runner_id": self.runner_id,
                "claimed_at": int(time.time()),
                "event": {"event_id": event_id, "event_type": "message.received", "event_time": int(time.time()),
                          "source": "platform"},
                "conversation": {"conversation_id": ident.conversation_id, "thread_id": ident.thread_id,
                                 "bot_id": ident.bot_id, "workspace_id": ident.workspace_id}
                if ident.conversation_id else None,
                "input": {"text": text, "contents": [{"type": "text", "text": text}]},
            }
        )
        return event_id

    def claim(self, text: str, identity: Identity | None = None) -> RunnerContext | None:
        """What LangBot 4.11.2 does first with a new message (``try_claim_steering_from_query``,
        host-contract.md §4.6): while a run that takes follow-ups (made with ``steering=True``) is
        active on the same conversation, bot, workspace and thread, the message is claimed for the
        oldest such run, whoever sent it, and written to the conversation's transcript (the next run
        reads it there); returns that run's context. None: no run claims it, so the message starts a
        run of its own."""
        ident = identity or Identity()
        if not ident.conversation_id:
            return None
        for run_id, ctx in self._steerable.items():
            owner = self._runs.get(run_id)
            if owner is not None and (owner.conversation_id, owner.bot_id, owner.workspace_id, owner.thread_id) == (
                    ident.conversation_id, ident.bot_id, ident.workspace_id, ident.thread_id):
                event_id = self.queue_steering(ctx, text, ident)
                self._record_user(ident, event_id, text, [{"type": "text", "text": text}], [])
                return ctx
        return None

    def end_run(self, run_id: str) -> None:
        """The run is over (its terminal result, or the host stopped it): it claims nothing more."""
        self._steerable.pop(run_id, None)


_RESOURCE_ACTIONS: dict[str, Callable[[LocalHost, str, dict[str, Any]], Awaitable[dict[str, Any]]]] = {
    "invoke_llm": LocalHost._invoke_llm,
    "count_tokens": LocalHost._count_tokens,
    "invoke_rerank": LocalHost._invoke_rerank,
    "call_tool": LocalHost._call_tool,
    "get_tool_detail": LocalHost._get_tool_detail,
    "retrieve_knowledge_base": LocalHost._retrieve_knowledge_base,
}

#: the operations LangBot assumes for a granted resource that lists none (DEFAULT_RESOURCE_OPERATIONS)
_DEFAULT_OPERATIONS = {
    "model": {"invoke", "stream", "rerank", "count_tokens"},
    "tool": {"detail", "call"},
    "knowledge_base": {"list", "retrieve"},
    "skill": {"activate"},
}
_RESOURCE_KEYS = {"models": ("model", "model_id"), "tools": ("tool", "tool_name"),
                  "knowledge_bases": ("knowledge_base", "kb_id"), "skills": ("skill", "skill_name")}


def _truthy(value: Any) -> bool:
    """A config switch; ``runners chat --set`` passes strings."""
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def _merged_resources(granted: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``granted`` plus a test's ``resources``: listed resources are added (an entry for an id that
    is already granted replaces it), other keys override; plugin storage unless told otherwise."""
    out: dict[str, Any] = {"storage": {"plugin_storage": True, "workspace_storage": False},
                           **{k: list(v) for k, v in granted.items()}}
    for key, value in extra.items():
        id_key = _RESOURCE_KEYS.get(key, (None, None))[1]
        if id_key and isinstance(value, list):
            given = {(v.get(id_key) if isinstance(v, dict) else None) for v in value}
            out[key] = [r for r in out.get(key, []) if r.get(id_key) not in given] + list(value)
        else:
            out[key] = value
    return out


def _grant_index(resources: dict[str, Any]) -> dict[str, dict[str, set[str]]]:
    """resource type -> id -> authorized operations, as LangBot freezes them for a run."""
    index: dict[str, dict[str, set[str]]] = {}
    for key, (rtype, id_key) in _RESOURCE_KEYS.items():
        for item in resources.get(key) or []:
            rid = item.get(id_key) if isinstance(item, dict) else getattr(item, id_key, None)
            if rid is None:
                continue
            ops = item.get("operations") if isinstance(item, dict) else getattr(item, "operations", None)
            index.setdefault(rtype, {})[str(rid)] = set(ops or _DEFAULT_OPERATIONS[rtype])
    return index


async def run_and_collect(runner: Any, host: LocalHost, ctx: RunnerContext) -> list[Any]:
    """Invoke a bound runner, apply its results to the host, and return them all."""
    out = []
    async for result in runner.invoke(ctx):
        host.apply_result(ctx.run_id, result)
        out.append(result)
    return out
