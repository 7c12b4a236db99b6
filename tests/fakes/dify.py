"""Faithful fake of the Dify Service API (see docs/platforms.md section 1).

Stream event order per ``srv.mode`` (every data event is ``data: {json}\\n\\n``; a bare
``event: ping\\n\\n`` block is inserted after every ``ping_every`` data events):

- ``chat``:      message* -> message_end
- ``agent``:     (function calling, as Dify's agent runner sends it) step 1:
                 agent_thought(X, empty) -> agent_thought(X, thought + tool) -> message_file
                 -> agent_thought(X, observation); step 2: agent_thought(Y, empty) -> agent_message*
                 -> agent_thought(Y, thought == the whole answer) -> message_end
- ``new-agent``: agent_thought -> agent_message* -> message(complete answer) -> message_end
- ``chatflow``:  workflow_started -> node_started/node_finished(start) -> node_started(llm)
                 -> reasoning_chunk* -> message* -> node_finished(llm) -> node_started/finished(answer)
                 -> workflow_finished -> message_end (the order Dify 1.12.1 sends)
- ``workflow``:  workflow_started -> node_started/finished(start) -> node_started(llm) -> text_chunk*
                 -> node_finished(llm) -> node_started/finished(end) -> workflow_finished
- ``completion``: a text-generator app; /chat-messages answers 400 ``not_chat_app`` and
                 /workflows/run 400 ``not_workflow_app``

Human Input (``srv.human_input`` set, chatflow or workflow): workflow_started -> start node ->
``before_form`` text (an Answer node's message*, or text_chunk*) -> node_started(human-input)
-> human_input_required -> workflow_paused, and the stream ends (no message_end). The form is then
answered with ``POST /v1/form/human_input/{form_token}`` and the rest of the run streams from
``GET /v1/workflow/{workflow_run_id}/events?user=`` (human_input_form_filled -> llm node ->
``resume_tokens`` -> message_end -> workflow_finished), see :meth:`FakeDify._form_submit`.

``DELETE /v1/conversations/{id}`` with ``{"user"}`` (chat-type apps only; the id must be a UUID,
anything else is Flask's route 404) answers **204** without a body. Since Dify 1.8
(langgenius/dify 3aedc139 "fix delete conversations via Api", still so at 1.12.1 cd03e0a9
``api/services/conversation_service.py`` ``ConversationService.delete``) the row is deleted by id
alone: an unknown id, or another user's, is 204 too (and another user's conversation is gone).
``delete_checks_user`` gives the behaviour before that commit (``get_conversation`` first): 404
``not_found`` "Conversation Not Exists." for an unknown id or another user's. Deletions are
recorded in ``deleted`` as ``(conversation id, user)``.

``message_replace`` (``replace_with``) comes after the deltas (a chatflow's after workflow_finished,
as Dify 1.12.1's end-of-answer output moderation); a mid-stream ``error`` event ends the stream; a
failed workflow ends with ``workflow_finished(status=failed)`` then ``error``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from types import SimpleNamespace
from typing import Any

from .http_server import PlatformFake, Request, Response, fault_names

__all__ = [
    "FAULTS",
    "dify_file",
    "MODES",
    "Conversation",
    "FakeDify",
    "HumanForm",
    "Task",
    "Turn",
    "UploadedFile",
    "WorkflowRun",
]

MODES = ("chat", "agent", "new-agent", "chatflow", "workflow", "completion")
#: Dify's own ``mode`` name for each scenario
APP_MODE = {
    "chat": "chat",
    "agent": "agent-chat",
    "new-agent": "agent",
    "chatflow": "advanced-chat",
    "workflow": "workflow",
    "completion": "completion",  # text generator: neither chat nor workflow routes accept it
}

# status -> (code, message) for the http_<status> faults
_FAULT_ERRORS: dict[int, tuple[str, str]] = {
    400: ("invalid_param", "Invalid parameter value."),
    401: ("unauthorized", "Access token is invalid"),
    403: ("forbidden", "Forbidden."),
    404: ("not_found", "Conversation Not Exists."),
    413: ("file_too_large", ""),  # Dify quirk: empty message
    415: ("unsupported_file_type", "File type not allowed."),
    429: ("too_many_requests", "Too many requests. Please try again later."),
    500: ("internal_server_error", "Internal Server Error, please contact support."),
    502: ("bad_gateway", "Bad Gateway"),
    503: ("service_unavailable", "Service Unavailable"),
    504: ("gateway_timeout", "Gateway Timeout"),
}
#: every accepted value of ``srv.fault`` (``stall_pings``: like stall, but keep-alive pings keep coming)
FAULTS: tuple[str, ...] = fault_names(_FAULT_ERRORS, extra=("stall_pings",))

_ERROR_EVENT_PRESET = {
    "status": 500,
    "code": "internal_server_error",
    "message": "Internal Server Error, please contact support.",
}
_IMAGE_EXTS = {"jpg", "jpeg", "png", "webp", "gif", "svg"}
# what Werkzeug sends for a route Dify does not have (seen from Dify 1.12.1)
_NOT_FOUND_PAGE = (
    "<!doctype html>\n<html lang=en>\n<title>404 Not Found</title>\n<h1>Not Found</h1>\n<p>The requested URL "
    "was not found on the server. If you entered the URL manually please check your spelling and try again.</p>\n"
)


def dify_file(file_id: str, filename: str, mime_type: str, base: str = "", kind: str | None = None) -> dict[str, Any]:
    """A file object as Dify 1.12.1 puts it in ``message_end.files`` and workflow outputs: a signed
    preview link under FILES_URL (``base``; relative when that is unset)."""
    ext = filename.rsplit(".", 1)[-1] if "." in filename else ""
    url = f"{base}/files/{file_id}/file-preview?timestamp=1796537556&nonce={file_id[:8]}&sign=c2lnbmVk"
    return {"dify_model_identity": "__dify__file__", "id": None, "tenant_id": str(uuid.uuid4()),
            "type": kind or ("image" if mime_type.startswith("image/") else "document"), "transfer_method": "local_file",
            "remote_url": url, "related_id": file_id, "filename": filename, "extension": f".{ext}" if ext else "",
            "mime_type": mime_type, "size": 69, "url": url}


def _route_help(path: str) -> str:
    """Flask-RESTX's suffix on a 404 raised inside a route (Dify 1.12.1 keeps ERROR_404_HELP on)."""
    return (f" You have requested this URI [{path}] but did you mean {path} or {path.replace('/v1/', '/api/', 1)} "
            f"or {path}/<string:task_id>/stop ?")


def _check_uuid(cid: str) -> None:
    """Dify 1.12.1 validates ``conversation_id`` with pydantic before anything else."""
    try:
        uuid.UUID(cid)
    except ValueError:
        raise _DifyError(
            400, "invalid_param",
            "1 validation error for ChatRequestPayload\nconversation_id\n  Value error, conversation_id must be a "
            f"valid UUID [type=value_error, input_value='{cid[:40]}', input_type=str]\n    For further information "
            "visit https://errors.pydantic.dev/2.11/v/value_error") from None
_FILE_TYPES = {"image", "document", "audio", "video", "custom"}
# 1x1 transparent PNG served for message_file URLs
_PNG_1X1 = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)
MiB = 1024 * 1024


@dataclass
class Turn:
    """One chat request inside a conversation."""

    query: str
    inputs: dict[str, Any]
    files: list[Any]
    message_id: str
    task_id: str
    response_mode: str
    answer: str = ""
    #: running | succeeded | failed | stopped
    status: str = "running"


@dataclass
class Conversation:
    """A conversation and the user that owns it."""

    id: str
    user: str
    created_at: int
    turns: list[Turn] = field(default_factory=list)


@dataclass
class UploadedFile:
    """A file stored by ``POST /files/upload``."""

    id: str
    name: str
    size: int
    extension: str
    mime_type: str
    user: str
    data: bytes
    created_at: int


@dataclass
class WorkflowRun:
    """One ``/workflows/run`` request."""

    workflow_run_id: str
    task_id: str
    user: str
    inputs: dict[str, Any]
    files: list[Any]
    response_mode: str
    status: str = "running"
    outputs: dict[str, Any] = field(default_factory=dict)


@dataclass
class HumanForm:
    """A paused Human Input form (what Dify keeps per form token)."""

    form_id: str
    form_token: str
    workflow_run_id: str
    user: str  # the end user whose run paused
    node_title: str
    inputs: list[dict[str, Any]]
    actions: list[dict[str, Any]]
    expiration_time: int
    #: waiting | submitted | expired
    status: str = "waiting"
    submission: dict[str, Any] | None = None


@dataclass
class Task:
    """A running generation that can be stopped."""

    task_id: str
    user: str
    kind: str  # "chat" | "workflow"
    conversation_id: str | None = None
    message_id: str | None = None
    workflow_run_id: str | None = None
    stopped: bool = False
    done: bool = False
    stop_event: asyncio.Event = field(default_factory=asyncio.Event)


class _DifyError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


class _Aborted(Exception):
    """The fault closed the connection; stop emitting."""


@dataclass
class _Run:
    """Per-request state of one generation."""

    s: SimpleNamespace
    kind: str
    task: Task
    user: str
    query: str
    inputs: dict[str, Any]
    created_at: int
    conversation_id: str | None = None
    message_id: str | None = None
    workflow_run_id: str | None = None
    workflow_id: str = ""
    answer: str = ""
    started: float = field(default_factory=time.monotonic)
    resp: Response | None = None
    turn: Turn | None = None
    workflow: WorkflowRun | None = None
    finished: dict[str, Any] | None = None  # the workflow_finished event once the run ended


class _SSE:
    """Writes Dify-style SSE blocks with pings, optional split writes and the trailing-newline quirk."""

    def __init__(self, resp: Response, s: SimpleNamespace) -> None:
        self.resp = resp
        self.s = s
        self.count = 0

    async def send(self, obj: dict[str, Any], last: bool = False) -> None:
        payload = b"data: " + json.dumps(obj, ensure_ascii=self.s.ensure_ascii).encode("utf-8")
        await self.block(payload, last)

    async def block(self, payload: bytes, last: bool = False) -> None:
        if not (last and not self.s.trailing_blank_line):
            payload += b"\n\n"
        if self.s.split_writes:
            await self.resp.write_split(payload, delay=self.s.split_delay)
        else:
            await self.resp.write(payload)
        self.count += 1
        if self.s.ping_every and self.count % self.s.ping_every == 0 and not last:
            await self.resp.write(b"event: ping\n\n")


def _now() -> int:
    return int(time.time())


def _price(tokens: int, unit_price: str, price_unit: str) -> str:
    return str((Decimal(tokens) * Decimal(unit_price) * Decimal(price_unit)).quantize(Decimal("0.0000001")))


class FakeDify(PlatformFake):
    FAULTS = FAULTS

    """Dify Service API fake: ``with FakeDify() as srv: client(base_url=srv.base_url)``."""

    server_name = "nginx"

    def __init__(self, api_key: str = "app-test-key", *, mode: str = "chat", port: int = 0) -> None:
        super().__init__(port=port)
        self.api_key = api_key
        #: further keys the fake also accepts (other apps, e.g. a second bot)
        self.api_keys: set[str] = set()
        self.mode = mode
        # -- scenario knobs (read once at the start of each request) --
        self.answer_tokens: list[str] = ["Hello", ", ", "world", "!"]
        self.token_delay = 0.0
        self.ping_every = 2
        self.reasoning: str | None = None
        self.replace_with: str | None = None
        self.fail_midstream: dict[str, Any] | None = None
        self.workflow_fail: str | None = None
        self.workflow_output_key = "text"
        self.workflow_stream_text = True
        self.trailing_blank_line = True
        self.split_writes = False
        self.split_delay = 0.001
        self.ensure_ascii = False
        self.retriever_resources: list[dict[str, Any]] = []
        self.usage: dict[str, Any] | None = None  # overrides merged into metadata.usage
        self.include_usage = True  # False: no metadata.usage / total_tokens (usage unknown)
        #: the Start node's variables as /parameters lists them (``[{"text-input": {"variable",
        #: "required", "max_length"}}]``, also "paragraph", "select" with "options", "number"); runs
        #: are checked against them as Dify 1.12.1 does (api/core/app/apps/base_app_generator.py)
        self.user_input_form: list[dict[str, Any]] = []
        self.published = True  # False: a chatflow/workflow app whose workflow was never published
        #: files in the answer (see :func:`dify_file`): a chatflow lists them in ``message_end.files``
        #: and ``workflow_finished.outputs.files``, a workflow in ``outputs.files`` (as Dify 1.12.1 does
        #: for an Answer or End node that outputs a file variable; no ``message_file`` events)
        self.answer_files: list[dict[str, Any]] = []
        #: a chatflow's wait between workflow_finished and message_end: seconds of keep-alive pings only
        #: (every ``stall_ping_every``; ``math.inf``: until the client leaves), then message_end, or with
        #: ``message_end_lost`` the connection cut instead
        self.message_end_gap = 0.0
        self.message_end_lost = False
        #: a Human Input node in the chatflow/workflow: {"node_title", "form_content", "inputs",
        #: "actions", "timeout" (seconds), "delivery": "webapp" | "email", "empty_data": bool}
        #: (shapes: langgenius/dify web/types/workflow.ts HumanInputFormData; docs.dify.ai "Get
        #: Human Input Form"); None = no pause
        self.human_input: dict[str, Any] | None = None
        self.before_form: list[str] = []  # text the run streams before it pauses
        self.resume_tokens: list[str] = ["Approved", ": ", "done."]  # the answer after the form
        self.submit_fault: tuple[int, str, str] | None = None  # (status, code, message) of the submit
        # -- faults --
        self.fault_queue: list[str | None] = []  # consumed one per request before ``fault``
        self.stall_seconds = 3600.0
        self.stall_ping_every = 0.25  # seconds between keep-alives under the stall_pings fault
        self.oversized_bytes = 9 * MiB
        self.retry_after: str | None = None  # Retry-After header on 429/503 faults
        # -- uploads --
        self.max_upload_bytes = 15 * MiB
        self.max_image_upload_bytes = 10 * MiB
        #: filename -> seconds an accepted upload waits before it is stored and answered
        self.upload_delays: dict[str, float] = {}
        #: filename -> "stored" | "rejected" | "disconnected" (the client left while it waited)
        self.upload_outcomes: dict[str, str] = {}
        # -- recorded state --
        self.conversations: dict[str, Conversation] = {}
        self.uploads: dict[str, UploadedFile] = {}
        self.stopped_tasks: list[tuple[str, str]] = []
        #: seconds the stop endpoint takes before it answers (a stalled server's stop call often hangs too)
        self.stop_delay = 0.0
        self.tasks: dict[str, Task] = {}
        self.workflow_runs: list[WorkflowRun] = []
        self.request_files: list[list[Any]] = []
        self.forms: dict[str, HumanForm] = {}  # form_token -> form
        self.paused: dict[str, _Run] = {}  # workflow_run_id -> the paused (or resumed) run
        self.form_submissions: list[dict[str, Any]] = []  # submit bodies Dify accepted
        #: Dify before 1.8: DELETE of an unknown (or another user's) conversation is 404
        self.delete_checks_user = False
        self.deleted: list[tuple[str, str]] = []  # (conversation id, user) of every DELETE taken

        self.add_route("POST", "/v1/chat-messages", self._chat_messages)
        self.add_route("POST", "/v1/workflows/run", self._workflows_run)
        self.add_route("POST", "/v1/workflows/{workflow_id}/run", self._workflows_run)  # pinned version
        self.add_route("POST", "/v1/files/upload", self._files_upload)
        self.add_route("POST", "/v1/chat-messages/{task_id}/stop", self._chat_stop)
        self.add_route("POST", "/v1/workflows/tasks/{task_id}/stop", self._workflow_stop)
        self.add_route("GET", "/v1/parameters", self._parameters)
        self.add_route("DELETE", "/v1/conversations/{conversation_id}", self._conversation_delete)
        self.add_route("POST", "/v1/form/human_input/{form_token}", self._form_submit)
        self.add_route("GET", "/v1/workflow/{task_id}/events", self._workflow_events)
        self.add_route("GET", "/files/{file_id}/file-preview", self._file_preview)
        self.add_route("GET", "/files/{name}", self._static_file)

    # -- public helpers ----------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``."""
        return self.root_url + "/v1"

    def forget_conversations(self) -> None:
        """Delete every conversation (simulates deletion upstream: old ids now 404)."""
        self.conversations.clear()

    def expire_forms(self) -> None:
        """Every waiting form passes its expiration_time (a later submit gets 412 expired)."""
        for f in self.forms.values():
            if f.status == "waiting":
                f.expiration_time = _now() - 1

    def turns(self, conversation_id: str) -> list[Turn]:
        """Turn history of one conversation."""
        return self.conversations[conversation_id].turns

    @property
    def last_task_id(self) -> str | None:
        """task_id of the most recent generation."""
        return next(reversed(self.tasks), None)

    # -- route: chat-messages ----------------------------------------------------------------

    async def _chat_messages(self, req: Request, resp: Response) -> None:
        s = self._snapshot()
        if await self._pre_fault(s, resp):
            return
        try:
            self._auth(req)
            body = self._json_body(req)
            user = self._user(body)
            if s.mode not in ("chat", "agent", "new-agent", "chatflow"):
                raise _DifyError(
                    400, "not_chat_app", "Please check if your app mode matches the right API route."
                )
            query = body.get("query")
            if not isinstance(query, str):
                raise _DifyError(400, "invalid_param", "query is required and must be a string")
            inputs = self._inputs(body, user)
            response_mode = self._response_mode(body)
            if response_mode == "blocking" and s.mode in ("agent", "new-agent"):
                raise _DifyError(400, "bad_request", "Agent App only supports streaming response mode.")
            cid = body.get("conversation_id") or ""
            if not isinstance(cid, str):
                raise _DifyError(400, "invalid_param", "conversation_id must be a string")
            if cid:
                _check_uuid(cid)
                conv = self.conversations.get(cid)
                if conv is None or conv.user != user:
                    raise _DifyError(404, "not_found", "Conversation Not Exists." + _route_help(req.path))
            self._check_published(s)
            files = self._files(body, user)
        except _DifyError as e:
            await self._error(resp, e)
            return

        if not cid:
            cid = str(uuid.uuid4())
            self.conversations[cid] = Conversation(cid, user, _now())
        conv = self.conversations[cid]
        task = Task(str(uuid.uuid4()), user, "chat", conversation_id=cid, message_id=str(uuid.uuid4()))
        self.tasks[task.task_id] = task
        turn = Turn(query, inputs, files, task.message_id or "", task.task_id, response_mode)
        conv.turns.append(turn)
        run = _Run(
            s,
            "chat",
            task,
            user,
            query,
            inputs,
            _now(),
            conversation_id=cid,
            message_id=task.message_id,
            workflow_run_id=str(uuid.uuid4()) if s.mode == "chatflow" else None,
            workflow_id=str(uuid.uuid5(uuid.NAMESPACE_URL, self.api_key)),
        )
        run.resp = resp
        try:
            if response_mode == "blocking":
                turn.status = await self._blocking_chat(run, resp)
            else:
                turn.status = await self._stream(run, resp)
        except _Aborted:
            await resp.abort()
        finally:
            turn.answer = run.answer
            task.done = True
            if turn.status == "running":
                turn.status = "failed"
            if turn.status == "paused":
                run.turn = turn

    # -- route: workflows/run ----------------------------------------------------------------

    async def _workflows_run(self, req: Request, resp: Response) -> None:
        s = self._snapshot()
        if await self._pre_fault(s, resp):
            return
        try:
            self._auth(req)
            body = self._json_body(req)
            user = self._user(body)
            if s.mode != "workflow":
                raise _DifyError(
                    400, "not_workflow_app", "Please check if your app mode matches the right API route."
                )
            inputs = self._inputs(body, user)
            response_mode = self._response_mode(body)
            files = self._files(body, user)
            self._check_published(s)
        except _DifyError as e:
            await self._error(resp, e)
            return
        task = Task(str(uuid.uuid4()), user, "workflow", workflow_run_id=str(uuid.uuid4()))
        self.tasks[task.task_id] = task
        wf = WorkflowRun(task.workflow_run_id or "", task.task_id, user, inputs, files, response_mode)
        self.workflow_runs.append(wf)
        run = _Run(
            s,
            "workflow",
            task,
            user,
            "",
            inputs,
            _now(),
            workflow_run_id=task.workflow_run_id,
            workflow_id=req.path_params.get("workflow_id")
            or str(uuid.uuid5(uuid.NAMESPACE_URL, self.api_key)),
        )
        run.resp = resp
        try:
            if response_mode == "blocking":
                wf.status = await self._blocking_workflow(run, resp)
            else:
                wf.status = await self._stream(run, resp)
        except _Aborted:
            await resp.abort()
        finally:
            task.done = True
            if wf.status == "running":
                wf.status = "failed"
            if wf.status == "paused":
                run.workflow = wf
            elif wf.status != "failed":
                wf.outputs = {s.workflow_output_key: run.answer}

    # -- route: delete a conversation --------------------------------------------------------

    async def _conversation_delete(self, req: Request, resp: Response) -> None:
        cid = req.path_params["conversation_id"]
        try:
            uuid.UUID(cid)
        except ValueError:
            await self.not_found(req, resp)  # the route takes <uuid:c_id> only
            return
        try:
            self._auth(req)
            body = self._json_body(req)
            user = body.get("user")
            user = str(user) if user else "DEFAULT-USER"  # the user arg is optional on this route
            if self.mode not in ("chat", "agent", "new-agent", "chatflow"):
                raise _DifyError(400, "not_chat_app", "Please check if your app mode matches the right API route.")
            conv = self.conversations.get(cid)
            if self.delete_checks_user and (conv is None or conv.user != user):
                raise _DifyError(404, "not_found", "Conversation Not Exists.")
        except _DifyError as e:
            await self._error(resp, e)
            return
        if conv is not None:
            del self.conversations[cid]
        self.deleted.append((cid, user))
        await resp.send(204, b"", None)

    # -- route: stop -------------------------------------------------------------------------

    async def _chat_stop(self, req: Request, resp: Response) -> None:
        await self._stop(req, resp, "chat")

    async def _workflow_stop(self, req: Request, resp: Response) -> None:
        await self._stop(req, resp, "workflow")

    async def _stop(self, req: Request, resp: Response, kind: str) -> None:
        try:
            self._auth(req)
            body = self._json_body(req)
            user = self._user(body)
            if kind == "chat" and self.mode in ("workflow", "completion"):
                raise _DifyError(
                    400, "not_chat_app", "Please check if your app mode matches the right API route."
                )
            if kind == "workflow" and self.mode != "workflow":
                raise _DifyError(
                    400, "not_workflow_app", "Please check if your app mode matches the right API route."
                )
        except _DifyError as e:
            await self._error(resp, e)
            return
        task_id = req.path_params["task_id"]
        self.stopped_tasks.append((task_id, user))
        if self.stop_delay:  # the call arrived (recorded); its answer is slow in coming
            await asyncio.sleep(self.stop_delay)
        task = self.tasks.get(task_id)
        if task is not None and task.user == user and task.kind == kind and not task.done:
            task.stopped = True
            task.stop_event.set()
        # a different user (or an unknown task) silently no-ops: still "success"
        await resp.json(200, {"result": "success"})

    # -- route: files ------------------------------------------------------------------------

    async def _files_upload(self, req: Request, resp: Response) -> None:
        name = ""
        try:
            self._auth(req)
            try:
                form = req.form()
            except ValueError:
                raise _DifyError(400, "no_file_uploaded", "Please upload your file.") from None
            user = form.fields.get("user", "")
            if not user:
                raise _DifyError(400, "invalid_param", "Arg user must be provided.")
            file_parts = [p for p in form.parts if p.is_file]
            part = form.files.get("file")
            if part is None:
                raise _DifyError(400, "no_file_uploaded", "Please upload your file.")
            name = part.filename or ""
            if len(file_parts) > 1:
                raise _DifyError(400, "too_many_files", "Only one file is allowed.")
            if not part.content_type:
                raise _DifyError(415, "unsupported_file_type", "File type not allowed.")
            if not part.filename:
                raise _DifyError(400, "filename_not_exists_error", "The specified filename does not exist.")
            if any(c in part.filename for c in '/\\:*?"<>|'):  # as Dify 1.12.1 (file_service.py) checks
                raise _DifyError(400, "invalid_param", "Filename contains invalid characters")
            ext = part.filename.rsplit(".", 1)[-1].lower() if "." in part.filename else ""
            limit = self.max_image_upload_bytes if ext in _IMAGE_EXTS else self.max_upload_bytes
            if len(part.data) > limit:
                raise _DifyError(413, "file_too_large", "")
        except _DifyError as e:
            if name:
                self.upload_outcomes[name] = "rejected"
            await self._error(resp, e)
            return
        delay = self.upload_delays.get(name, 0.0)
        if delay and not await resp.stall(delay):
            self.upload_outcomes[name] = "disconnected"
            await resp.abort()
            return
        self.upload_outcomes[name] = "stored"
        fid = str(uuid.uuid4())
        mime = part.content_type.split(";")[0].strip()
        up = UploadedFile(fid, part.filename, len(part.data), ext, mime, user, part.data, _now())
        self.uploads[fid] = up
        await resp.json(
            201,
            {
                "id": fid,
                "name": up.name,
                "size": up.size,
                "extension": ext,
                "mime_type": mime,
                "created_by": str(uuid.uuid5(uuid.NAMESPACE_OID, user)),
                "created_at": up.created_at,
                "preview_url": None,
                "source_url": self.url(f"/files/{fid}/file-preview"),
                "original_url": None,
                "user_id": None,
                "tenant_id": str(uuid.uuid5(uuid.NAMESPACE_DNS, self.api_key)),
                "conversation_id": None,
                "file_key": f"upload_files/{fid}.{ext}" if ext else f"upload_files/{fid}",
            },
        )

    async def _file_preview(self, req: Request, resp: Response) -> None:
        up = self.uploads.get(req.path_params["file_id"])
        if up is None:
            await self._error(resp, _DifyError(404, "not_found", "File not found"))
            return
        await resp.send(200, up.data, up.mime_type)

    async def _static_file(self, req: Request, resp: Response) -> None:
        await resp.send(200, _PNG_1X1, "image/png")

    # -- route: parameters -------------------------------------------------------------------

    async def _parameters(self, req: Request, resp: Response) -> None:
        try:
            self._auth(req)
        except _DifyError as e:
            await self._error(resp, e)
            return
        disabled = {"enabled": False}
        await resp.json(
            200,
            {
                "opening_statement": "",
                "suggested_questions": [],
                "suggested_questions_after_answer": disabled,
                "speech_to_text": disabled,
                "text_to_speech": disabled,
                "retriever_resource": {"enabled": True},
                "annotation_reply": disabled,
                "more_like_this": disabled,
                "sensitive_word_avoidance": disabled,
                "user_input_form": list(self.user_input_form),
                "file_upload": {
                    "image": {
                        "enabled": True,
                        "number_limits": 3,
                        "detail": "high",
                        "transfer_methods": ["remote_url", "local_file"],
                    },
                    "enabled": True,
                    "allowed_file_types": ["image"],
                    "allowed_file_extensions": [],
                    "allowed_file_upload_methods": ["remote_url", "local_file"],
                    "number_limits": 3,
                },
                "system_parameters": {
                    "file_size_limit": self.max_upload_bytes // MiB,
                    "image_file_size_limit": self.max_image_upload_bytes // MiB,
                    "audio_file_size_limit": 50,
                    "video_file_size_limit": 100,
                    "workflow_file_upload_limit": 10,
                },
            },
        )

    async def not_found(self, req: Request, resp: Response) -> None:
        """An unknown route (or a ``<uuid:…>`` route given something else): Werkzeug's HTML page,
        as the real Dify 1.12.1 answers it, not a JSON envelope."""
        await resp.send(404, _NOT_FOUND_PAGE.encode(), content_type="text/html; charset=utf-8")

    # -- validation --------------------------------------------------------------------------

    def _snapshot(self) -> SimpleNamespace:
        fault = self.fault_queue.pop(0) if self.fault_queue else self.fault
        if fault is not None and fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r} in fault_queue")
        if self.mode not in MODES:
            raise ValueError(f"unknown mode {self.mode!r}")
        return SimpleNamespace(
            mode=self.mode,
            tokens=list(self.answer_tokens),
            token_delay=self.token_delay,
            ping_every=self.ping_every,
            reasoning=self.reasoning,
            replace_with=self.replace_with,
            fail_midstream=dict(self.fail_midstream) if self.fail_midstream else None,
            workflow_fail=self.workflow_fail,
            workflow_output_key=self.workflow_output_key,
            workflow_stream_text=self.workflow_stream_text,
            trailing_blank_line=self.trailing_blank_line,
            split_writes=self.split_writes,
            split_delay=self.split_delay,
            ensure_ascii=self.ensure_ascii,
            include_usage=self.include_usage,
            fault=fault,
            stall_seconds=self.stall_seconds,
            stall_ping_every=self.stall_ping_every,
            oversized_bytes=self.oversized_bytes,
            human_input=dict(self.human_input) if self.human_input is not None else None,
            before_form=list(self.before_form),
        )

    def _auth(self, req: Request) -> None:
        header = req.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise _DifyError(
                401, "unauthorized", "Authorization header must be provided and start with 'Bearer'"
            )
        if token.strip() != self.api_key and token.strip() not in self.api_keys:
            raise _DifyError(401, "unauthorized", "Access token is invalid")

    @staticmethod
    def _json_body(req: Request) -> dict[str, Any]:
        try:
            body = req.json()
        except (ValueError, UnicodeDecodeError):
            raise _DifyError(
                400,
                "bad_request",
                "The browser (or proxy) sent a request that this server could not understand.",
            ) from None
        if not isinstance(body, dict):
            raise _DifyError(400, "invalid_param", "Request body must be a JSON object")
        return body

    @staticmethod
    def _user(body: dict[str, Any]) -> str:
        user = body.get("user")
        if not isinstance(user, str) or not user:
            raise _DifyError(400, "invalid_param", "Arg user must be provided.")
        return user

    def _check_published(self, s: SimpleNamespace) -> None:
        if not self.published and s.mode in ("chatflow", "workflow"):
            raise _DifyError(400, "invalid_param", "Workflow not published")

    def _check_form(self, inputs: dict[str, Any]) -> None:
        """The Start node's checks, in Dify's words (the first failing variable is reported)."""
        for entry in self.user_input_form:
            ((kind, var),) = entry.items()
            name, value = var["variable"], inputs.get(var["variable"])
            if value is None:
                if var.get("required"):
                    raise _DifyError(400, "invalid_param", f"{name} is required in input form")
                continue
            if kind in ("text-input", "paragraph", "select") and not isinstance(value, str):
                raise _DifyError(400, "invalid_param", f"(type '{kind}') {name} in input form must be a string")
            if kind == "select" and value not in var.get("options", []):
                raise _DifyError(400, "invalid_param",
                                 f"{name} in input form must be one of the following: {var.get('options', [])}")
            limit = var.get("max_length")
            if kind in ("text-input", "paragraph") and limit and len(value) > limit:
                raise _DifyError(400, "invalid_param", f"{name} in input form must be less than {limit} characters")

    def _inputs(self, body: dict[str, Any], user: str) -> dict[str, Any]:
        if "inputs" not in body:
            raise _DifyError(400, "invalid_param", "inputs is required")
        inputs = body["inputs"]
        if not isinstance(inputs, dict):
            raise _DifyError(400, "invalid_param", "inputs must be an object")
        self._check_form(inputs)
        for value in inputs.values():  # file-type variables: a file object or a list of them
            items = value if isinstance(value, list) else [value]
            for item in items:
                if isinstance(item, dict) and "transfer_method" in item:
                    self._check_file(item, user)
        return inputs

    @staticmethod
    def _response_mode(body: dict[str, Any]) -> str:
        mode = body.get("response_mode") or "blocking"
        if mode not in ("streaming", "blocking"):
            raise _DifyError(400, "invalid_param", "response_mode must be 'streaming' or 'blocking'")
        return mode

    def _files(self, body: dict[str, Any], user: str) -> list[Any]:
        files = body.get("files")
        if files is None:
            files = []
        if not isinstance(files, list):
            raise _DifyError(400, "invalid_param", "files must be a list")
        self.request_files.append(files)
        for f in files:
            self._check_file(f, user)
        return files

    def _check_file(self, f: Any, user: str) -> None:
        if not isinstance(f, dict):
            raise _DifyError(400, "invalid_param", "file must be an object")
        if f.get("type") not in _FILE_TYPES:
            raise _DifyError(400, "invalid_param", f"Invalid file type {f.get('type')!r}")
        method = f.get("transfer_method")
        if method == "remote_url":
            if not f.get("url"):
                raise _DifyError(400, "invalid_param", "Missing file url")
        elif method == "local_file":
            up = self.uploads.get(str(f.get("upload_file_id")))
            if up is None or up.user != user:  # real rule: same end user as the upload
                raise _DifyError(400, "invalid_param", "Invalid upload file id")
        else:
            raise _DifyError(400, "invalid_param", f"Invalid transfer method {method!r}")

    async def _error(self, resp: Response, e: _DifyError) -> None:
        await resp.json(e.status, {"code": e.code, "message": e.message, "status": e.status})

    # -- faults before any response ----------------------------------------------------------

    async def error_body(self, resp: Response, status: int, headers: Mapping[str, str] | None) -> None:
        code, msg = _FAULT_ERRORS[status]
        await resp.json(status, {"code": code, "message": msg, "status": status}, headers)

    async def _pre_fault(self, s: SimpleNamespace, resp: Response) -> bool:
        status = (s.fault or "").partition("_")[2]
        headers = {"Retry-After": self.retry_after} if self.retry_after and status in ("429", "503") else None
        return await self.head_fault(resp, s.fault, headers=headers, stall_seconds=s.stall_seconds)

    # -- streaming ---------------------------------------------------------------------------

    async def _stream(self, run: _Run, resp: Response) -> str:
        s = run.s
        headers = {"Connection": "close"} if s.fault == "empty" else None
        await resp.start_stream(200, "text/event-stream; charset=utf-8", headers)
        sse = _SSE(resp, s)
        if s.fault == "empty":
            return "failed"
        if s.fault == "invalid_json":
            await sse.block(b"data: {not json", last=True)
            return "failed"
        if s.fault == "non_utf8":
            bad = json.dumps(self._delta_event(run, "\x00BAD\x00")).encode()
            await sse.block(b"data: " + bad.replace(b"\\u0000BAD\\u0000", b"\xff\xfe"))
        if s.fault == "oversized":
            await self._oversized_line(run, sse)
        if self.human_input is not None and (run.kind == "workflow" or s.mode == "chatflow"):
            return await self._stream_until_form(run, sse)
        if run.kind == "workflow":
            return await self._stream_workflow(run, sse)
        if s.mode == "chatflow":
            return await self._stream_chatflow(run, sse)
        return await self._stream_chat(run, sse)

    async def _oversized_line(self, run: _Run, sse: _SSE) -> None:
        head = json.dumps(self._delta_event(run, "\x00PAD\x00")).encode()
        prefix, _, suffix = head.partition(b"\\u0000PAD\\u0000")
        prefix = b"data: " + prefix
        pad = max(0, run.s.oversized_bytes - len(prefix) - len(suffix) - 2)
        resp = sse.resp
        await resp.write(prefix)
        chunk = b"x" * (64 * 1024)
        left = pad
        while left > 0:
            await resp.write(chunk[: min(left, len(chunk))])
            left -= len(chunk)
        await resp.write(suffix + b"\n\n")
        sse.count += 1

    def _event(self, run: _Run, event: str, **fields: Any) -> dict[str, Any]:
        if run.kind == "workflow":
            base: dict[str, Any] = {
                "event": event,
                "task_id": run.task.task_id,
                "workflow_run_id": run.workflow_run_id,
            }
        else:
            base = {
                "event": event,
                "conversation_id": run.conversation_id,
                "message_id": run.message_id,
                "created_at": run.created_at,
                "task_id": run.task.task_id,
            }
            if event.startswith(("workflow_", "node_", "reasoning_")):
                base["workflow_run_id"] = run.workflow_run_id
        if event == "error":
            base.pop("task_id")
        base.update(fields)
        return base

    def _delta_event(self, run: _Run, text: str) -> dict[str, Any]:
        if run.kind == "workflow":
            return self._event(
                run, "text_chunk", data={"text": text, "from_variable_selector": ["llm", "text"]}
            )
        if run.s.mode in ("agent", "new-agent"):
            return self._event(run, "agent_message", id=run.message_id, answer=text)
        fields: dict[str, Any] = {"id": run.message_id, "answer": text}
        if run.s.mode == "chatflow":
            fields["from_variable_selector"] = ["llm", "text"]
        return self._event(run, "message", **fields)

    def _usage(self, run: _Run) -> dict[str, Any]:
        prompt = 12
        completion = max(1, len(run.s.tokens))
        usage: dict[str, Any] = {
            "prompt_tokens": prompt,
            "prompt_unit_price": "0.15",
            "prompt_price_unit": "0.000001",
            "prompt_price": _price(prompt, "0.15", "0.000001"),
            "completion_tokens": completion,
            "completion_unit_price": "0.6",
            "completion_price_unit": "0.000001",
            "completion_price": _price(completion, "0.6", "0.000001"),
            "total_tokens": prompt + completion,
            "total_price": str(
                Decimal(_price(prompt, "0.15", "0.000001")) + Decimal(_price(completion, "0.6", "0.000001"))
            ),
            "currency": "USD",
            "latency": round(time.monotonic() - run.started + 0.05, 3),
        }
        if self.usage:
            usage.update(self.usage)
        return usage

    def _message_end(self, run: _Run) -> dict[str, Any]:
        metadata: dict[str, Any] = {"usage": self._usage(run)} if run.s.include_usage else {}
        if run.s.mode != "new-agent":  # New Agent never sends retriever_resources
            metadata["retriever_resources"] = list(self.retriever_resources)
        files = list(self.answer_files) if run.s.mode == "chatflow" else []
        return self._event(run, "message_end", id=run.message_id, metadata=metadata, files=files)

    def _error_event(self, run: _Run, err: dict[str, Any]) -> dict[str, Any]:
        return self._event(
            run,
            "error",
            status=err.get("status", 500),
            code=err.get("code", "internal_server_error"),
            message=err.get("message", ""),
        )

    async def _wait_stop(self, run: _Run, seconds: float) -> bool:
        """Sleep up to ``seconds``; True if the task was stopped meanwhile.

        Raises _Aborted if the client disconnects while waiting (so stalled handlers end).
        """
        deadline = time.monotonic() + seconds
        while not run.task.stopped:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if run.resp is not None and run.resp.client_disconnected:
                self.client_disconnects += 1
                raise _Aborted
            try:
                await asyncio.wait_for(run.task.stop_event.wait(), min(left, 0.1))
            except TimeoutError:
                pass
        return True

    async def _deltas(self, run: _Run, sse: _SSE, stream_text: bool = True) -> str | None:
        """Emit the answer deltas and apply after-first-delta faults; returns an outcome or None."""
        s = run.s
        tokens = s.tokens if stream_text else []
        if not tokens:
            run.answer = "".join(s.tokens)
            return await self._after_first(run, sse)
        for i, tok in enumerate(tokens):
            await sse.send(self._delta_event(run, tok))
            run.answer += tok
            if i == 0:
                outcome = await self._after_first(run, sse)
                if outcome:
                    return outcome
            if i < len(tokens) - 1 and await self._wait_stop(run, s.token_delay):
                return "stopped"
        return None

    async def _after_first(self, run: _Run, sse: _SSE) -> str | None:
        s = run.s
        if s.fault == "truncated":
            await sse.resp.abort()
            raise _Aborted
        err = s.fail_midstream or (_ERROR_EVENT_PRESET if s.fault == "error_event" else None)
        if err:
            await sse.send(self._error_event(run, err), last=True)
            return "failed"
        if s.fault == "stall":
            if await self._wait_stop(run, s.stall_seconds):
                return "stopped"
        if s.fault == "stall_pings":
            deadline = time.monotonic() + s.stall_seconds
            while time.monotonic() < deadline:
                if await self._wait_stop(run, min(s.stall_ping_every, deadline - time.monotonic())):
                    return "stopped"
                await sse.resp.write(b"event: ping\n\n")
        if run.task.stopped:
            return "stopped"
        return None

    async def _finish_stopped(self, run: _Run, sse: _SSE) -> str:
        if run.kind == "workflow":
            await sse.send(self._workflow_finished(run, "stopped"), last=True)
            return "stopped"
        if run.s.mode == "chatflow":  # Dify 1.12.1: workflow_finished (stopped), then message_end
            await sse.send(self._workflow_finished(run, "stopped"))
            await sse.send(self._message_end(run), last=True)
        else:
            await sse.send(self._message_end(run), last=True)
        return "stopped"

    @staticmethod
    def _thought(position: int, thought: str = "") -> dict[str, Any]:
        return {
            "id": str(uuid.uuid4()),
            "position": position,
            "thought": thought,
            "observation": "",
            "tool": "",
            "tool_labels": {},
            "tool_input": "",
            "message_files": [],
        }

    async def _agent_tool_step(self, run: _Run, sse: _SSE) -> None:
        """Function-calling agent, step 1: the model calls a tool (its reasoning is not streamed)."""
        step = self._thought(1)
        await sse.send(self._event(run, "agent_thought", **step))  # created, at the first LLM chunk
        step.update(
            thought="I should look this up.",
            tool="search",
            tool_labels={"search": {"en_US": "Search", "zh_Hans": "搜索"}},
            tool_input='{"search": {"q": "x"}}',
        )
        await sse.send(self._event(run, "agent_thought", **step))  # saved after the LLM call
        file_id = str(uuid.uuid4())
        await sse.send(  # a file the tool produced, published while the tool runs
            self._event(
                run, "message_file", id=file_id, type="image", belongs_to="assistant", url=self.url("/files/abc.png")
            )
        )
        step.update(observation='{"search": "Top result for x"}', message_files=[file_id])
        await sse.send(self._event(run, "agent_thought", **step))  # the tool's result

    async def _stream_chat(self, run: _Run, sse: _SSE) -> str:
        s = run.s
        answer_step: dict[str, Any] | None = None
        if s.mode == "agent":
            await self._agent_tool_step(run, sse)
            # step 2 answers: created empty, the answer streams as agent_message, then the step is
            # saved with the whole answer as its thought and sent again (real Dify does this)
            answer_step = self._thought(2)
            await sse.send(self._event(run, "agent_thought", **answer_step))
        elif s.mode == "new-agent":
            await sse.send(self._event(run, "agent_thought", **self._thought(1, "I should look this up.")))
        outcome = await self._deltas(run, sse)
        if outcome == "stopped":
            return await self._finish_stopped(run, sse)
        if outcome:
            return outcome
        if answer_step is not None:
            answer_step["thought"] = run.answer
            await sse.send(self._event(run, "agent_thought", **answer_step))
        if s.mode == "new-agent":
            await sse.send(self._event(run, "message", id=run.message_id, answer=run.answer))
        if s.replace_with is not None:
            run.answer = s.replace_with
            await sse.send(self._event(run, "message_replace", answer=s.replace_with))
        await sse.send(self._message_end(run), last=True)
        return "succeeded"

    # -- workflow-shaped events --------------------------------------------------------------

    def _node(self, run: _Run, node_id: str, node_type: str, title: str, index: int) -> dict[str, Any]:
        return {
            "id": str(uuid.uuid5(uuid.UUID(run.workflow_run_id or str(uuid.uuid4())), node_id)),
            "node_id": node_id,
            "node_type": node_type,
            "title": title,
            "index": index,
            "predecessor_node_id": None,
            "inputs": None,
            "inputs_truncated": False,
            "created_at": run.created_at,
            "extras": {},
            "iteration_id": None,
            "loop_id": None,
            "agent_strategy": None,
        }

    async def _node_pair(
        self,
        run: _Run,
        sse: _SSE,
        node: dict[str, Any],
        *,
        started: bool = True,
        outputs: dict[str, Any] | None = None,
        error: str | None = None,
    ) -> None:
        if started:
            await sse.send(self._event(run, "node_started", data=node))
        finished = dict(node)
        finished.update(
            process_data=None,
            process_data_truncated=False,
            outputs=outputs or {},
            outputs_truncated=False,
            status="failed" if error else "succeeded",
            error=error,
            elapsed_time=0.01,
            execution_metadata=(
                {
                    "total_tokens": self._usage(run)["total_tokens"],
                    "total_price": "0.0000042",
                    "currency": "USD",
                }
                if node["node_type"] == "llm" and run.s.include_usage
                else None
            ),
            finished_at=_now(),
            files=[],
        )
        await sse.send(self._event(run, "node_finished", data=finished))

    def _workflow_finished(self, run: _Run, status: str, error: str | None = None) -> dict[str, Any]:
        if run.kind == "workflow":
            outputs = {run.s.workflow_output_key: run.answer}
        else:
            outputs = {"answer": run.answer}
        if self.answer_files:
            outputs["files"] = list(self.answer_files)
        data = {
            "id": run.workflow_run_id,
            "workflow_id": run.workflow_id,
            "status": status,
            "outputs": None if status == "failed" else outputs,
            "error": error,
            "elapsed_time": round(time.monotonic() - run.started, 3),
            "total_tokens": self._usage(run)["total_tokens"],
            "total_steps": 3,
            "created_at": run.created_at,
            "finished_at": _now(),
            "exceptions_count": 0,
            "files": [],
            "created_by": {"id": str(uuid.uuid5(uuid.NAMESPACE_OID, run.user)), "user": run.user},
        }
        if not run.s.include_usage:
            del data["total_tokens"]
        return self._event(run, "workflow_finished", data=data)

    async def _workflow_head(self, run: _Run, sse: _SSE) -> dict[str, Any]:
        await sse.send(
            self._event(
                run,
                "workflow_started",
                data={
                    "id": run.workflow_run_id,
                    "workflow_id": run.workflow_id,
                    "sequence_number": 1,
                    "inputs": run.inputs,
                    "created_at": run.created_at,
                },
            )
        )
        await self._node_pair(run, sse, self._node(run, "start", "start", "Start", 1), outputs=run.inputs)
        llm = self._node(run, "llm", "llm", "LLM", 2)
        llm["predecessor_node_id"] = "start"
        await sse.send(self._event(run, "node_started", data=llm))
        return llm

    async def _reasoning(self, run: _Run, sse: _SSE) -> None:
        text = run.s.reasoning
        if not text:
            return
        pieces = [text[i : i + 8] for i in range(0, len(text), 8)]
        for piece in pieces + [""]:
            await sse.send(
                self._event(
                    run,
                    "reasoning_chunk",
                    data={
                        "reasoning": piece,
                        "node_id": "llm",
                        "message_id": run.message_id,
                        "is_final": piece == "",
                    },
                )
            )

    async def _workflow_failed(self, run: _Run, sse: _SSE, llm: dict[str, Any]) -> str:
        err = run.s.workflow_fail or "failed"
        await self._node_pair(run, sse, llm, started=False, error=err)
        await sse.send(self._workflow_finished(run, "failed", err))
        await sse.send(
            self._error_event(run, {"status": 500, "code": "internal_server_error", "message": err}),
            last=True,
        )
        return "failed"

    async def _stream_chatflow(self, run: _Run, sse: _SSE) -> str:
        s = run.s
        llm = await self._workflow_head(run, sse)
        if s.workflow_fail:
            return await self._workflow_failed(run, sse, llm)
        await self._reasoning(run, sse)
        outcome = await self._deltas(run, sse)
        if outcome == "stopped":
            return await self._finish_stopped(run, sse)
        if outcome:
            return outcome
        await self._node_pair(run, sse, llm, started=False, outputs={"text": run.answer})
        answer = self._node(run, "answer", "answer", "Answer", 3)
        answer["predecessor_node_id"] = "llm"
        await self._node_pair(run, sse, answer, outputs={"answer": run.answer})
        # Dify 1.12.1 ends a chatflow with workflow_finished, then the end-of-answer output moderation
        # (message_replace), then message_end (usage, files) once the message is saved
        await sse.send(self._workflow_finished(run, "succeeded"))
        if self.message_end_gap or self.message_end_lost:
            until = time.monotonic() + self.message_end_gap
            while time.monotonic() < until:
                if await self._wait_stop(run, min(s.stall_ping_every, until - time.monotonic())):
                    return "stopped"
                await sse.resp.write(b"event: ping\n\n")
            if self.message_end_lost:
                await sse.resp.abort()
                raise _Aborted
        if s.replace_with is not None:
            run.answer = s.replace_with
            await sse.send(self._event(run, "message_replace", answer=s.replace_with, reason="output_moderation"))
        await sse.send(self._message_end(run), last=True)
        return "succeeded"

    async def _stream_workflow(self, run: _Run, sse: _SSE) -> str:
        s = run.s
        llm = await self._workflow_head(run, sse)
        if s.workflow_fail:
            return await self._workflow_failed(run, sse, llm)
        await self._reasoning(run, sse)
        outcome = await self._deltas(run, sse, stream_text=s.workflow_stream_text)
        if outcome == "stopped":
            return await self._finish_stopped(run, sse)
        if outcome:
            return outcome
        await self._node_pair(run, sse, llm, started=False, outputs={"text": run.answer})
        end = self._node(run, "end", "end", "End", 3)
        end["predecessor_node_id"] = "llm"
        await self._node_pair(run, sse, end, outputs={s.workflow_output_key: run.answer})
        await sse.send(self._workflow_finished(run, "succeeded"), last=True)
        return "succeeded"

    # -- Human Input: pause, submit, resume --------------------------------------------------

    async def _stream_until_form(self, run: _Run, sse: _SSE) -> str:
        """The run reaches a Human Input node: it streams what came before, asks and pauses."""
        spec = run.s.human_input or {}
        await sse.send(self._event(run, "workflow_started", data={
            "id": run.workflow_run_id, "workflow_id": run.workflow_id, "sequence_number": 1,
            "inputs": run.inputs, "created_at": run.created_at}))
        await self._node_pair(run, sse, self._node(run, "start", "start", "Start", 1), outputs=run.inputs)
        if run.s.before_form:
            before = self._node(run, "answer_1", "answer", "Answer", 2)
            await sse.send(self._event(run, "node_started", data=before))
            for tok in run.s.before_form:
                await sse.send(self._delta_event(run, tok))
                run.answer += tok
            await self._node_pair(run, sse, before, started=False, outputs={"answer": run.answer})
        node = self._node(run, "human_input", "human-input", spec.get("node_title") or "Approval", 3)
        await sse.send(self._event(run, "node_started", data=node))
        token = None if spec.get("delivery") == "email" else uuid.uuid4().hex  # Email delivery: no token
        form = HumanForm(
            form_id=str(uuid.uuid4()), form_token=token or "", workflow_run_id=run.workflow_run_id or "",
            user=run.user, node_title=node["title"], inputs=list(spec.get("inputs") or []),
            actions=list(spec.get("actions") or [{"id": "approve", "title": "Approve", "button_style": "primary"},
                                                  {"id": "reject", "title": "Reject", "button_style": "default"}]),
            expiration_time=_now() + int(spec.get("timeout", 3600)),
        )
        if token:
            self.forms[token] = form
        self.paused[form.workflow_run_id] = run
        data = {
            "form_id": form.form_id, "node_id": "human_input", "node_title": form.node_title,
            "form_content": spec.get("form_content", "Please review: {{#$output.comment#}}"),
            "inputs": form.inputs, "actions": form.actions, "form_token": token,
            "resolved_default_values": {i["output_variable_name"]: "" for i in form.inputs
                                        if i.get("type") == "paragraph"},
            "display_in_ui": True, "expiration_time": form.expiration_time,
        }
        # Dify 1.14.0-rc1 sent this event over the Service API with empty data (langgenius/dify#35504)
        await sse.send(self._event(run, "human_input_required", workflow_run_id=run.workflow_run_id,
                                   data={} if spec.get("empty_data") else data))
        # WorkflowPauseStreamResponse: the run's summary with the reasons it waits
        await sse.send(self._event(run, "workflow_paused", workflow_run_id=run.workflow_run_id, data={
            "workflow_run_id": run.workflow_run_id, "paused_nodes": ["human_input"], "outputs": {},
            "reasons": [{"type": "human_input_required", "form_id": form.form_id, "node_id": "human_input"}],
            "status": "paused", "created_at": run.created_at,
            "elapsed_time": round(time.monotonic() - run.started, 3), "total_tokens": 0, "total_steps": 3}),
            last=True)
        return "paused"

    async def _form_submit(self, req: Request, resp: Response) -> None:
        """``POST /v1/form/human_input/{form_token}`` (api/controllers/service_api/app/human_input_form.py,
        services/human_input_service.py): the app key authenticates; ``user`` is required in the JSON
        body (any end user may submit; it is only recorded); 404 ``Form not found``; 412
        ``human_input_form_submitted`` / ``human_input_form_expired``; 400 ``invalid_form_data`` for an
        unknown action or a missing input; ``{}`` on success, and the run resumes."""
        try:
            self._auth(req)
            body = self._json_body(req)
            user = self._user(body)
            if not isinstance(body.get("inputs"), dict) or not isinstance(body.get("action"), str):
                raise _DifyError(400, "invalid_param", "inputs (object) and action (string) are required")
            form = self.forms.get(req.path_params["form_token"])
            if form is None:
                raise _DifyError(404, "not_found", "Form not found")
            if form.status == "submitted":
                raise _DifyError(412, "human_input_form_submitted",
                                 f"This form has already been submitted by another user, form_id={form.form_id}")
            if form.status == "expired" or form.expiration_time <= _now():
                form.status = "expired"
                raise _DifyError(412, "human_input_form_expired", f"This form has expired, form_id={form.form_id}")
            if self.submit_fault is not None:
                raise _DifyError(*self.submit_fault)
            if body["action"] not in {a["id"] for a in form.actions}:
                raise _DifyError(400, "invalid_form_data", f"Invalid action: {body['action']}")
            for i in form.inputs:
                name = i["output_variable_name"]
                value = body["inputs"].get(name)
                if i.get("type") in ("file", "file-list"):
                    continue
                if not isinstance(value, str) or not value:
                    raise _DifyError(400, "invalid_form_data", f"Missing required input: {name}")
                options = ((i.get("option_source") or {}).get("value")) if i.get("type") == "select" else None
                if options is not None and value not in options:
                    raise _DifyError(400, "invalid_form_data", f"Invalid value for {name}: {value}")
        except _DifyError as e:
            await self._error(resp, e)
            return
        form.status = "submitted"
        form.submission = {"inputs": body["inputs"], "action": body["action"], "user": user}
        self.form_submissions.append(form.submission)
        await resp.json(200, {})

    async def _workflow_events(self, req: Request, resp: Response) -> None:
        """``GET /v1/workflow/{task_id}/events?user=`` (api/controllers/service_api/app/workflow_events.py):
        the path parameter is the workflow run id; ``user`` must be the end user who started the run
        (else 404 ``Workflow run not found``); a finished run sends only its workflow_finished; a
        resumed run streams the rest, closing at workflow_finished (or the next pause)."""
        try:
            self._auth(req)
            user = req.query.get("user") or ""
            if not user:
                raise _DifyError(400, "invalid_param", "Arg user must be provided.")
            if self.mode not in ("chatflow", "workflow"):
                raise _DifyError(400, "not_workflow_app", "Please check if your app mode matches the right API route.")
            run = self.paused.get(req.path_params["task_id"])
            if run is None or run.user != user:
                raise _DifyError(404, "not_found", "Workflow run not found")
        except _DifyError as e:
            await self._error(resp, e)
            return
        await resp.start_stream(200, "text/event-stream")
        s = self._snapshot()
        run.s, run.resp = s, resp
        sse = _SSE(resp, s)
        if run.finished is not None:
            await sse.send(run.finished, last=True)
            return
        form = next((f for f in self.forms.values() if f.workflow_run_id == run.workflow_run_id), None)
        # the paused run waits (keep-alive pings) until the form is answered
        deadline = time.monotonic() + s.stall_seconds
        while form is None or form.status != "submitted":
            if time.monotonic() > deadline or resp.client_disconnected:
                await resp.abort()
                return
            await resp.write(b"event: ping\n\n")
            await asyncio.sleep(0.05)
        chosen = next((a for a in form.actions if a["id"] == (form.submission or {}).get("action")), form.actions[0])
        await sse.send(self._event(run, "human_input_form_filled", workflow_run_id=run.workflow_run_id, data={
            "node_id": "human_input", "node_title": form.node_title, "rendered_content": "",
            "action_id": chosen["id"], "action_text": chosen.get("title", chosen["id"])}))
        human = self._node(run, "human_input", "human-input", form.node_title, 3)
        await self._node_pair(run, sse, human, started=False, outputs=dict((form.submission or {}).get("inputs") or {}))
        llm = self._node(run, "llm", "llm", "LLM", 4)
        await sse.send(self._event(run, "node_started", data=llm))
        s.tokens = list(self.resume_tokens)
        run.answer = ""
        for tok in s.tokens:
            await sse.send(self._delta_event(run, tok))
            run.answer += tok
        await self._node_pair(run, sse, llm, started=False, outputs={"text": run.answer})
        if run.kind == "workflow":
            await self._node_pair(run, sse, self._node(run, "end", "end", "End", 5),
                                  outputs={s.workflow_output_key: run.answer})
        else:
            await self._node_pair(run, sse, self._node(run, "answer", "answer", "Answer", 5),
                                  outputs={"answer": run.answer})
        run.finished = self._workflow_finished(run, "succeeded")
        await sse.send(run.finished, last=run.kind == "workflow")
        if run.kind != "workflow":  # as a chatflow's first stream ends: message_end last
            await sse.send(self._message_end(run), last=True)
        if run.turn is not None:
            run.turn.status, run.turn.answer = "succeeded", run.answer
        if run.workflow is not None:
            run.workflow.status = "succeeded"
            run.workflow.outputs = {s.workflow_output_key: run.answer}

    # -- blocking ----------------------------------------------------------------------------

    async def _blocking_fault(self, run: _Run, resp: Response, body: dict[str, Any]) -> bool:
        """Apply stream-type faults to a blocking response; True if the response was handled."""
        fault = run.s.fault
        raw = json.dumps(body, ensure_ascii=run.s.ensure_ascii).encode("utf-8")
        if fault == "invalid_json":
            await resp.send(200, b"{not json", "application/json")
        elif fault == "empty":
            await resp.send(200, b"", "application/json", {"Connection": "close"})
        elif fault == "truncated":
            await resp.send_head(200, {"Content-Type": "application/json", "Content-Length": str(len(raw))})
            await resp.write_raw(raw[: len(raw) // 2])
            await resp.abort()
        elif fault == "non_utf8":
            await resp.send(200, raw.replace(b"{", b'{"junk": "\xff\xfe", ', 1), "application/json")
        elif fault == "oversized":
            pad = b'"' + b"x" * run.s.oversized_bytes + b'"'
            await resp.send(200, raw[:-1] + b', "padding": ' + pad + b"}", "application/json")
        elif fault == "error_event":
            await self._error(resp, _DifyError(**_ERROR_EVENT_PRESET))
        else:
            return False
        return True

    async def _blocking_wait(self, run: _Run) -> bool:
        s = run.s
        if s.fault in ("stall", "stall_pings") and await self._wait_stop(run, s.stall_seconds):
            return True
        return await self._wait_stop(run, s.token_delay * max(0, len(s.tokens) - 1))

    async def _blocking_chat(self, run: _Run, resp: Response) -> str:
        s = run.s
        run.answer = "".join(s.tokens)
        if await self._blocking_wait(run):
            run.answer = s.tokens[0] if s.tokens else ""
        if s.fail_midstream:
            await self._error(resp, _error_from(s.fail_midstream))
            return "failed"
        if s.mode == "chatflow" and s.workflow_fail:
            await self._error(resp, _DifyError(500, "internal_server_error", s.workflow_fail))
            return "failed"
        if s.replace_with is not None:
            run.answer = s.replace_with
        body = {
            "event": "message",
            "task_id": run.task.task_id,
            "id": run.message_id,
            "message_id": run.message_id,
            "conversation_id": run.conversation_id,
            "mode": APP_MODE[s.mode],
            "answer": run.answer,
            "metadata": {"usage": self._usage(run), "retriever_resources": list(self.retriever_resources)},
            "created_at": run.created_at,
        }
        if not s.include_usage:
            del body["metadata"]["usage"]
        if await self._blocking_fault(run, resp, body):
            return "failed"
        await resp.json(200, body)
        return "succeeded"

    async def _blocking_workflow(self, run: _Run, resp: Response) -> str:
        s = run.s
        run.answer = "".join(s.tokens)
        stopped = await self._blocking_wait(run)
        if s.fail_midstream:
            await self._error(resp, _error_from(s.fail_midstream))
            return "failed"
        status = "failed" if s.workflow_fail else ("stopped" if stopped else "succeeded")
        finished = self._workflow_finished(run, status, s.workflow_fail)
        body = {"task_id": run.task.task_id, "workflow_run_id": run.workflow_run_id, "data": finished["data"]}
        for k in ("exceptions_count", "files"):
            body["data"].pop(k, None)
        if await self._blocking_fault(run, resp, body):
            return "failed"
        await resp.json(200, body)
        return status


def _error_from(err: dict[str, Any]) -> _DifyError:
    return _DifyError(
        err.get("status", 500), err.get("code", "internal_server_error"), err.get("message", "")
    )
