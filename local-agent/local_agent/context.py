"""What the model reads before the user's message: the system prompt (with date, skills and
knowledge), and the conversation's earlier messages from LangBot's transcript."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
from dataclasses import dataclass
from typing import Any

from langbot_plugin.api.proxies.runner.common import DEFAULT_RESOURCE_OPERATIONS

from runner_kit.history import history_allowed
from runner_kit.inputs import UserInput

Msg = dict[str, Any]

DEFAULT_PROMPT: list[Msg] = [{"role": "system", "content": "You are a helpful assistant."}]
KNOWLEDGE_INTRO = (
    "Passages found in the knowledge bases for the user's message. Use them when they help and cite "
    "them by their [n] label; say so when they do not answer the question."
)
SOURCE_KEYS = ("file_name", "document_name", "source", "url")


def operations(resource: Any, kind: str) -> frozenset[str]:
    """A granted resource's operations (an empty list means the SDK's defaults)."""
    ops = getattr(resource, "operations", None)
    return frozenset(str(o) for o in ops) if ops else DEFAULT_RESOURCE_OPERATIONS[kind]


def _get(item: Any, name: str) -> Any:
    return item.get(name) if isinstance(item, dict) else getattr(item, name, None)


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(_get(p, "text") or "") for p in content if _get(p, "type") == "text")
    return ""


@dataclass(slots=True)
class Prompt:
    system: str  # the system prompt's text (several system entries joined)
    examples: list[Msg]  # the prompt's other entries (few-shot user/assistant messages), in order


def split_prompt(entries: Any) -> Prompt:
    system: list[str] = []
    examples: list[Msg] = []
    for entry in entries if isinstance(entries, list) else []:
        role = str(_get(entry, "role") or "")
        content = _get(entry, "content")
        if role == "system":
            if text := _content_text(content).strip():
                system.append(text)
        elif role in ("user", "assistant") and content:
            examples.append({"role": role, "content": content})
    return Prompt("\n\n".join(system), examples)


async def load_prompt(ctx: Any, configured: Any, log: Any) -> Prompt:
    """The effective prompt: LangBot's (``get_prompt``) when the run offers it, else the config's."""
    apis = getattr(getattr(ctx, "context", None), "available_apis", None)
    if getattr(apis, "prompt_get", False):
        try:
            got = await ctx.api.get_prompt()
            if got:
                return split_prompt(got)
        except Exception as exc:  # noqa: BLE001 - the configured prompt is the documented fallback
            log(f"could not read the prompt from LangBot ({type(exc).__name__}); using the configured prompt")
    return split_prompt(configured if isinstance(configured, list) and configured else DEFAULT_PROMPT)


def system_text(prompt: Prompt, *, date: bool, skills: list[Any], knowledge: str | None,
                skill_tools: bool = True) -> str:
    parts = [prompt.system] if prompt.system else []
    if date:
        now = dt.datetime.now(dt.UTC)
        parts.append(f"Current date: {now:%Y-%m-%d} ({now:%A}), UTC.")
    offered = [s for s in skills if _get(s, "skill_name")] if skill_tools else []
    if offered:
        lines = [
            f"- {_get(s, 'skill_name')}"
            + (f" ({_get(s, 'display_name')})" if _get(s, "display_name") else "")
            + (f": {_get(s, 'description')}" if _get(s, "description") else "")
            for s in offered
        ]
        parts.append("Skills you can activate with the `activate` tool when a task needs one:\n" + "\n".join(lines))
    if knowledge:
        parts.append(knowledge)
    return "\n\n".join(parts)


#: LangBot serves at most this many transcript items a page
PAGE_LIMIT = 100
#: the most messages after a summary one run reads (the newest are kept: those matter most)
MAX_HISTORY_ITEMS = 5000
_MEDIA = {"image_base64": "an image", "image_url": "an image", "file_base64": "a file", "file_url": "a file"}


async def load_history(ctx: Any, limit: int, through_seq: int | None, log: Any) -> list[tuple[int, Msg]]:
    """Earlier user/assistant messages of the conversation, oldest first, each with its ``seq``;
    the run's own message and everything a checkpoint already summarises are left out.

    After a summary (``through_seq``), every message after its cursor is read, page by page
    forward, so none is skipped (each is later either sent or summarised, once). Before the
    first summary, the conversation reaches back ``limit`` messages."""
    if limit <= 0 or not history_allowed(ctx):
        return []
    own = getattr(getattr(ctx, "event", None), "event_id", None)
    raw: list[Any] = []
    try:
        if through_seq is not None:
            after = through_seq
            while True:
                page = await ctx.api.history_page(after_cursor=str(after), limit=PAGE_LIMIT, direction="forward")
                items = [i for i in list(_get(page, "items") or []) if isinstance(_get(i, "seq"), int)]
                items = [i for i in items if _get(i, "seq") > after]  # a host that ignored the cursor ends here
                raw.extend(items)
                if len(raw) > MAX_HISTORY_ITEMS:
                    log(f"more than {MAX_HISTORY_ITEMS} messages since the last summary; the oldest "
                        f"{len(raw) - MAX_HISTORY_ITEMS} of them are left out")
                    raw = raw[-MAX_HISTORY_ITEMS:]
                if not items or not _get(page, "has_more"):
                    break
                after = max(_get(i, "seq") for i in items)
        else:
            before: int | None = None
            counted = 0  # the run's own message is on the newest page (LangBot writes it first): it does not count
            while counted < limit:
                kwargs: dict[str, Any] = {"limit": min(limit - counted + (0 if raw else 1), PAGE_LIMIT),
                                          "direction": "backward"}
                if before is not None:
                    kwargs["before_cursor"] = str(before)
                page = await ctx.api.history_page(**kwargs)
                items = [i for i in list(_get(page, "items") or []) if isinstance(_get(i, "seq"), int)]
                if before is not None:
                    items = [i for i in items if _get(i, "seq") < before]
                raw.extend(items)
                counted += sum(1 for i in items if not (own and _get(i, "event_id") == own))
                if not items or not _get(page, "has_more"):
                    break
                before = min(_get(i, "seq") for i in items)
    except Exception as exc:  # noqa: BLE001 - history helps; its absence is no reason to fail
        log(f"could not read the conversation history from LangBot ({type(exc).__name__}); "
            + ("answering with what was read" if raw else "answering without it"))
    rows: dict[int, Msg] = {}
    for item in raw:
        seq = _get(item, "seq")
        role = str(_get(item, "role") or "")
        if role not in ("user", "assistant") or str(_get(item, "item_type") or "message") != "message":
            continue
        if own and _get(item, "event_id") == own:
            continue
        if through_seq is not None and seq <= through_seq:
            continue
        content = _history_content(item)
        if content:
            rows[seq] = {"role": role, "content": content}
    found = sorted(rows.items())
    return found if through_seq is not None else found[-limit:]


async def cursor_ahead(ctx: Any, through_seq: int) -> bool:
    """Whether a checkpoint's cursor lies past the conversation's newest message (its transcript was
    reset, or the checkpoint was written elsewhere): then no message would ever be read after it."""
    try:
        page = await ctx.api.history_page(limit=1, direction="backward")
    except Exception:  # noqa: BLE001 - unknown: keep the checkpoint
        return False
    seqs = [s for i in list(_get(page, "items") or []) if isinstance(s := _get(i, "seq"), int)]
    return bool(seqs) and max(seqs) < through_seq


def _history_content(item: Any) -> str | list[Msg] | None:
    cj = _get(item, "content_json")
    inner = cj.get("content") if isinstance(cj, dict) else None
    if isinstance(inner, str) and inner.strip():
        return inner
    if isinstance(inner, list):
        parts: list[Msg] = []
        for p in inner:
            if not isinstance(p, dict) or not p.get("type"):
                continue
            kind = str(p["type"])
            if kind in _MEDIA and not _media_payload(p, kind):
                # LangBot keeps no data of an earlier turn's attachment: say it was there, send no empty part
                name = p.get("file_name")
                parts.append({"type": "text", "text": f"[{_MEDIA[kind]} was sent here" + (f": {name}]" if name else "]")})
            else:
                parts.append(dict(p))
        if any(p.get("type") != "text" or (p.get("text") or "").strip() for p in parts):
            if all(p.get("type") == "text" for p in parts):
                return "\n".join(str(p.get("text") or "") for p in parts if (p.get("text") or "").strip())
            return parts
    text = _get(item, "content")
    return text if isinstance(text, str) and text.strip() else None


def _media_payload(part: Msg, kind: str) -> bool:
    value = part.get(kind)
    if isinstance(value, dict):
        value = value.get("url")
    return isinstance(value, str) and bool(value.strip())


def user_message(inp: UserInput) -> Msg:
    """The user's turn as a provider message: plain text, or content parts with images and files."""
    if not inp.files:
        return {"role": "user", "content": inp.text}
    parts: list[Msg] = [{"type": "text", "text": inp.text}] if inp.text.strip() else []
    for f in inp.files:
        if f.kind == "image":
            if f.data is not None:
                b64 = base64.b64encode(f.data).decode()
                parts.append({"type": "image_base64", "image_base64": f"data:{f.mime_type or 'image/png'};base64,{b64}"})
            elif f.url:
                parts.append({"type": "image_url", "image_url": {"url": f.url}})
        elif f.data is not None:
            parts.append({"type": "file_base64", "file_base64": base64.b64encode(f.data).decode(), "file_name": f.name})
        elif f.url:
            parts.append({"type": "file_url", "file_url": f.url, "file_name": f.name})
    return {"role": "user", "content": parts}


# --- knowledge --------------------------------------------------------------------------------


@dataclass(slots=True)
class Passage:
    kb: str
    text: str
    source: str | None


def _passage(kb_name: str, entry: Any) -> Passage | None:
    text = _content_text(_get(entry, "content")).strip()
    if not text:
        return None
    meta = _get(entry, "metadata") or {}
    source = next((str(meta[k]) for k in SOURCE_KEYS if isinstance(meta, dict) and meta.get(k)), None)
    return Passage(kb_name, text, source)


async def knowledge_block(
    ctx: Any, query: str, *, top_k: int, rerank_model: str | None, rerank_top_k: int, log: Any
) -> str | None:
    """Passages from every granted knowledge base for ``query`` (reranked together when a rerank
    model is granted), as one labelled block; a knowledge base that fails is logged and skipped."""
    kbs = [kb for kb in ctx.resources.knowledge_bases if "retrieve" in operations(kb, "knowledge_base")]
    if not kbs or not query.strip():
        return None

    async def retrieve(kb: Any) -> list[Passage]:
        name = kb.kb_name or kb.kb_id
        try:
            entries = await ctx.api.retrieve_knowledge(kb.kb_id, query, top_k=top_k)
        except Exception as exc:  # noqa: BLE001 - one failing knowledge base must not fail the answer
            log(f"knowledge base {name!r} could not be searched ({type(exc).__name__}: {str(exc)[:200]}); skipped")
            return []
        return [p for e in entries or [] if (p := _passage(name, e)) is not None]

    found = [p for batch in await asyncio.gather(*(retrieve(kb) for kb in kbs)) for p in batch]
    if found and rerank_model:
        try:
            ranked = await ctx.api.invoke_rerank(rerank_model, query, [p.text for p in found], top_k=rerank_top_k)
            order = [r["index"] for r in ranked if isinstance(r.get("index"), int) and 0 <= r["index"] < len(found)]
            found = [found[i] for i in order]
        except Exception as exc:  # noqa: BLE001 - unranked passages are still useful
            log(f"reranking failed ({type(exc).__name__}: {str(exc)[:200]}); using the retrieval order")
    if not found:
        return None
    lines = [KNOWLEDGE_INTRO]
    for n, p in enumerate(found, 1):
        label = f"{p.kb} · {p.source}" if p.source else p.kb
        lines.append(f"[{n}] ({label})\n{p.text}")
    return "\n\n".join(lines)
