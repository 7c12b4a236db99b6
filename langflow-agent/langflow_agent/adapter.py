"""Langflow ``/api/v1/run/{flow}`` adapter.

Stream (``?stream=true``): ``text/event-stream`` in name only — bare JSON objects
``{"event": ..., "data": ...}`` separated by blank lines, no ``data:`` prefix. Event order:

- ``add_message`` (the user's own message echoed, ``sender: "User"``) →
  ``add_message`` (the AI message; with a streaming model first empty, ``properties.state: "partial"``) →
  ``token``* (``{"chunk", "id"}``; only with a streaming model, empty chunks included) →
  ``add_message``* (the completed AI message, Langflow 1.13 repeats it up to three times, same id) →
  ``end`` (``{"result": <RunResponse>}``, the same document the non-stream call returns)
- an Agent component's tool steps ride on its AI message as ``content_blocks[].contents[]`` of
  ``type: "tool_use"`` (``name``, ``tool_input``, then ``output`` or ``error``)
- on a failure: ``error`` (a Message object, ``category: "error"``) → ``error``
  (``{"error": "500: {json}"}``), and no ``end``.

Langflow keeps chat memory per ``session_id`` and silently uses the flow id when none is sent, so
every caller would share one memory: a fresh id is minted per LangBot conversation (or person) and
kept in state under ``langflow.session_id``. A LangBot reset deletes the old session's messages
(:meth:`LangflowAdapter.end_conversation`).

Stop: ``/run`` has no cancel route (only UI builds have ``/api/v1/build/{job_id}/cancel``); closing
the stream is the stop, and Langflow cancels the flow's task when the client goes away
(``simplified_run_flow``'s ``on_disconnect``). Between events Langflow sends nothing at all, no
keep-alive (``consume_and_yield`` just waits on its queue).

Files are uploaded before the run and deleted after it, whatever its end (:mod:`.files`).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote

import httpx

from runner_kit import errors
from runner_kit import events as ev
from runner_kit.errors import RunnerError
from runner_kit.http import finish_body, open_stream, read_bounded, read_json
from runner_kit.inputs import InputFile
from runner_kit.logs import get_logger
from runner_kit.runner import Adapter
from runner_kit.streams import ConcatJSONDecoder
from runner_kit.texts import t

from . import const
from .errors import (
    BASE_URL_HINT,
    FLOW_HINT,
    cleanup_error,
    flow_failed,
    json_doc,
    parse_envelope,
    stream_error,
)
from .files import is_image, upload_name
from .response import merged, message_usage, parse_result

log = get_logger("runner_kit.langflow")

MAX_JSON_BODY = 16 * 1024 * 1024
_CLEANUPS: set[asyncio.Task[None]] = set()  # deletes of finished runs' uploads, still going


async def cleanups_done() -> None:
    """Wait for the deletes still going (tests; a plugin process just lets them finish)."""
    while _CLEANUPS:
        await asyncio.gather(*list(_CLEANUPS), return_exceptions=True)


def server_root(url: str) -> str:
    """The server root from what an owner pastes: ``http://h:7860``, ``…/``, ``…/api/v1``, ``…/api/v1/``."""
    base = str(url).strip().rstrip("/")
    for suffix in (const.API_PREFIX, "/api/v2", "/api"):
        if base.lower().endswith(suffix):
            return base[: -len(suffix)].rstrip("/")
    return base


class _StreamState:
    __slots__ = ("error", "finished", "messages", "order", "result", "seen", "tokens", "tools", "usage")

    def __init__(self) -> None:
        self.seen = False  # any event at all
        self.finished = False  # ``end`` arrived
        self.tokens = False  # any non-empty ``token`` chunk
        self.messages: dict[str, str] = {}  # AI message id -> text shown for it so far
        self.order: list[str] = []  # AI message ids in the order they were first shown
        self.usage: ev.Usage | None = None  # from the completed AI messages
        self.result: Any = None  # the ``end`` RunResponse
        self.error: tuple[str, str | None] | None = None  # the Message-object error, awaiting the string one
        self.tools: dict[str, bool] = {}  # tool step id -> completed


class LangflowAdapter(Adapter):
    """Maps one LangBot turn onto ``POST /api/v1/run/{flow}``."""

    platform = const.PLATFORM
    session_key = const.SESSION_KEY

    def __init__(self, env):
        super().__init__(env)
        cfg = env.config
        self.root = server_root(cfg["base-url"])
        self.flow = str(cfg["flow-id"]).strip()
        self.left_out: list[str] = []  # files that came only as links (not sent, said in the chat)
        self.headers = {"x-api-key": str(cfg["api-key"]).strip()}
        self._unknown: set[str] = set()
        self._flow_id: str | None = None  # the flow's UUID (flow-id may be its endpoint name)
        self._uploaded: list[tuple[str, str]] = []  # (file name, its delete route) of this run's uploads

    # --- request building ----------------------------------------------------------------------

    def _error(self, status: int, raw: bytes, ctype: str) -> RunnerError:
        return parse_envelope(status, raw, ctype, self.flow)

    async def _flow_uuid(self) -> str:
        """The flow's UUID, which the flow and v1 file routes take (``/run`` also takes an endpoint name)."""
        if self._flow_id is None:
            try:
                self._flow_id = str(uuid.UUID(self.flow))
            except ValueError:
                self._flow_id = await self._by_endpoint_name()
        return self._flow_id

    async def _by_endpoint_name(self) -> str:
        """The UUID of the key owner's flow whose endpoint name flow-id is (the headers of their flows)."""
        async with open_stream(self.env.client, "GET", self.root + const.FLOWS_PATH, budget=self.env.budget(),
                               platform=self.platform, error_parser=self._error, headers=self.headers,
                               params={"header_flows": "true", "get_all": "true",
                                       "remove_example_flows": "true"}) as resp:
            doc = await read_json(resp, self.platform)
        for flow in doc if isinstance(doc, list) else []:
            if isinstance(flow, dict) and flow.get("endpoint_name") == self.flow and flow.get("id"):
                return str(flow["id"])
        raise RunnerError("config.invalid", f"{self.platform} has no flow '{self.flow[:80]}' (flow-id) among this "
                          f"API key's flows ({FLOW_HINT})")

    async def _chat_input_id(self) -> str:
        """The flow's Chat Input component (its ``files`` field takes the uploads)."""
        configured = str(self.env.config.get("chat-input-id") or "").strip()
        if configured:
            return configured
        url = self.root + const.FLOW_PATH.format(flow=await self._flow_uuid())
        async with open_stream(self.env.client, "GET", url, budget=self.env.budget(), platform=self.platform,
                               error_parser=self._error, headers=self.headers) as resp:
            doc = await read_json(resp, self.platform)
        nodes = ((doc or {}).get("data") or {}).get("nodes") if isinstance(doc, dict) else None
        for node in nodes or []:
            if not isinstance(node, dict):
                continue
            data = node.get("data") if isinstance(node.get("data"), dict) else {}
            if data.get("type") == const.CHAT_INPUT_TYPE and node.get("id"):
                return str(node["id"])
        raise RunnerError(
            "config.invalid",
            f"the {self.platform} flow has no Chat Input component to attach files to; add one, or set "
            "chat-input-id to the component that takes files",
        )

    async def _upload(self, f: InputFile) -> str:
        """Upload one file (an image by the v1 route, anything else by v2) and note how to delete it."""
        shown = f.name or "file"
        name = upload_name(f.name)

        def on_error(status: int, raw: bytes, ctype: str) -> RunnerError:
            err = self._error(status, raw, ctype)
            return RunnerError(err.code, f"uploading '{shown}' failed: {err.message}", retryable=err.retryable,
                               status=err.status)

        image = is_image(f)
        flow = await self._flow_uuid() if image else ""
        url = self.root + (const.IMAGE_UPLOAD_PATH.format(flow=flow) if image else const.UPLOAD_PATH)
        async with open_stream(self.env.client, "POST", url, budget=self.env.budget(), platform=self.platform,
                               error_parser=on_error, headers=self.headers,
                               files={"file": (name, f.data or b"", f.mime_type)}) as resp:
            doc = await read_json(resp, self.platform)
        doc = doc if isinstance(doc, dict) else {}
        path = doc.get("file_path") if image else doc.get("path")
        delete = _image_delete(flow, path) if image else _file_delete(doc.get("id"))
        if delete is not None:
            self._uploaded.append((shown, delete))
        else:
            log.warning("%s: the upload of %r came back without what deleting it needs; it stays in %s",
                        self.platform, shown, self.platform)
        if not isinstance(path, str) or not path:
            raise RunnerError("upstream.protocol", f"{self.platform} upload of '{shown}' returned no file path")
        return path

    def _clean_up(self) -> None:
        """After the run, whatever its end: delete what it uploaded, in a task of its own, so neither
        the answer nor a stop waits for it (bounded by ``CLEANUP_SECONDS``; failures are only logged)."""
        uploaded, self._uploaded = self._uploaded, []
        if not uploaded:
            return
        try:
            task = asyncio.get_running_loop().create_task(self._delete_uploads(uploaded))
        except RuntimeError:  # no loop any more (the process is ending)
            log.warning("%s: %d upload(s) of this run were not deleted", self.platform, len(uploaded))
            return
        _CLEANUPS.add(task)
        task.add_done_callback(_CLEANUPS.discard)

    async def _delete_uploads(self, uploaded: list[tuple[str, str]]) -> None:
        try:
            async with asyncio.timeout(const.CLEANUP_SECONDS):
                await asyncio.gather(*(self._delete(name, route) for name, route in uploaded))
        except TimeoutError:
            log.warning("%s: deleting this run's uploads took over %g s; what is left stays in %s", self.platform,
                        const.CLEANUP_SECONDS, self.platform)

    async def _delete(self, name: str, route: str) -> None:
        try:
            async with open_stream(self.env.client, "DELETE", self.root + route, budget=const.CLEANUP_SECONDS,
                                   platform=self.platform, error_parser=cleanup_error, headers=self.headers) as resp:
                await read_bounded(resp, 64 * 1024, self.platform)
        except RunnerError as exc:
            if exc.status == 404:  # already gone
                return
            log.warning("%s: the upload %r was not deleted and stays in %s: %s", self.platform, name,
                        self.platform, exc.message)
        except Exception as exc:  # noqa: BLE001 - a cleanup never fails anything
            log.warning("%s: the upload %r was not deleted and stays in %s (%s)", self.platform, name,
                        self.platform, type(exc).__name__)
        else:
            log.info("%s: deleted the upload %r after the run", self.platform, name)

    async def end_conversation(self, upstream_id: Any) -> None:
        """LangBot reset the conversation: delete the old session's messages, which are the flow's chat
        memory of it (``DELETE /api/v1/monitor/messages/session/{id}``: only that session, only the key
        owner's flows; 204). Only an id this plugin minted: never the flow id, every caller's memory."""
        if not isinstance(upstream_id, str) or not upstream_id.startswith(const.SESSION_PREFIX):
            return
        url = self.root + const.SESSION_MESSAGES_PATH.format(session=quote(upstream_id, safe=""))
        async with open_stream(self.env.client, "DELETE", url, budget=const.CLEANUP_SECONDS, platform=self.platform,
                               error_parser=cleanup_error, headers=self.headers) as resp:
            await read_bounded(resp, 64 * 1024, self.platform)
        log.info("%s: deleted the messages of session %s, which a LangBot reset left behind", self.platform,
                 upstream_id)

    async def _tweaks(self) -> dict[str, Any]:
        tweaks: dict[str, Any] = dict(self.env.config.get("tweaks") or {})
        # a file LangBot passes only as a link: Langflow takes uploads, not links, so it is left out
        # and said, and the text is answered (the other plugins do the same)
        files = [f for f in self.env.input.files if f.data is not None or not f.url]
        self.left_out = [f.name or "file" for f in self.env.input.files if f.data is None and f.url]
        if self.left_out and not files and not self.env.input.text.strip():
            raise RunnerError("input.unreadable", f"{', '.join(repr(n) for n in self.left_out)} only came as a "
                              "link, which Langflow cannot fetch, and the message has no text")
        if files:
            component = await self._chat_input_id()
            paths = [await self._upload(f) for f in files]
            own = dict(tweaks.get(component) or {}) if isinstance(tweaks.get(component), dict) else {}
            own["files"] = paths
            tweaks[component] = own
        return tweaks

    async def _body(self, session_id: str) -> dict[str, Any]:
        cfg = self.env.config
        body: dict[str, Any] = {
            "input_value": self.env.input.text,
            "input_type": str(cfg.get("input-type") or "chat"),
            "output_type": str(cfg.get("output-type") or "chat"),
            "session_id": session_id,
            "user_id": self.env.user,
        }
        if component := str(cfg.get("output-component") or "").strip():
            body["output_component"] = component
        if tweaks := await self._tweaks():
            body["tweaks"] = tweaks
        return body

    # --- streaming -------------------------------------------------------------------------------

    async def stream(self) -> AsyncIterator[ev.Event]:
        session_id = self.env.session.current
        if not isinstance(session_id, str) or not session_id:
            session_id = const.SESSION_PREFIX + uuid.uuid4().hex
            yield ev.SessionId(session_id)
        try:
            body = await self._body(session_id)
            if self.left_out:
                names = ", ".join(repr(n) for n in self.left_out)
                log.info("%s: not sent, only a link: %s", self.platform, names)
                yield ev.Text(t("(Not sent to {p}: {names}; it only came as a link, which {p} cannot fetch.)",
                                "（未发送给 {p}：{names}；它只以链接形式提供，{p} 无法获取。）",
                                p=self.platform, names=names) + "\n\n")
            streaming = self.env.config.get("streaming", True) is not False
            url = self.root + const.RUN_PATH.format(flow=quote(self.flow, safe=""))
            async with open_stream(self.env.client, "POST", url, budget=self.env.budget(), platform=self.platform,
                                   error_parser=self._error, headers=self.headers, json=body,
                                   params={"stream": "true" if streaming else "false"}) as resp:
                ctype = resp.headers.get("content-type", "").lower()
                if "event-stream" not in ctype:
                    for item in self._from_result(await self._read_document(resp, ctype)):
                        yield item
                    return
                st = _StreamState()
                chunks = resp.aiter_bytes()
                touch = self.env.touch  # every chunk is life for idle-timeout
                decoder = ConcatJSONDecoder()
                ended = False
                while not st.finished:
                    chunk = await anext(chunks, None)
                    if chunk is None:
                        objs, ended = decoder.close(), True
                    else:
                        touch()
                        objs = decoder.feed(chunk)
                    batch: list[ev.Event] = []
                    failed: RunnerError | None = None
                    try:
                        for obj in objs:
                            batch.extend(self._map(obj, st))
                            if st.finished:
                                break
                    except RunnerError as exc:
                        failed = exc
                    # everything one read brought as few kit events as possible (a burst of tokens
                    # arrives in one read); what came before a failure is still shown
                    for item in merged(batch):
                        yield item
                    if failed is not None:
                        raise failed
                    if ended:
                        break
                if st.finished:
                    await finish_body(chunks)  # lets the connection be reused
            if st.error is not None:
                raise flow_failed(*st.error)
            if not st.seen:
                raise RunnerError("upstream.empty_response", f"{self.platform} closed the stream without sending anything")
            if not st.finished:
                raise RunnerError("upstream.unavailable", f"{self.platform} closed the stream before the answer finished")
            for item in self._finish(st):
                yield item
        finally:
            self._clean_up()  # also when the run failed or was stopped (this generator closed)

    async def _read_document(self, resp: httpx.Response, ctype: str) -> Any:
        """A 2xx body that is not a stream: the non-stream RunResponse, or a page that is not Langflow."""
        raw = await read_bounded(resp, MAX_JSON_BODY + 1, self.platform, strict=True)
        if len(raw) > MAX_JSON_BODY:
            raise RunnerError("upstream.protocol", f"{self.platform} response exceeds {MAX_JSON_BODY} bytes")
        doc = json_doc(raw) if raw.strip()[:1] == b"{" else None
        if not isinstance(doc, dict):
            kind = "an HTML page" if errors.looks_html(raw, ctype) else "a body that is not JSON"
            if not raw.strip():
                raise RunnerError("upstream.empty_response", f"{self.platform} answered with an empty body")
            raise RunnerError("upstream.protocol",
                              f"{self.platform} answered HTTP {resp.status_code} with {kind} ({BASE_URL_HINT})")
        return doc

    def _from_result(self, doc: dict[str, Any]) -> list[ev.Event]:
        if "outputs" not in doc and "detail" in doc:  # an error envelope sent with a 2xx status
            raise parse_envelope(500, json.dumps(doc).encode(), "application/json", self.flow)
        text, usage = parse_result(doc)
        out: list[ev.Event] = []
        if text is not None:
            out.append(ev.FinalText(text))
        if usage is not None:
            out.append(usage)
        return out

    def _map(self, obj: Any, st: _StreamState) -> list[ev.Event]:
        if not isinstance(obj, dict):
            raise RunnerError("upstream.protocol", f"{self.platform} sent a stream event that is not an object")
        st.seen = True
        name = obj.get("event")
        data = obj.get("data")
        if name == "token":
            return self._token(data, st)
        if name == "add_message":
            return self._message(data, st)
        if name == "end":
            st.finished = True
            st.result = data.get("result") if isinstance(data, dict) else None
            return []
        if name == "error":
            found = stream_error(data)
            if isinstance(data, dict) and isinstance(data.get("error"), str) and "text" not in data:
                message, component = found or ("unknown error", None)
                if st.error is not None:  # the Message object named the component and the plain reason
                    message, component = st.error
                raise flow_failed(message, component)
            if found is not None:
                st.error = found
            return []
        if name not in const.IGNORED_EVENTS and str(name) not in self._unknown:
            self._unknown.add(str(name))
            log.info("%s: skipping unknown stream event %r", self.platform, name)
        return []

    def _show(self, st: _StreamState, mid: str, piece: str) -> list[ev.Event]:
        out: list[ev.Event] = []
        if mid not in st.messages:
            if st.order and piece:
                out.append(ev.Text("\n\n"))  # a second AI message (another Chat Output)
            st.messages[mid] = ""
            st.order.append(mid)
        if piece:
            st.messages[mid] += piece
            out.append(ev.Text(piece))
        return out

    def _token(self, data: Any, st: _StreamState) -> list[ev.Event]:
        if not isinstance(data, dict):
            return []
        chunk = data.get("chunk")
        if not isinstance(chunk, str) or not chunk:
            return []
        st.tokens = True
        return self._show(st, str(data.get("id") or "_"), chunk)

    def _message(self, data: Any, st: _StreamState) -> list[ev.Event]:
        if not isinstance(data, dict) or data.get("sender") == "User" or data.get("category") == "error":
            return []  # the user's own message echoed back
        text = data.get("text")
        if not isinstance(text, str):
            return []
        mid = str(data.get("id") or f"_{len(st.order)}")
        if (u := message_usage(data)) is not None:
            st.usage = u
        out = self._tools(mid, data.get("content_blocks"), st)
        shown = st.messages.get(mid, "")
        if text.startswith(shown):
            out += self._show(st, mid, text[len(shown):])
        return out  # otherwise a rewrite of text already shown: the end result settles it

    def _tools(self, mid: str, blocks: Any, st: _StreamState) -> list[ev.Event]:
        """An Agent component's steps: ``content_blocks[].contents[]`` of ``type: "tool_use"``,
        re-sent with every update of the message (upserts keyed by position)."""
        out: list[ev.Event] = []
        for bi, block in enumerate(blocks if isinstance(blocks, list) else []):
            contents = block.get("contents") if isinstance(block, dict) else None
            for ci, item in enumerate(contents if isinstance(contents, list) else []):
                if not isinstance(item, dict) or item.get("type") != "tool_use" or not item.get("name"):
                    continue
                call_id = f"{mid}:{bi}:{ci}"
                name = str(item["name"])
                if call_id not in st.tools:
                    st.tools[call_id] = False
                    args = item.get("tool_input", item.get("input"))
                    params = args if isinstance(args, dict) else ({"input": args} if args else {})
                    out.append(ev.ToolStarted(call_id=call_id, name=name, parameters=params))
                error, output = item.get("error"), item.get("output")
                if not st.tools[call_id] and (error is not None or output is not None):
                    st.tools[call_id] = True
                    out.append(ev.ToolCompleted(call_id=call_id, name=name, result=output,
                                                error=str(error) if error is not None else None))
        return out

    def _finish(self, st: _StreamState) -> list[ev.Event]:
        text, usage = parse_result(st.result)
        out: list[ev.Event] = []
        if not st.tokens and text is not None:
            out.append(ev.FinalText(text))  # authoritative when nothing was streamed token by token
        if usage is None:
            usage = st.usage
        if usage is not None:
            out.append(usage)
        return out


def _image_delete(flow: str, path: Any) -> str | None:
    """The v1 delete route for ``<flow>/<stored name>``, the path the v1 upload returned."""
    folder, _, stored = path.partition("/") if isinstance(path, str) else ("", "", "")
    if folder != flow or not stored or "/" in stored or "\\" in stored or ".." in stored:
        return None
    return const.IMAGE_DELETE_PATH.format(flow=flow, name=quote(stored, safe=""))


def _file_delete(file_id: Any) -> str | None:
    """The v2 delete route for the file id the v2 upload returned (a UUID)."""
    try:
        return const.FILE_DELETE_PATH.format(id=str(uuid.UUID(str(file_id))))
    except ValueError:
        return None
