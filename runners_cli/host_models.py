"""The local host's model, tool and knowledge-base backends: what LangBot's model layer, tool
manager and RAG manager do behind the runner actions, small enough for tests and ``runners chat``.

- ``OpenAIChatModel`` serves ``invoke_llm`` / ``invoke_llm_stream`` / ``count_tokens`` from an
  OpenAI-compatible ``/chat/completions`` endpoint the way LangBot 4.11.2's litellm requester does:
  the SDK's ``Message`` / ``LLMTool`` dicts become an OpenAI request, the answer comes back as a
  ``Message`` dict (or ``MessageChunk`` dicts: content deltas, tool-call fragments carrying the id and
  name of their call, ``is_final`` + ``provider_specific_fields.finish_reason`` on the finishing
  chunk, ``reasoning_content`` wrapped in ``<think>`` unless ``remove_think``), and failures are
  raised with LangBot's text, ``RequesterError: Model request failed: <reason>``.
- ``LocalReranker`` and ``LocalKnowledgeBase`` score by lexical overlap (no embeddings offline).
- ``LocalTool`` wraps a Python function as a host tool.
"""

from __future__ import annotations

import base64
import inspect
import json
import math
import re
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import httpx
from langbot_plugin.api.entities.builtin.provider.message import Message, MessageChunk
from langbot_plugin.api.entities.builtin.rag.context import RetrievalResultEntry
from langbot_plugin.entities.io.errors import ActionCallError

__all__ = ["LocalKnowledgeBase", "LocalReranker", "LocalTool", "OpenAIChatModel", "model_error"]

#: how ``count_tokens`` estimates: one token per this many bytes of the request's JSON
BYTES_PER_TOKEN = 4
#: the longest SSE line accepted from a provider (a longer one is a protocol error)
MAX_STREAM_LINE = 4 * 1024 * 1024
#: the largest non-streamed response body accepted
MAX_BODY = 8 * 1024 * 1024

# LangBot's litellm error mapping (``_handle_litellm_error``), English locale
CONTEXT_LENGTH = "Context length exceeded"
INVALID_KEY = "Invalid API key"
NOT_FOUND = "Invalid model or endpoint"
RATE_LIMIT = "Rate limit exceeded or insufficient balance"
TIMED_OUT = "Request timed out"
CONNECTION = "Connection failed"
BAD_REQUEST = "Invalid request parameters"
API_ERROR = "API error"

_CONTEXT_HINTS = ("context_length_exceeded", "maximum context length", "context length", "context window",
                  "too many tokens", "prompt is too long")


def model_error(reason: str) -> ActionCallError:
    """The error text LangBot's host sends for a failed model request."""
    return ActionCallError(f"RequesterError: Model request failed: {reason}")


def _status_reason(status: int, body: bytes) -> str:
    """The reason LangBot gives for an HTTP error status of the provider."""
    if status == 401:
        return INVALID_KEY
    if status == 404:
        return NOT_FOUND
    if status == 429:
        return RATE_LIMIT
    if status == 408:
        return TIMED_OUT
    if status == 400:
        text = body[:65536].decode("utf-8", "replace").lower()
        return CONTEXT_LENGTH if any(h in text for h in _CONTEXT_HINTS) else BAD_REQUEST
    return API_ERROR


def _image_data_url(data: str) -> str:
    """An ``image_base64`` payload as a data URL (kept when it already is one)."""
    if data.startswith("data:"):
        return data
    head = base64.b64decode(data[:24] + "=" * (-len(data[:24]) % 4), validate=False)
    mime = "image/png"
    if head.startswith(b"\xff\xd8"):
        mime = "image/jpeg"
    elif head.startswith(b"GIF8"):
        mime = "image/gif"
    elif head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        mime = "image/webp"
    return f"data:{mime};base64,{data}"


def _content_parts(content: list[Any]) -> list[dict[str, Any]]:
    """SDK ContentElement dicts as OpenAI content parts; files become a text note."""
    parts: list[dict[str, Any]] = []
    for el in content:
        if not isinstance(el, dict):
            continue
        kind = el.get("type")
        if kind == "text":
            parts.append({"type": "text", "text": el.get("text") or ""})
        elif kind == "image_url":
            url = el.get("image_url")
            url = url.get("url") if isinstance(url, dict) else url
            if url:
                parts.append({"type": "image_url", "image_url": {"url": url}})
        elif kind == "image_base64":
            if el.get("image_base64"):
                parts.append({"type": "image_url", "image_url": {"url": _image_data_url(el["image_base64"])}})
        elif kind in ("file_url", "file_base64"):
            name = el.get("file_name") or "file"
            where = f" at {el['file_url']}" if kind == "file_url" and el.get("file_url") else ""
            parts.append({"type": "text", "text": f"[attached file {name}{where}; its content is not shown]"})
    return parts


def provider_messages(messages: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """SDK ``Message`` dicts as OpenAI chat messages."""
    out = []
    for m in messages:
        msg: dict[str, Any] = {"role": m.get("role") or "user"}
        content = m.get("content")
        if isinstance(content, list):
            msg["content"] = _content_parts(content)
        elif content is not None:
            msg["content"] = content
        elif not m.get("tool_calls"):
            msg["content"] = ""
        else:
            msg["content"] = None
        if m.get("tool_calls"):
            msg["tool_calls"] = [
                {"id": c.get("id"), "type": c.get("type") or "function",
                 "function": {"name": (c.get("function") or {}).get("name"),
                              "arguments": (c.get("function") or {}).get("arguments") or ""}}
                for c in m["tool_calls"]
            ]
        for key in ("name", "tool_call_id"):
            if m.get(key):
                msg[key] = m[key]
        out.append(msg)
    return out


def provider_tools(funcs: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """SDK ``LLMTool`` dicts as OpenAI function tools."""
    return [{"type": "function", "function": {"name": f["name"], "description": f.get("description") or "",
                                              "parameters": f.get("parameters") or {"type": "object",
                                                                                     "properties": {}}}}
            for f in funcs if isinstance(f, dict) and f.get("name")]


def _usage(raw: Any) -> dict[str, Any] | None:
    if not isinstance(raw, dict):
        return None
    usage = {k: v for k, v in raw.items() if v is not None}
    prompt, completion = usage.get("prompt_tokens") or 0, usage.get("completion_tokens") or 0
    usage.setdefault("prompt_tokens", prompt)
    usage.setdefault("completion_tokens", completion)
    usage.setdefault("total_tokens", prompt + completion)
    return usage


_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL)


def _strip_think(text: str) -> str:
    text = re.sub(r"^\s*(?:(?!<think>).)*?</think>\s*", "", text, flags=re.DOTALL)
    return _THINK_BLOCK.sub("", text).strip()


class _ThinkFilter:
    """Drops ``<think>…</think>`` from streamed text (``remove_think``), holding back only a possible
    split tag at the end of a delta."""

    OPEN, CLOSE = "<think>", "</think>"

    def __init__(self) -> None:
        self.buf = ""
        self.inside = False

    def feed(self, text: str) -> str:
        text, self.buf, out = self.buf + text, "", []
        while text:
            tag = self.CLOSE if self.inside else self.OPEN
            at = text.find(tag)
            if at >= 0:
                if not self.inside:
                    out.append(text[:at])
                text, self.inside = text[at + len(tag):], not self.inside
                continue
            keep = next((k for k in range(min(len(text), len(tag) - 1), 0, -1) if tag.startswith(text[-k:])), 0)
            if not self.inside:
                out.append(text[: len(text) - keep])
            self.buf = text[len(text) - keep:]
            break
        return "".join(out)

    def flush(self) -> str:
        pending, self.buf = ("" if self.inside else self.buf), ""
        return pending


class OpenAIChatModel:
    """An LLM model of the local host, served by an OpenAI-compatible Chat Completions endpoint."""

    model_type = "llm"
    provider = "openai-compatible"

    def __init__(self, model_id: str, *, base_url: str, api_key: str | None, model_name: str,
                 context_window: int | None = None, timeout: float = 120.0,
                 abilities: Iterable[str] = ("func_call", "vision")) -> None:
        self.model_id = model_id
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.model_name = model_name
        self.context_window = context_window
        self.timeout = timeout
        self.abilities = tuple(abilities)

    def __repr__(self) -> str:  # never show the key
        return f"OpenAIChatModel({self.model_id!r}, base_url={self.base_url!r}, model_name={self.model_name!r})"

    # -- request -------------------------------------------------------------------------------

    def request_body(self, messages: list[dict[str, Any]], funcs: list[dict[str, Any]] | None = None,
                     extra_args: dict[str, Any] | None = None, *, stream: bool = False) -> dict[str, Any]:
        """The ``/chat/completions`` body for these SDK messages and tools."""
        body: dict[str, Any] = {"model": self.model_name, "messages": provider_messages(messages)}
        tools = provider_tools(funcs or [])
        if tools:
            body["tools"] = tools
            body["tool_choice"] = "auto"
        for key, value in (extra_args or {}).items():
            if key not in ("model", "messages", "stream", "stream_options"):
                body[key] = value
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return body

    def count_tokens(self, messages: list[dict[str, Any]], funcs: list[dict[str, Any]] | None = None) -> int:
        """The local host's own estimate (not a tokenizer): one token per ``BYTES_PER_TOKEN`` bytes of
        the compact JSON of the provider messages and tools, rounded up. Deterministic, and it grows
        with everything the model would be sent."""
        doc: dict[str, Any] = {"messages": provider_messages(messages)}
        tools = provider_tools(funcs or [])
        if tools:
            doc["tools"] = tools
        size = len(json.dumps(doc, ensure_ascii=False, separators=(",", ":"), sort_keys=True).encode())
        return math.ceil(size / BYTES_PER_TOKEN)

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    def _client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(timeout=httpx.Timeout(self.timeout, connect=min(self.timeout, 10.0)),
                                 trust_env=False, follow_redirects=True)

    @staticmethod
    async def _read_body(resp: httpx.Response) -> bytes:
        """The whole body, bounded; once the headers are in, a failure is the provider's (API error)."""
        raw = b""
        try:
            async for piece in resp.aiter_bytes():
                raw += piece
                if len(raw) > MAX_BODY:
                    raise model_error(API_ERROR)
        except httpx.TimeoutException:
            raise model_error(TIMED_OUT) from None
        except httpx.HTTPError:
            if resp.status_code != 200:
                return raw  # the status says enough
            raise model_error(API_ERROR) from None
        return raw

    @staticmethod
    def _transport_reason(exc: httpx.HTTPError) -> str:
        if isinstance(exc, httpx.TimeoutException):
            return TIMED_OUT
        return CONNECTION

    # -- invoke --------------------------------------------------------------------------------

    async def invoke(self, messages: list[dict[str, Any]], funcs: list[dict[str, Any]] | None = None,
                     extra_args: dict[str, Any] | None = None, *, remove_think: bool = False) -> dict[str, Any]:
        """One completion: ``{"message": Message dict, "usage": {...} or None}``."""
        body = self.request_body(messages, funcs, extra_args)
        async with self._client() as client:
            try:
                request = client.build_request("POST", self.base_url + "/chat/completions", json=body,
                                               headers=self._headers())
                resp = await client.send(request, stream=True)
            except httpx.HTTPError as exc:
                raise model_error(self._transport_reason(exc)) from None
            try:
                raw = await self._read_body(resp)
            finally:
                await resp.aclose()
        if resp.status_code != 200:
            raise model_error(_status_reason(resp.status_code, raw))
        try:
            doc = json.loads(raw.decode("utf-8"))
            choice = doc["choices"][0]
            message = choice.get("message") or {}
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
            raise model_error(API_ERROR) from None
        if not isinstance(message, dict):
            raise model_error(API_ERROR)
        content = message.get("content") or ""
        if not isinstance(content, str):
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        reasoning = message.get("reasoning_content")
        fields: dict[str, Any] = {}
        if remove_think:
            content = _strip_think(content)
        elif reasoning:
            content = f"<think>\n{reasoning}\n</think>\n{content}".strip()
        if reasoning:
            fields["reasoning_content"] = reasoning
        calls = [
            {"id": c.get("id") or f"call_{i}", "type": c.get("type") or "function",
             "function": {"name": (c.get("function") or {}).get("name") or "",
                          "arguments": (c.get("function") or {}).get("arguments") or ""}}
            for i, c in enumerate(message.get("tool_calls") or []) if isinstance(c, dict)
        ]
        try:
            out = Message(role=message.get("role") or "assistant", content=content, tool_calls=calls or None,
                          provider_specific_fields=fields or None)
        except ValueError:
            raise model_error(API_ERROR) from None
        return {"message": out.model_dump(), "usage": _usage(doc.get("usage"))}

    # -- stream --------------------------------------------------------------------------------

    async def stream(self, messages: list[dict[str, Any]], funcs: list[dict[str, Any]] | None = None,
                     extra_args: dict[str, Any] | None = None, *,
                     remove_think: bool = False) -> AsyncIterator[dict[str, Any]]:
        """A streamed completion: ``{"chunk": MessageChunk dict}`` items, then ``{"usage": {...}}``
        when the provider reported usage."""
        body = self.request_body(messages, funcs, extra_args, stream=True)
        headers = {**self._headers(), "Accept": "text/event-stream"}
        client = self._client()
        try:
            try:
                request = client.build_request("POST", self.base_url + "/chat/completions", json=body,
                                               headers=headers)
                resp = await client.send(request, stream=True)
            except httpx.HTTPError as exc:
                raise model_error(self._transport_reason(exc)) from None
            try:
                if resp.status_code != 200:
                    raise model_error(_status_reason(resp.status_code, await self._read_body(resp)))
                async for item in self._events(resp, remove_think):
                    yield item
            finally:
                await resp.aclose()
        finally:
            await client.aclose()

    async def _sse_data(self, resp: httpx.Response) -> AsyncIterator[dict[str, Any] | None]:
        """The JSON documents of the ``data:`` lines (None for ``[DONE]``); protocol faults raise."""
        buf = b""
        try:
            async for piece in resp.aiter_bytes():
                buf += piece
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    is_data, doc = self._sse_line(line)
                    if is_data:
                        yield doc
                if len(buf) > MAX_STREAM_LINE:
                    raise model_error(API_ERROR)
        except httpx.TimeoutException:
            raise model_error(TIMED_OUT) from None
        except httpx.HTTPError:  # cut off mid-body
            raise model_error(API_ERROR) from None
        if buf.strip():
            is_data, doc = self._sse_line(buf)
            if is_data:
                yield doc

    @staticmethod
    def _sse_line(line: bytes) -> tuple[bool, dict[str, Any] | None]:
        """(whether it is a ``data:`` line, its document or None for ``[DONE]``)."""
        try:
            text = line.decode("utf-8").strip()
        except UnicodeDecodeError:
            raise model_error(API_ERROR) from None
        if not text.startswith("data:"):
            return False, None  # blank separator, comment, event: / id: fields
        data = text[5:].strip()
        if data == "[DONE]":
            return True, None
        try:
            doc = json.loads(data)
        except ValueError:
            raise model_error(API_ERROR) from None
        if not isinstance(doc, dict):
            raise model_error(API_ERROR)
        if doc.get("error"):  # an error document mid-stream: the provider failed
            text = json.dumps(doc["error"]).lower()
            raise model_error(CONTEXT_LENGTH if any(h in text for h in _CONTEXT_HINTS) else API_ERROR)
        return True, doc

    async def _events(self, resp: httpx.Response, remove_think: bool) -> AsyncIterator[dict[str, Any]]:
        role = "assistant"
        calls: dict[int, dict[str, str]] = {}
        usage: dict[str, Any] | None = None
        think = _ThinkFilter() if remove_think else None
        started = closed = finished = done = False

        def chunk(**data: Any) -> dict[str, Any]:
            return {"chunk": MessageChunk(role=role, **{k: v for k, v in data.items() if v is not None}).model_dump()}

        async for doc in self._sse_data(resp):
            if doc is None:
                done = True
                break
            if doc.get("usage"):
                usage = _usage(doc["usage"])
            choices = doc.get("choices") or []
            if not choices:
                continue
            choice = choices[0] if isinstance(choices[0], dict) else {}
            delta = choice.get("delta") or {}
            finish = choice.get("finish_reason")
            role = delta.get("role") or role
            text = delta.get("content") or ""
            reasoning = delta.get("reasoning_content") or ""
            fields: dict[str, Any] = {}
            if finish:
                fields["finish_reason"] = finish
            if reasoning:
                fields["reasoning_content"] = reasoning
                if not remove_think:
                    text = ("" if started else "<think>\n") + reasoning + (
                        f"\n</think>\n{text}" if text else "")
                    started, closed = True, bool(delta.get("content"))
            elif text and started and not closed and not remove_think:
                text, closed = f"\n</think>\n{text}", True
            if finish and started and not closed and not remove_think:
                text, closed = f"{text}\n</think>\n", True
            if think is not None and text:
                text = think.feed(text)
            tool_calls = self._tool_fragments(delta.get("tool_calls"), calls)
            if not text and not tool_calls and not fields:
                continue
            finished = finished or bool(finish)
            yield chunk(content=text or None, tool_calls=tool_calls, is_final=bool(finish),
                        provider_specific_fields=fields or None)
        if not done and not finished:  # the stream ended before the answer did
            raise model_error(API_ERROR)
        if started and not closed:
            yield chunk(content="\n</think>\n", is_final=True)
        if think is not None:
            pending = think.flush()
            if pending:
                yield chunk(content=pending, is_final=True)
        if usage is not None:
            yield {"usage": usage}

    @staticmethod
    def _tool_fragments(raw: Any, state: dict[int, dict[str, str]]) -> list[dict[str, Any]] | None:
        """OpenAI tool-call deltas with the id and name of their call filled in from ``state``
        (LangBot's ``_normalize_stream_tool_calls``)."""
        out = []
        for n, call in enumerate(raw or []):
            if not isinstance(call, dict):
                continue
            raw_index = call.get("index")
            index = raw_index if isinstance(raw_index, int) else n
            known = state.setdefault(index, {"id": "", "type": "function", "name": ""})
            function = call.get("function") or {}
            if call.get("id"):
                known["id"] = call["id"]
            if call.get("type"):
                known["type"] = call["type"]
            if function.get("name"):
                known["name"] = function["name"]
            if not known["id"] and known["name"]:
                known["id"] = f"call_{index}"
            if not known["id"] or not known["name"]:
                continue
            arguments = function.get("arguments")
            out.append({"id": known["id"], "type": known["type"] or "function",
                        "function": {"name": known["name"],
                                     "arguments": arguments if isinstance(arguments, str) else
                                     ("" if arguments is None else json.dumps(arguments))}})
        return out or None


# -- lexical scoring (rerank and knowledge bases) ---------------------------------------------------

_WORD = re.compile(r"[0-9a-z]+|[^\W\d_a-z]", re.IGNORECASE)


def _terms(text: str) -> set[str]:
    """Lower-cased words (Latin letters and digits) and single letters of other scripts (CJK)."""
    return {t.lower() for t in _WORD.findall(text or "")}


def overlap(query: str, document: str) -> float:
    """The share of the query's terms found in the document (0 … 1)."""
    asked = _terms(query)
    return len(asked & _terms(document)) / len(asked) if asked else 0.0


@dataclass
class LocalReranker:
    """A rerank model of the local host: scores are the lexical overlap with the query."""

    model_id: str
    model_type = "rerank"
    provider = "local"

    def rerank(self, query: str, documents: list[str], top_k: int | None = None) -> list[dict[str, Any]]:
        """``[{"index", "relevance_score"}]``, best first (ties keep document order)."""
        scored = [{"index": i, "relevance_score": overlap(query, str(doc))} for i, doc in enumerate(documents)]
        scored.sort(key=lambda r: -r["relevance_score"])
        return scored[: int(top_k)] if top_k is not None else scored


@dataclass
class LocalTool:
    """A host tool: ``func(parameters)`` returns the result, sync or async, and may raise."""

    name: str
    description: str
    parameters: dict[str, Any]
    func: Callable[[dict[str, Any]], Any]

    async def call(self, parameters: dict[str, Any]) -> Any:
        result = self.func(parameters)
        if inspect.isawaitable(result):
            result = await result
        return result

    def detail(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "parameters": self.parameters}


@dataclass
class LocalKnowledgeBase:
    """A knowledge base of the local host: documents ``{"text", "metadata"?, "id"?,
    "document_name"?, "file_name"?}`` retrieved by lexical overlap with the query."""

    kb_id: str
    name: str
    documents: list[dict[str, Any]] = field(default_factory=list)
    kb_type = "local"

    def retrieve(self, query: str, top_k: int = 5) -> list[dict[str, Any]]:
        """RetrievalResultEntry dicts of the documents sharing terms with the query, best first."""
        hits = []
        for i, doc in enumerate(self.documents):
            score = overlap(query, doc.get("text") or "")
            if score > 0:
                hits.append((score, i, doc))
        hits.sort(key=lambda h: (-h[0], h[1]))
        out = []
        for score, i, doc in hits[: max(int(top_k), 0)]:
            metadata = dict(doc.get("metadata") or {})
            for key in ("document_name", "file_name"):
                if doc.get(key):
                    metadata[key] = doc[key]
            entry = RetrievalResultEntry.model_validate({
                "id": str(doc.get("id") or f"{self.kb_id}-{i}"),
                "content": [{"type": "text", "text": doc.get("text") or ""}],
                "metadata": metadata, "distance": round(1.0 - score, 6), "score": round(score, 6),
            })
            out.append(entry.model_dump(mode="json"))
        return out
