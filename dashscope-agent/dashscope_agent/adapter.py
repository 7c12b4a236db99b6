"""DashScope (Alibaba Cloud Bailian / Model Studio) application API adapter.

One turn is one ``POST {base}/apps/{app_id}/completion`` with ``X-DashScope-SSE: enable`` and
``parameters.incremental_output: true`` (platforms.md §4). The body is SSE; every event is

    id:<n>
    event:result
    :HTTP_STATUS/200
    data:{"output": {"text", "finish_reason", "session_id", "thoughts", "doc_references",
                     "workflow_message"}, "usage": {"models": [...]}, "request_id"}

``finish_reason`` is the *string* ``"null"`` until the last event (``"stop"``, sometimes
``"length"``). A failure after the headers is ``event:error`` with ``:HTTP_STATUS/<code>`` and
``data:{"code", "message", "request_id"}``, then the stream ends. ``output.session_id`` is the
conversation handle (server-side history); there is no end-user field, so the kit's identity
option only decides whose stored session a message continues.

The application API has no call to stop a running answer and none to end or delete a session: a
cancelled run only closes its stream, and a reset session is simply never sent again (DashScope
documents a session as kept for one hour).
"""

from __future__ import annotations

import json
import re
import weakref
from collections.abc import AsyncIterable, AsyncIterator
from typing import Any

from runner_kit import events as ev
from runner_kit import texts
from runner_kit.errors import RunnerError, SessionMissing
from runner_kit.http import finish_body
from runner_kit.inputs import InputFile, upload_all
from runner_kit.logs import get_logger
from runner_kit.runner import Adapter
from runner_kit.streams import iter_sse
from runner_kit.wire import maybe_json, open_answer, tool_input

from . import const, uploads
from .citations import Citations
from .errors import BASE_URL_HINT, error_fields, map_error, parse_envelope, session_gone

log = get_logger("runner_kit.dashscope")

MAX_JSON_BODY = 16 * 1024 * 1024
DEFAULT_BASE_PROMPT = "Please look at the attached images or files and answer."
DEFAULT_BASE_PROMPT_ZH = "请查看附带的图片或文件并回答。"
_NOT_FINISHED = (None, "", "null")
# each run's prepared images and files (held only while the run's environment lives)
_PREPARED: weakref.WeakKeyDictionary[Any, _Prepared] = weakref.WeakKeyDictionary()
_COMPLETION_SUFFIX = re.compile(r"/apps/[^/]+/completion$")


def normalize_base(raw: Any) -> str:
    """The API root ending in ``/api/v1``, from what an owner may paste.

    Accepted: the host alone (``https://dashscope-intl.aliyuncs.com``), the documented base with
    ``/api/v1``, either with a trailing slash, the OpenAI-compatible ``/compatible-mode/v1`` base of
    the same host, and the whole completion URL copied from the Bailian console.
    """
    url = str(raw or "").strip() or const.DEFAULT_BASE_URL
    if not re.match(r"(?i)^https?://[^/\s]+", url) or any(c.isspace() for c in url):
        raise RunnerError(
            "config.invalid",
            "config key 'base-url' must be an http(s) address such as " + const.DEFAULT_BASE_URL,
        )
    url = url.rstrip("/")
    url = _COMPLETION_SUFFIX.sub("", url)
    if url.endswith("/compatible-mode/v1"):
        url = url[: -len("/compatible-mode/v1")]
    if not url.endswith(const.API_PREFIX):
        url += const.API_PREFIX
    return url


def _web_url(f: InputFile) -> str | None:
    url = (f.url or "").strip()
    return url if url.lower().startswith(("http://", "https://")) else None


def _is_image(f: InputFile) -> bool:
    return f.kind == "image" or f.mime_type.startswith("image/")


def _shown_name(name: str) -> str:
    """A file name the sender chose, quoted and shortened for a chat line."""
    clean = " ".join(name.split())
    return f"'{clean[:57]}...'" if len(clean) > 60 else f"'{clean}'"


class _Prepared:
    """What of the message's images and files goes up, and a note for what does not."""

    __slots__ = ("files", "images", "notes", "oss", "reasons")

    def __init__(self) -> None:
        self.images: list[str] = []
        self.files: list[str] = []
        self.oss = False  # an image is an oss:// link of the temporary storage
        self.notes: list[str] = []  # chat lines, in the run's language
        self.reasons: list[str] = []  # why each left-out file was left out (for an error message)

    def leave_out(self, names: list[str], en: str, zh: str, **values: str) -> None:
        if not names:
            return
        shown = texts.join([_shown_name(n) for n in names])
        self.notes.append(texts.t("(Not sent to DashScope: {names}; " + en + ".)",
                                  "（未发送给 DashScope：{names}；" + zh + "。）", names=shown, **values))
        self.reasons.append(f"{', '.join(_shown_name(n) for n in names)}: {texts.Said(en, zh, **values)}")
        log.info("%s: not sent: %s (%s)", const.PLATFORM, ", ".join(_shown_name(n) for n in names),
                 en.format(**values) if values else en)


class DashScopeAdapter(Adapter):
    """Maps one LangBot turn onto a Bailian agent or workflow app."""

    platform = const.PLATFORM
    session_key = const.SESSION_KEY

    def __init__(self, env):
        super().__init__(env)
        cfg = env.config
        self.base = normalize_base(cfg.get("base-url"))
        self.app_id = str(cfg["app-id"]).strip()
        if "/" in self.app_id or "?" in self.app_id or any(c.isspace() for c in self.app_id):
            raise RunnerError("config.invalid", "config key 'app-id' must be the Bailian app id alone (letters and digits)")
        self.workflow = cfg.get("app-type") == const.WORKFLOW_APP
        self.headers = {
            "Authorization": f"Bearer {cfg['api-key']}",
            "X-DashScope-SSE": "enable",
            "Accept": "text/event-stream",
        }
        workspace = str(cfg.get("workspace-id") or "").strip()
        if workspace:
            self.headers["X-DashScope-WorkSpace"] = workspace
        self.api_key = str(cfg["api-key"])
        self.upload_model = str(cfg.get("image-upload-model", const.DEFAULT_UPLOAD_MODEL) or "").strip()
        self.show_references = cfg.get("show-references", True) is not False

    # --- request building ----------------------------------------------------------------------

    async def _prepare(self) -> _Prepared:
        """Links go up as they came; images sent as data are put into DashScope's temporary storage
        (uploads.py); documents and voice sent as data cannot go up with an API key (a Bailian app
        reads those only from links or from Bailian's own file store), so they are left out."""
        out = _Prepared()
        data_images: list[InputFile] = []
        no_upload: list[str] = []
        documents: list[str] = []
        for f in self.env.input.files:
            url = _web_url(f)
            if url is not None:
                (out.images if _is_image(f) else out.files).append(url)
            elif f.data is None:
                continue  # the kit skipped what it could not read
            elif not _is_image(f):
                documents.append(f.name)
            elif not self.upload_model:
                no_upload.append(f.name)
            else:
                data_images.append(f)
        out.leave_out(documents, "the app takes documents and audio only as links",
                      "应用只接收链接形式的文档和音频")
        out.leave_out(no_upload, "uploading images is turned off ({label} is empty)",
                      "已关闭图片上传（{label}为空）", label=texts.label("image-upload-model"))
        if data_images:
            await self._upload_images(data_images, out)
        return out

    async def _upload_images(self, images: list[InputFile], out: _Prepared) -> None:
        client = self.env.client
        try:
            policy = await uploads.get_policy(client, self.base, self.api_key, self.upload_model, self.env.budget())
        except uploads.UploadError as err:
            # the reason goes to the chat: a key an upstream error echoed is hidden as in a failure
            out.leave_out([f.name for f in images], "they could not be uploaded ({why})", "图片未能上传（{why}）",
                          why=self.env.redact(err.why))
            return

        async def one(f: InputFile) -> str | uploads.UploadError:
            try:
                return await uploads.upload(client, policy, f, self.env.budget())
            except uploads.UploadError as err:
                return err

        got = await upload_all(images, one)
        failed: dict[str, list[str]] = {}
        for f, link in zip(images, got, strict=True):
            if isinstance(link, str):
                out.images.append(link)
                out.oss = True
            else:
                failed.setdefault(self.env.redact(link.why), []).append(f.name)
        for why, names in failed.items():
            out.leave_out(names, "it could not be uploaded ({why})", "未能上传（{why}）", why=why)

    def _biz_params(self) -> dict[str, Any]:
        params: dict[str, Any] = dict(self.env.config.get("biz-params") or {})
        if self.workflow:
            params.update(self.env.input.params)  # pipeline variables become the Start node's inputs
        return params

    def request(self, prepared: _Prepared | None = None) -> tuple[str, dict[str, Any]]:
        cfg, inp = self.env.config, self.env.input
        prepared = prepared or _Prepared()
        text = inp.text.strip()
        images, files = prepared.images, prepared.files
        if not text and not images and not files:
            why = "; ".join(str(r) for r in prepared.reasons) or "images and files go up only as links or uploads"
            raise RunnerError("input.invalid", f"nothing in this message can be sent to DashScope ({why})")
        prompt = text or texts.own_or_builtin(cfg.get("base-prompt"), DEFAULT_BASE_PROMPT, DEFAULT_BASE_PROMPT_ZH)
        data: dict[str, Any] = {"prompt": prompt}
        if self.env.session.current:
            data["session_id"] = self.env.session.current
        memory = str(cfg.get("memory-id") or "").strip()
        if memory:
            data["memory_id"] = memory
        biz = self._biz_params()
        if biz:
            data["biz_params"] = biz
        if images:
            data["image_list"] = images
        if files:
            data["file_list"] = files
        reference_type = str(cfg.get("doc-reference-type") or "")
        if reference_type in const.DOC_REFERENCE_TYPES:
            data["doc_reference_type"] = reference_type
        parameters: dict[str, Any] = {"incremental_output": True}
        if self.workflow:
            mode = str(cfg.get("flow-stream-mode") or const.DEFAULT_FLOW_STREAM_MODE)
            parameters["flow_stream_mode"] = mode
        else:
            if cfg.get("show-thoughts", True) is not False:
                parameters["has_thoughts"] = True
            thinking = self._thinking()
            if thinking is not None:
                parameters["enable_thinking"] = thinking
        url = self.base + const.COMPLETION_PATH.format(app_id=self.app_id)
        return url, {"input": data, "parameters": parameters, "debug": {}}

    def _thinking(self) -> bool | None:
        """``parameters.enable_thinking`` (agent apps): ``auto`` is what LangBot 4.10 sent, on unless
        the reasoning is hidden; ``app`` sends nothing and leaves it to the app."""
        setting = str(self.env.config.get("enable-thinking") or const.THINKING_AUTO)
        if setting == const.THINKING_APP:
            return None
        if setting in (const.THINKING_ON, const.THINKING_OFF):
            return setting == const.THINKING_ON
        return self.env.config.get("remove-think") is not True

    # --- streaming -------------------------------------------------------------------------------

    async def stream(self) -> AsyncIterator[ev.Event]:
        prepared = _PREPARED.get(self.env)
        if prepared is None:  # the retry on a fresh session reuses what the first attempt uploaded
            prepared = _PREPARED[self.env] = await self._prepare()
        url, body = self.request(prepared)
        sent_session = bool(body["input"].get("session_id"))
        headers = dict(self.headers)
        if prepared.oss:
            headers[const.OSS_RESOLVE_HEADER] = "enable"  # lets the app read the oss:// links

        state = _State(sent=body["input"].get("session_id"), citations=Citations(keep=self.show_references))
        state.notes = prepared.notes
        # only DashScope's own word that the session is unknown means the stored id is gone
        async with open_answer(self.env.client, url, budget=self.env.budget(), platform=self.platform,
                               parse_error=parse_envelope, hint=BASE_URL_HINT,
                               gone=session_gone if sent_session else None, headers=headers,
                               json=body) as answer:
            resp = answer.resp
            ctype = resp.headers.get("content-type", "").lower()
            if answer.json is not None:
                for item in self._chunk(answer.json, state, None, blocking=True):
                    yield item
                for item in self._finish(state):
                    yield item
                return
            sniff = _StatusSniffer()
            events = iter_sse(sniff.wrap(resp.aiter_bytes()), touch=self.env.touch)
            async for sse in events:
                if not sse.data:
                    continue
                data = sse.json()
                if not isinstance(data, dict):
                    raise RunnerError("upstream.protocol", f"{self.platform} sent an event that is not an object")
                if sse.event == "error":
                    fields = error_fields(data) or (None, None)
                    if sent_session and not state.seen_events and session_gone(sniff.status or 400, sse.data):
                        raise SessionMissing()
                    partial = _usage(state.usage)
                    if partial is not None:
                        yield partial  # what the turn cost so far still reaches the run ledger
                    raise map_error(sniff.status if sniff.status and sniff.status >= 400 else None, *fields)
                for item in self._chunk(data, state, sniff.status):
                    yield item
                if state.finished:
                    break
            if state.finished:
                await finish_body(events)  # lets the connection be reused
        if not state.seen_events:
            if "event-stream" not in ctype:
                raise RunnerError(
                    "upstream.protocol",
                    f"{self.platform} answered without a content type and sent no events ({BASE_URL_HINT})",
                )
            raise RunnerError("upstream.empty_response", f"{self.platform} closed the stream without sending anything")
        if not state.finished:
            raise RunnerError("upstream.unavailable", f"{self.platform} closed the stream before the answer finished")
        for item in self._finish(state):
            yield item

    def _chunk(self, data: dict[str, Any], st: _State, status: int | None, blocking: bool = False) -> list[ev.Event]:
        out_doc = data.get("output")
        if not isinstance(out_doc, dict):
            fields = error_fields(data)
            if fields is not None and fields[0]:  # an error envelope sent as a result / with a 2xx status
                raise map_error(status if status and status >= 400 else None, *fields)
            raise RunnerError("upstream.protocol", f"{self.platform} sent an event without 'output'")
        out: list[ev.Event] = []
        if not st.seen_events:
            st.seen_events = True
            # what was left out of the message, said once DashScope took it (a stored session it
            # rejects is retried before anything is shown)
            out.extend(ev.Text(note + "\n\n") for note in st.notes)
        sid = out_doc.get("session_id")
        if isinstance(sid, str) and sid and sid != st.session:
            if st.sent and st.session is None and sid != st.sent:
                log.info("%s: the stored session was not continued; DashScope started a new one", self.platform)
            st.session = sid
            out.append(ev.SessionId(sid))
        reasoning = out_doc.get("reasoning_content")
        if isinstance(reasoning, str) and reasoning:
            out.append(ev.Think(reasoning))
        thoughts = out_doc.get("thoughts")
        if isinstance(thoughts, list) and not self.workflow:
            out.extend(self._thoughts(thoughts, st))
        text = self._answer_piece(out_doc, st)
        shown = st.citations.whole(text) if blocking else st.citations.feed(text)
        if shown:
            st.any_text = True
            out.append(ev.Text(shown))
        refs = out_doc.get("doc_references")
        if isinstance(refs, list) and refs:
            st.references = refs
        usage = data.get("usage")
        if usage:
            st.usage = usage  # each event carries the run's usage so far; the last one counts
        finish = out_doc.get("finish_reason")
        if blocking or finish not in _NOT_FINISHED:
            st.finished = True
            if finish == "length":
                log.info("%s: the answer was cut at the app's length limit", self.platform)
        return out

    def _answer_piece(self, out_doc: dict[str, Any], st: _State) -> str:
        """The answer text this event adds.

        Agent apps and ``agent_format`` / ``full_thoughts`` workflows: ``output.text``.
        ``message_format`` workflows stream the output and End nodes' messages in
        ``workflow_message.message.content`` and close with one event whose ``output.text`` is the
        End node's whole text (Bailian "调用工作流应用", message_format example): once messages were
        shown that closing text only adds what extends them, and it is the answer when no node
        streamed (a node without its streaming switch)."""
        text = out_doc.get("text")
        text = text if isinstance(text, str) else ""
        message = _workflow_text(out_doc.get("workflow_message")) if self.workflow and not st.text_seen else ""
        if message:
            st.messages += message
            return message
        if not text:
            return ""
        if st.messages:
            if text.startswith(st.messages):  # the whole text again: only what is new
                extra = text[len(st.messages) :]
                st.messages = text
                return extra
            log.info("%s: the workflow's closing text differs from the node messages shown; keeping those",
                     self.platform)
            return ""
        st.text_seen = True
        return text

    def _thoughts(self, thoughts: list[Any], st: _State) -> list[ev.Event]:
        """Agent thoughts as reasoning and tool steps.

        A thought list may be re-sent whole on every event or carry only what is new; a step is
        therefore known by what it is (action type, name, input), and reasoning text grows by
        whatever extends the text already shown."""
        out: list[ev.Event] = []
        for t in thoughts:
            if not isinstance(t, dict):
                continue
            action_type = str(t.get("action_type") or "")
            name = str(t.get("action_name") or t.get("action") or "")
            thought = t.get("thought") if isinstance(t.get("thought"), str) else ""
            if action_type in const.REASONING_ACTIONS or (not action_type and not name):
                piece = st.grow_reasoning(thought)
                if piece:
                    out.append(ev.Think(piece))
                continue
            if action_type == "response":
                continue  # the answer itself, streamed as output.text
            params = tool_input(t.get("action_input"))
            step, new = st.step(action_type, name, params)
            if new:
                if thought.strip():
                    out.append(ev.Think(thought))
                out.append(ev.ToolStarted(call_id=step["id"], name=name or action_type, parameters=params))
            observation = t.get("observation")
            if observation not in (None, "") and not step["done"]:
                step["done"] = True
                out.append(ev.ToolCompleted(call_id=step["id"], name=name or action_type, result=maybe_json(observation)))
        return out

    def _finish(self, st: _State) -> list[ev.Event]:
        out: list[ev.Event] = []
        cfg = self.env.config
        rest = st.citations.flush()
        if rest:
            st.any_text = True
            out.append(ev.Text(rest))
        if st.references and self.show_references:
            block = render_references(st.references, str(cfg.get("references_quote") or ""))
            if block:
                out.append(ev.Text(("\n\n" if st.any_text else "") + block))
        usage = _usage(st.usage)
        if usage is not None:
            out.append(usage)
        return out


class _State:
    __slots__ = ("any_text", "citations", "finished", "messages", "notes", "reasoning", "references", "seen_events",
                 "sent", "session", "steps", "text_seen", "usage")

    def __init__(self, sent: str | None, citations: Citations | None = None) -> None:
        self.sent = sent  # the session id this request continued (None: a new one)
        self.citations = citations or Citations()
        self.notes: list[str] = []  # what was left out of the message, for the chat
        self.messages = ""  # message_format: the workflow node messages shown so far
        self.session: str | None = None
        self.finished = False
        self.seen_events = False
        self.text_seen = False
        self.any_text = False
        self.reasoning = ""
        self.references: list[Any] = []
        self.steps: list[dict[str, Any]] = []
        self.usage: Any = None  # the latest usage object DashScope sent

    def step(self, action_type: str, name: str, params: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """The tool step this thought belongs to, and whether it is new.

        The same step comes again (whole lists re-sent, or the observation added later, sometimes
        before its input is complete): same type and name, and the same input or one side without one."""
        key = json.dumps(params, sort_keys=True, ensure_ascii=False) if params else ""
        for step in reversed(self.steps):
            if step["type"] != action_type or step["name"] != name:
                continue
            if step["input"] == key or (not step["done"] and (not step["input"] or not key)):
                step["input"] = step["input"] or key
                return step, False
        step = {"id": f"step-{len(self.steps) + 1}", "type": action_type, "name": name, "input": key, "done": False}
        self.steps.append(step)
        return step, True

    def grow_reasoning(self, piece: str) -> str:
        """What ``piece`` adds, whether DashScope sent the whole reasoning so far or only new text."""
        if not piece:
            return ""
        if self.reasoning and piece.startswith(self.reasoning):
            new = piece[len(self.reasoning) :]
            self.reasoning = piece
            return new
        self.reasoning += piece
        return piece


class _StatusSniffer:
    """Reads the ``:HTTP_STATUS/<code>`` comment lines the SSE decoder skips (the status of a
    mid-stream error is only stated there) while passing every byte through unchanged. Only the
    last tag in a chunk matters, found with one C-level search; the chunk's last bytes are kept so a
    tag split across two chunks is still read."""

    __slots__ = ("_tail", "status")

    _TAG = b":HTTP_STATUS/"
    _KEEP = len(_TAG) + 3

    def __init__(self) -> None:
        self.status: int | None = None
        self._tail = b""

    async def wrap(self, chunks: AsyncIterable[bytes]) -> AsyncIterator[bytes]:
        async for chunk in chunks:
            self.feed(chunk)
            yield chunk

    def feed(self, chunk: bytes) -> None:
        if self._tail:
            self._scan(self._tail + chunk[: self._KEEP])
        self._scan(chunk)
        keep = self._KEEP + 1  # the tag, its digits and the line break before it
        self._tail = chunk[-keep:] if len(chunk) >= keep else (self._tail + chunk)[-keep:]

    def _scan(self, data: bytes) -> None:
        i = data.rfind(self._TAG)
        if i < 1 or data[i - 1] not in (10, 13):  # a comment line starts after a line break
            return
        digits = data[i + len(self._TAG) : i + self._KEEP]
        if len(digits) == 3 and digits.isdigit():
            self.status = int(digits)


def _workflow_text(message: Any) -> str:
    """Text of a workflow node message (``flow_stream_mode: message_format``)."""
    if not isinstance(message, dict):
        return ""
    inner = message.get("message")
    if isinstance(inner, dict) and isinstance(inner.get("content"), str):
        return inner["content"]
    return ""


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, float) and value.is_integer() and value >= 0:
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def _usage(usage: Any) -> ev.Usage | None:
    """Token counts summed over ``usage.models[]`` (one entry per model the app called)."""
    if not isinstance(usage, dict):
        return None
    models = usage.get("models")
    prompt = completion = None
    if isinstance(models, list):
        for m in models:
            if not isinstance(m, dict):
                continue
            i, o = _int(m.get("input_tokens")), _int(m.get("output_tokens"))
            if i is not None:
                prompt = (prompt or 0) + i
            if o is not None:
                completion = (completion or 0) + o
    if prompt is None and completion is None:
        prompt, completion = _int(usage.get("input_tokens")), _int(usage.get("output_tokens"))
    if prompt is None and completion is None:
        return None
    total = prompt + completion if prompt is not None and completion is not None else None
    return ev.Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=total)


def render_references(refs: list[Any], quote: str) -> str:
    """The app's cited documents, after the answer: the quote line, then one line per document with
    the numbers the answer cites it by (several slices of one document share its line)."""
    order: list[str] = []
    numbers: dict[str, list[str]] = {}
    lines: dict[str, str] = {}
    for n, ref in enumerate(refs, 1):
        if not isinstance(ref, dict):
            continue
        name = " ".join(str(ref.get("doc_name") or ref.get("title") or "").split())
        url = str(ref.get("doc_url") or "").strip()
        if not name and not url:
            continue
        key = f"{name}\x1f{url}"
        if key not in numbers:
            order.append(key)
            numbers[key] = []
            line = name
            if url.lower().startswith(("http://", "https://")) and not any(c.isspace() for c in url):
                line = f"{line} {url}" if line else url
            lines[key] = line
        index = str(ref.get("index_id") or n).strip()
        if index and index not in numbers[key]:
            numbers[key].append(index)
    if not order:
        return ""
    body = ["".join(f"[{i}]" for i in numbers[k]) + (" " + lines[k] if lines[k] else "") for k in order]
    head = quote.strip()
    return "\n".join(([head] if head else []) + body)
