"""Dify Service API adapter.

Stream event order (platforms.md §1):
- Chatbot: ``message``* → ``message_end``
- Agent: (``agent_thought`` | ``agent_message`` | ``message_file``)* → ``message_end``
- New Agent: ``agent_message``* with ``agent_thought`` → one closing full ``message`` → ``message_end``
- Chatflow: ``workflow_started`` → node events, ``reasoning_chunk``*, ``message``* → ``workflow_finished``
  → ``message_end`` (Dify 1.12.1; the order was the other way round before, and either is read)
- Workflow (``/workflows/run``): ``workflow_started`` → ``text_chunk``* → ``workflow_finished``
- Any of them may end with an ``error`` event (HTTP status stays 200); ``event: ping`` keep-alives
  arrive every 10 s without data.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any
from urllib.parse import quote

import httpx

from runner_kit import events as ev
from runner_kit import outfiles
from runner_kit.errors import RunnerError
from runner_kit.http import finish_body, open_stream, read_bounded, read_json, timeout_for
from runner_kit.inputs import InputFile, safe_file_name, upload_all, upload_failed
from runner_kit.logs import get_logger
from runner_kit.netguard import chat_link
from runner_kit.pending import Incomplete, PendingAction
from runner_kit.runner import CANCEL_GRACE, Adapter
from runner_kit.streams import iter_sse
from runner_kit.texts import t
from runner_kit.wire import as_float, json_object, maybe_json, open_answer, sse_objects, tool_input

from . import const
from .errors import BASE_URL_HINT, conversation_missing, error_fields, map_error, parse_envelope
from .human_input import Form

log = get_logger("runner_kit.dify")

MAX_JSON_BODY = 16 * 1024 * 1024
#: how long a chatflow past workflow_finished waits for message_end at most (Dify 1.12.1 first runs
#: the end-of-answer output moderation, whose message_replace comes between, and saves the message)
CLOSING_EVENT_WAIT = 10.0
MAX_FILES_OUT = outfiles.MAX_FILES  # files one answer links at most
_DIFY_FILE = "__dify__file__"  # how Dify marks a file object in outputs and message_end.files


def _file_type(f: InputFile) -> str:
    major = f.mime_type.split("/", 1)[0]
    if f.kind == "image" or major == "image":
        return "image"
    if major in ("audio", "video"):
        return major
    return "document"


class DifyAdapter(Adapter):
    """Maps one LangBot turn onto ``/chat-messages`` or ``/workflows/run``."""

    platform = const.PLATFORM
    session_key = const.SESSION_KEY

    def __init__(self, env):
        super().__init__(env)
        cfg = env.config
        self.base = str(cfg["base-url"]).rstrip("/")
        self.app_type = cfg["app-type"]
        self.workflow = self.app_type == const.WORKFLOW_APP
        self.headers = {"Authorization": f"Bearer {cfg['api-key']}"}
        self.task_id: str | None = None
        self._done = False
        self._unknown: set[str] = set()
        # kept per session like the conversation id: in a shared conversation only the asker (or an
        # approver) answers, and everyone else's messages wait until the form is settled
        self.pending = PendingAction(env, const.PENDING_KEY, "Dify form")

    # --- request building ----------------------------------------------------------------------

    def _inputs(self) -> dict[str, Any]:
        cfg, ctx, inp = self.env.config, self.env.ctx, self.env.input
        inputs: dict[str, Any] = dict(cfg.get("inputs") or {})
        if self.workflow:
            conv = ctx.conversation
            session = None
            if conv is not None and conv.launcher_type and conv.launcher_id:
                session = f"{conv.launcher_type}_{conv.launcher_id}"
            inputs.update(
                {
                    # the variables LangBot's built-in Dify runner always sent to workflows
                    "langbot_user_message_text": inp.text,
                    "langbot_session_id": session or (conv.session_id if conv else None) or ctx.run_id,
                    "langbot_conversation_id": (conv.conversation_id if conv else None) or "",
                    "langbot_msg_create_time": inp.params.get("msg_create_time", ctx.event.event_time),
                }
            )
        inputs.update(inp.params)
        return inputs

    async def _upload(self, f: InputFile) -> dict[str, Any]:
        ftype = _file_type(f)
        if f.url is not None:
            return {"type": ftype, "transfer_method": "remote_url", "url": f.url}
        name = safe_file_name(f.name)
        async with open_stream(
            self.env.client,
            "POST",
            self.base + const.UPLOAD_PATH,
            budget=self.env.budget(),
            platform=self.platform,
            error_parser=lambda s, b, c: upload_failed(name, parse_envelope(s, b, c)),
            headers=self.headers,
            files={"file": (name, f.data or b"", f.mime_type)},
            data={"user": self.env.user},
        ) as resp:
            doc = await read_json(resp, self.platform)
        if not isinstance(doc, dict) or not doc.get("id"):
            raise RunnerError("upstream.protocol", f"{self.platform} upload of '{name}' returned no file id")
        return {"type": ftype, "transfer_method": "local_file", "upload_file_id": doc["id"]}


    async def _request(self) -> tuple[str, dict[str, Any]]:
        cfg, inp = self.env.config, self.env.input
        text = inp.text.strip()
        if not self.workflow and not text and not inp.files:
            raise RunnerError("input.invalid", "the message has no text or files to send to Dify")
        files = await upload_all(inp.files, self._upload)
        body: dict[str, Any] = {
            "inputs": self._inputs(),
            "response_mode": "streaming",
            "user": self.env.user,
        }
        if files:
            body["files"] = files
        if self.workflow:
            return self.base + const.WORKFLOW_PATH, body
        # base-prompt stands in only for a message that has files but no text (Dify needs a query)
        body["query"] = text or str(cfg.get("base-prompt") or "").strip() or "."
        body["conversation_id"] = self.env.session.current or ""
        return self.base + const.CHAT_PATH, body

    # --- streaming -------------------------------------------------------------------------------

    async def stream(self) -> AsyncIterator[ev.Event]:
        res = self.pending.resolve(self._read_click, self._read_typed)
        for item in res.events:
            yield item
        if res.answer is not None and res.record is not None:
            # then what others wrote while the form was open, as one ordinary message
            async for item in self.pending.settle(res, self._submit(res.record, *res.answer), self._send):
                yield item
            return
        if not res.go_on:
            return
        async for item in self._send():
            yield item

    async def _send(self) -> AsyncIterator[ev.Event]:
        """This run's message as a chat message (or a workflow run), streamed."""
        self._done = False
        url, body = await self._request()
        # only Dify's own "Conversation Not Exists." means the stored id is gone; any other 404
        # (a proxy page, a wrong route) is an ordinary error and the id is kept
        cid = body.get("conversation_id")
        gone = (lambda status, raw: conversation_missing(status, raw, cid)) if cid else None
        async with open_answer(self.env.client, url, budget=self.env.budget(), platform=self.platform,
                               parse_error=parse_envelope, hint=BASE_URL_HINT, gone=gone,
                               headers=self.headers, json=body) as answer:
            if answer.json is not None:
                for item in self._blocking(answer.json):
                    yield item
                return
            async for item in self._consume(answer.resp):
                yield item

    async def _consume(self, resp: httpx.Response) -> AsyncIterator[ev.Event]:
        """One event stream (the answer, or a resumed run's ``/workflow/{id}/events``) as events."""
        ctype = resp.headers.get("content-type", "").lower()
        state = _StreamState()
        events = iter_sse(resp.aiter_bytes(), touch=self.env.touch)
        async with aclosing(sse_objects(events, self.platform, complete=state.answered)) as objects:
            while (data := await self._next(objects, state)) is not None:
                for item in self._map(data, state):
                    yield item
                if state.finished:
                    break
        if state.finished:
            await finish_body(events)  # lets the connection be reused
        self._done = True
        if not state.usage_seen and state.run_tokens is not None:  # a chatflow's message_end never came, or had none
            yield ev.Usage(total_tokens=state.run_tokens)
        if not state.message_ended and not state.files_seen:  # the Answer's files, from workflow_finished
            for item in self._attachments(state.run_files, state):
                yield item
        if not state.seen_events:
            if "event-stream" not in ctype:
                raise RunnerError(
                    "upstream.protocol",
                    f"{self.platform} answered without a content type and sent no events ({BASE_URL_HINT})",
                )
            raise RunnerError("upstream.empty_response", f"{self.platform} closed the stream without sending anything")
        if state.form is not None or state.paused:
            for item in self._ask(state):
                yield item
            return
        if not state.finished and not state.answered():
            raise RunnerError(
                "upstream.unavailable", f"{self.platform} closed the stream before the answer finished"
            )

    async def _next(self, objects: AsyncIterator[dict[str, Any]], st: _StreamState) -> dict[str, Any] | None:
        """The next event, or None at the end. A chatflow's answer is complete with the first of
        workflow_finished and message_end: the other (usage, files) is waited for only a moment, so
        a Dify that never sends it (pings only, or silence) cannot turn the answer into a timeout."""
        try:
            if not st.answered():
                return await anext(objects)
            left = self.env.deadline - time.monotonic()
            idle = self.env.idle_timeout or math.inf
            return await asyncio.wait_for(anext(objects), max(0.0, min(CLOSING_EVENT_WAIT, left / 2, idle / 2)))
        except StopAsyncIteration:
            return None
        except TimeoutError:
            log.info("%s: the answer was complete; its closing event did not come", self.platform)
            return None

    def _map(self, data: dict[str, Any], st: _StreamState) -> list[ev.Event]:
        name = data.get("event")
        st.seen_events = True
        out: list[ev.Event] = []
        if self.task_id is None and data.get("task_id"):
            self.task_id = data["task_id"]
        cid = data.get("conversation_id")
        if cid and cid != st.conversation_id:
            st.conversation_id = cid
            out.append(ev.SessionId(cid))
        if name in ("message", "agent_message", "text_chunk"):
            st.text_seen = True
        if name == "message" or name == "agent_message":
            answer = data.get("answer") or ""
            if name == "agent_message":
                st.agent_messages = True
                if answer:
                    st.agent_text.append(answer)
                    st.agent_len += len(answer)
                out.append(ev.Text(answer))
            elif st.agent_messages:
                out.append(ev.FinalText(answer))  # New Agent's closing message repeats the whole answer
            else:
                out.append(ev.Text(answer))
        elif name == "text_chunk":
            text = (data.get("data") or {}).get("text") or ""
            if text:
                st.streamed.append(text)
                out.append(ev.Text(text))
        elif name == "reasoning_chunk":
            piece = (data.get("data") or {}).get("reasoning") or ""
            if piece:
                out.append(ev.Think(piece))
        elif name == "agent_thought":
            out.extend(self._thought(data, st))
        elif name == "message_file":
            if data.get("belongs_to", "assistant") == "assistant" and data.get("url"):
                st.files_seen = True
                kind = "image" if data.get("type") == "image" else "file"
                if (link := self._link(str(data["url"]))) is not None:
                    out.append(ev.Attachment(url=link, kind=kind))
        elif name == "message_replace":
            out.append(ev.ReplaceText(data.get("answer") or ""))
        elif name == "message_end":
            usage = (data.get("metadata") or {}).get("usage")
            if isinstance(usage, dict):
                st.usage_seen = True
                out.append(_usage(usage))
            if not st.files_seen:  # a chatflow's Answer files come only here (chat apps send message_file)
                out.extend(self._attachments(data.get("files"), st))
            st.message_ended = True
            # a chatflow sends both, workflow_finished first (Dify 1.12.1): the answer is complete
            # with either, and read on to the other for its usage and files
            st.finished = self.app_type != "chatflow" or st.workflow_done
        elif name == "workflow_finished":
            out.extend(self._workflow_finished(data.get("data") or {}, st))
            st.workflow_done = True
            st.finished = self.app_type != "chatflow" or st.message_ended
        elif name == "human_input_required":
            # the run waits for a Human Input form; the stream then sends workflow_paused and ends
            form = data.get("data") if isinstance(data.get("data"), dict) else {}
            if st.form is None or (not st.form.get("form_token") and form.get("form_token")):
                st.form = {**form, "workflow_run_id": data.get("workflow_run_id") or form.get("workflow_run_id"),
                           "task_id": data.get("task_id"), "conversation_id": data.get("conversation_id")}
            else:
                log.info("%s: a second form is waiting in the same pause; it is asked after this one", self.platform)
        elif name == "workflow_paused":
            st.paused = True
            st.finished = True
            st.paused_run = data.get("workflow_run_id") or (data.get("data") or {}).get("workflow_run_id")
        elif name == "error":
            raise map_error(_int(data.get("status")), data.get("code"), data.get("message"))
        elif name not in const.IGNORED_EVENTS and name not in self._unknown:
            self._unknown.add(str(name))
            log.info("%s: skipping unknown stream event %r", self.platform, name)
        return out

    def _link(self, url: str) -> str | None:
        """A Dify file link for the chat (:func:`runner_kit.netguard.chat_link`: Dify's own links
        pass; a member's link the app's answer gives back passes only when it is public http(s)),
        or None."""
        return chat_link(url, self.base)

    def _attachments(self, files: Any, st: _StreamState) -> list[ev.Event]:
        """Files Dify put in an answer (a chatflow's ``message_end.files``, a workflow's file
        outputs) as attachments: signed links, images shown, others linked; at most
        :data:`MAX_FILES_OUT`, each once, the rest named in one line, as is a file whose link is
        not one to pass on (:meth:`_link`)."""
        out: list[ev.Event] = []
        left: list[str] = []
        seen: set[str] = set()
        for f in files if isinstance(files, list) else []:
            if not isinstance(f, dict):
                continue
            url = f.get("url") or f.get("remote_url")
            if not isinstance(url, str) or not url:
                continue
            key = str(f.get("related_id") or f.get("id") or url.split("?", 1)[0])
            if key in st.files or key in seen:
                continue
            seen.add(key)
            name = safe_file_name(str(f["filename"])) if f.get("filename") else None  # a member's link names it
            link = self._link(url)
            if link is None:
                log.warning("%s: a file in the answer is not linked: its link is not a public http(s) one", self.platform)
                left.append(t("'{name}' (its link is not a public http(s) address)",
                              "“{name}”（其链接不是公开的 http(s) 地址）", name=name or "file"))
                continue
            st.files.add(key)
            if len(st.files) > MAX_FILES_OUT:
                left.append(outfiles.too_many(name or "file"))
                continue
            mime = str(f.get("mime_type") or "") or None
            image = f.get("type") == "image" or (mime or "").startswith("image/")
            out.append(ev.Attachment(url=link, kind="image" if image else "file", name=name, mime_type=mime))
        if left:
            out.append(ev.Text(outfiles.left_out_note(left)))
        return out

    def _thought(self, data: dict[str, Any], st: _StreamState) -> list[ev.Event]:
        """Agent steps are re-sent as they progress; treat them as upserts keyed by id.

        Dify's agent stores what the model said in a step as that step's ``thought`` after it has
        streamed the same text as ``agent_message``: the last step's thought is the whole answer.
        Such a thought (equal to, or the start of, the answer text streamed since the previous
        step) is not reasoning and is not shown; a tool step's thought that was not streamed is.
        """
        out: list[ev.Event] = []
        step_id = str(data.get("id") or data.get("position") or len(st.thoughts))
        if step_id != st.step_id:
            st.step_id = step_id
            st.step_start = st.last_thought_at
        st.last_thought_at = st.agent_len
        seen = st.thoughts.setdefault(step_id, {"thought": 0, "started": False, "done": False})
        thought = data.get("thought") or ""
        if len(thought) > seen["thought"] and thought.strip():
            streamed = "".join(st.agent_text)[st.step_start :]
            if not _echoes_answer(thought, streamed):
                out.append(ev.Think(thought[seen["thought"] :]))
            seen["thought"] = len(thought)
        tool = data.get("tool") or ""
        if tool and not seen["started"]:
            seen["started"] = True
            out.append(ev.ToolStarted(call_id=step_id, name=tool, parameters=tool_input(data.get("tool_input"))))
        observation = data.get("observation")
        if tool and observation and not seen["done"]:
            seen["done"] = True
            out.append(ev.ToolCompleted(call_id=step_id, name=tool, result=maybe_json(observation)))
        return out

    def _workflow_finished(self, wf: dict[str, Any], st: _StreamState) -> list[ev.Event]:
        status = wf.get("status")
        if status in ("failed", "stopped"):
            detail = wf.get("error") or status
            raise RunnerError("upstream.error", f"the {self.platform} workflow {status}: {str(detail)[:300]}")
        out: list[ev.Event] = []
        if self.workflow:
            outputs = wf.get("outputs")
            answer = _pick_output(outputs, self.env.config.get("workflow-output-key") or "")
            # this stream's answer only: a run that goes on with kept messages after a form (pending.settle)
            # has the form's answer before it, which adopting the output whole would replace
            streamed = "".join(st.streamed)
            if answer and not streamed:
                out.append(ev.Text(answer))
            elif answer is not None and answer != streamed:
                out.append(ev.FinalText(answer))
            if isinstance(outputs, dict):
                out.extend(self._attachments([f for v in outputs.values() for f in _files_in(v)], st))
        if not st.usage_seen and wf.get("total_tokens") is not None:
            if self.app_type == "chatflow" and not st.message_ended:
                st.run_tokens = _int(wf.get("total_tokens"))  # message_end's usage follows
            else:
                out.append(ev.Usage(total_tokens=_int(wf.get("total_tokens"))))
        if self.app_type == "chatflow" and not st.message_ended and isinstance(wf.get("outputs"), dict):
            st.run_files = [f for v in wf["outputs"].values() for f in _files_in(v)]  # message_end's files follow
        return out

    def _blocking(self, doc: Any) -> list[ev.Event]:
        """A JSON (blocking-mode) body where a stream was expected: still answer from it."""
        if not isinstance(doc, dict):
            raise RunnerError("upstream.protocol", f"{self.platform} returned an unexpected JSON body")
        self._done = True
        if not doc.get("answer") and not isinstance(doc.get("data"), dict):
            fields = error_fields(doc)  # an error envelope sent with a 2xx status
            if fields is not None:
                status, code, message = fields
                raise map_error(status if status and status >= 400 else None, code, message)
        out: list[ev.Event] = []
        if doc.get("conversation_id"):
            out.append(ev.SessionId(doc["conversation_id"]))
        if "data" in doc and isinstance(doc["data"], dict):
            st = _StreamState()
            out.extend(self._workflow_finished(doc["data"], st))
            return out
        out.append(ev.FinalText(doc.get("answer") or ""))
        usage = (doc.get("metadata") or {}).get("usage")
        if isinstance(usage, dict):
            out.append(_usage(usage))
        return out

    # --- Human Input: ask the chat, submit the form, stream the rest ----------------------------

    def _ask(self, st: _StreamState) -> list[ev.Event]:
        """The run paused at a Human Input node: the form becomes one question in the chat (buttons
        or one field where the platform renders them, else words), and what answering needs is kept
        in conversation state under the interaction id. The run ends here without an error."""
        data = st.form or {}
        token = data.get("form_token")
        run_id = data.get("workflow_run_id") or st.paused_run
        if not token or not run_id:
            why = ("it sent no form" if not any(data.get(k) for k in ("form_id", "form_token", "actions")) else
                   "the form has no token; only a Human Input node delivered by Web App can be answered")
            raise RunnerError("upstream.paused",
                              f"the {self.platform} workflow paused for human input that cannot be answered from "
                              f"the chat ({why})")
        form = Form.from_event(data)
        if not form.actions:
            raise RunnerError("upstream.paused", f"the {self.platform} form “{form.title}” has no actions to submit")
        record = {
            "id": f"dify-{uuid.uuid4().hex[:16]}", "form_id": data.get("form_id"), "form_token": str(token),
            "workflow_run_id": str(run_id), "task_id": data.get("task_id") or self.task_id, "user": self.env.user,
            "app_type": self.app_type,
            "conversation_id": data.get("conversation_id") or st.conversation_id or self.env.session.current,
            **form.to_record(),
        }
        log.info("%s: run %s paused at form %s (%s, %d inputs, %d actions)", self.platform, run_id,
                 form.title[:80], form.mode, len(form.inputs), len(form.actions))
        return self.pending.ask(
            record, text=("\n\n" if st.text_seen else "") + form.question_text(self.platform),
            expires_at=as_float(data.get("expiration_time")),
            request=lambda caps, expires: form.request(record["id"], self.platform, expires, caps),
        )

    def _form(self) -> Form | None:
        record = self.pending.record()
        return Form.from_record(record) if record is not None else None

    def _read_click(self, submission: Any) -> tuple[str, dict[str, Any]] | None:
        form = self._form()
        return form.from_submission(submission) if form is not None else None

    def _read_typed(self, text: str) -> tuple[str, dict[str, Any]] | Incomplete | None:
        form = self._form()
        answer = form.parse_reply(text) if form is not None else None
        return Incomplete(answer) if isinstance(answer, str) else answer

    async def _submit(self, record: dict[str, Any], action: str, inputs: dict[str, Any]) -> AsyncIterator[ev.Event]:
        """``POST /form/human_input/{token}``, then the resumed run from ``/workflow/{id}/events``."""
        title = str(record.get("title") or "Human input")
        user = str(record.get("user") or self.env.user)
        token = quote(str(record["form_token"]), safe="")
        run_id = str(record["workflow_run_id"])
        if record.get("task_id"):
            self.task_id = str(record["task_id"])
        gone: list[str] = []

        def on_submit_error(status: int, raw: bytes, ctype: str) -> Exception:
            doc = json_object(raw) or {}
            code = doc.get("code") if isinstance(doc.get("code"), str) else ""
            if status == 412 and code == "human_input_form_expired":
                gone.append(f"(The Dify form “{title}” expired before it was answered.)")
            elif status == 412 and code == "human_input_form_submitted":
                gone.append(f"(The Dify form “{title}” was already answered.)")
            elif status == 404 and code == "not_found" and "form" in str(doc.get("message") or "").lower():
                gone.append(f"(The Dify form “{title}” no longer exists.)")
            return _not_taken(title, parse_envelope(status, raw, ctype))

        try:
            async with open_stream(self.env.client, "POST", self.base + const.FORM_SUBMIT_PATH.format(form_token=token),
                                   budget=self.env.budget(), platform=self.platform, error_parser=on_submit_error,
                                   headers=self.headers, json={"inputs": inputs, "action": action, "user": user}) as resp:
                await read_bounded(resp, MAX_JSON_BODY, self.platform)
        except RunnerError:
            if gone:  # nothing left to answer: the form is dropped
                yield self.pending.gone()
                yield ev.Text(gone[0])
                return
            raise  # the form stays pending: the same answer may be sent again
        yield self.pending.done()
        log.info("%s: submitted form %s (action %s); following run %s", self.platform, record["id"], action, run_id)
        async with open_answer(self.env.client, self.base + const.WORKFLOW_EVENTS_PATH.format(workflow_run_id=quote(run_id, safe="")),
                               method="GET", budget=self.env.budget(), platform=self.platform,
                               parse_error=lambda st, raw, ct: _not_followed(title, parse_envelope(st, raw, ct)),
                               hint=BASE_URL_HINT, headers=self.headers, params={"user": user}) as answer:
            if answer.json is not None:
                raise RunnerError("upstream.protocol",
                                  f"{self.platform} answered the resumed run's events with JSON instead of a stream")
            async for item in self._consume(answer.resp):
                yield item

    async def end_conversation(self, upstream_id: Any) -> None:
        """A LangBot reset left this Dify conversation behind: ``DELETE /conversations/{id}`` with
        the ``user`` it belongs to (this session's, as every turn in it was sent). One Dify already
        deleted (404 "Conversation Not Exists.") is left at that; other refusals are raised for the
        kit to log. Workflow apps keep no conversation."""
        if self.workflow or not isinstance(upstream_id, str) or not upstream_id.strip():
            return
        url = self.base + const.CONVERSATION_PATH.format(conversation_id=quote(upstream_id, safe=""))

        def on_error(status: int, raw: bytes, ctype: str) -> Exception:
            return _AlreadyGone() if conversation_missing(status, raw, upstream_id) else parse_envelope(status, raw, ctype)

        try:
            async with open_stream(self.env.client, "DELETE", url, budget=CANCEL_GRACE, platform=self.platform,
                                   error_parser=on_error, headers=self.headers, json={"user": self.env.user}):
                pass
        except _AlreadyGone:
            log.info("%s: conversation %s was already gone", self.platform, upstream_id[:64])
            return
        log.info("%s: deleted conversation %s after a LangBot reset", self.platform, upstream_id[:64])

    async def cancel(self) -> None:
        """Stop the running Dify task (only the same ``user`` can stop it)."""
        if self._done or not self.task_id:
            return
        path = (const.WORKFLOW_STOP_PATH if self.workflow else const.CHAT_STOP_PATH).format(task_id=self.task_id)
        try:
            await self.env.client.post(
                self.base + path, json={"user": self.env.user}, headers=self.headers, timeout=timeout_for(2.0)
            )
        except Exception:  # noqa: BLE001 - best effort on cancel
            log.info("%s: could not stop task after cancel", self.platform)


class _AlreadyGone(Exception):
    """Dify says the conversation to delete does not exist (any more)."""


class _StreamState:
    __slots__ = (
        "agent_len",
        "agent_messages",
        "agent_text",
        "conversation_id",
        "files",
        "files_seen",
        "finished",
        "form",
        "paused",
        "paused_run",
        "run_files",
        "run_tokens",
        "streamed",
        "workflow_done",
        "text_seen",
        "last_thought_at",
        "message_ended",
        "seen_events",
        "step_id",
        "step_start",
        "thoughts",
        "usage_seen",
    )

    def __init__(self) -> None:
        self.agent_messages = False
        self.agent_text: list[str] = []  # agent_message answers so far
        self.agent_len = 0  # their total length
        self.conversation_id: str | None = None
        self.files: set[str] = set()  # Dify files attached to this answer (by upload id or link)
        self.files_seen = False  # message_file events came (chat and agent apps): message_end repeats them
        self.finished = False
        self.form: dict[str, Any] | None = None  # the human_input_required data (+ run ids)
        self.paused = False  # workflow_paused came: the stream ends here
        self.paused_run: str | None = None
        self.run_files: list[dict[str, Any]] = []  # a chatflow's workflow_finished files, until message_end's
        self.run_tokens: int | None = None  # a chatflow's workflow_finished total, until message_end's usage
        self.streamed: list[str] = []  # a workflow's text_chunk text in this stream
        self.workflow_done = False  # workflow_finished came
        self.text_seen = False
        self.last_thought_at = 0  # agent_len at the most recent agent_thought
        self.message_ended = False
        self.seen_events = False
        self.step_id: str | None = None  # the agent step the latest agent_thought belongs to
        self.step_start = 0  # agent_len when that step's text began (the previous step's last thought)
        self.thoughts: dict[str, dict[str, Any]] = {}
        self.usage_seen = False

    def answered(self) -> bool:
        """The answer is complete: a cut stream after this loses nothing the chat needs."""
        return self.message_ended or self.workflow_done


def _not_taken(title: str, exc: RunnerError) -> RunnerError:
    return RunnerError(exc.code, f"Dify did not take the answer to the form “{title[:120]}”: {exc.message[:400]}")


def _not_followed(title: str, exc: RunnerError) -> RunnerError:
    return RunnerError(exc.code, f"Dify took the answer to the form “{title[:120]}” but its run could not be "
                                 f"followed: {exc.message[:400]}")


def _echoes_answer(thought: str, streamed: str) -> bool:
    """True when the thought is the step's streamed answer text, or the start of it."""
    t = thought.strip()
    return bool(t) and streamed.strip().startswith(t)


def _int(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _usage(usage: dict[str, Any]) -> ev.Usage:
    # only the token fields: prices and latency are not token usage
    return ev.Usage(
        prompt_tokens=_int(usage.get("prompt_tokens")),
        completion_tokens=_int(usage.get("completion_tokens")),
        total_tokens=_int(usage.get("total_tokens")),
    )


def _files_in(value: Any) -> list[dict[str, Any]]:
    """The Dify files in one workflow output: a file object, or a list of them."""
    items = value if isinstance(value, list) else [value]
    return [v for v in items if isinstance(v, dict) and v.get("dify_model_identity") == _DIFY_FILE]


def _pick_output(outputs: Any, key: str) -> str | None:
    """The workflow output that is the answer's text. File outputs are attached, not printed: an
    answer that has only files has no text."""
    if not isinstance(outputs, dict) or not outputs:
        return None
    if key:
        value = outputs.get(key)
        if value is None:
            raise RunnerError(
                "config.invalid",
                f"the workflow has no output named '{key}' (it has: {', '.join(sorted(outputs))[:200]})",
            )
        if value and _files_in(value):
            return ""
        return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    outputs = {k: v for k, v in outputs.items() if not (v and _files_in(v))} or None
    if outputs is None:
        return ""
    for k in const.OUTPUT_KEYS:
        if isinstance(outputs.get(k), str):
            return outputs[k]
    if len(outputs) == 1:
        (value,) = outputs.values()
        return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return json.dumps(outputs, ensure_ascii=False)

