"""Claude Code adapter: one ``claude -p`` process per run, one stream-json user line per turn.

``claude -p --output-format stream-json --verbose --input-format stream-json
--include-partial-messages`` keeps running while its stdin is open and prints a ``result`` after
each turn, so the run's own message and every steering follow-up go to the same live process
(platforms.md §10, real-peers.md §3). The first run of a conversation starts the session with
``--session-id <new uuid>``; later runs ``--resume <id>`` it from the same workspace (claude keys
its session store by cwd). Interrupt is claude's stream-json control request
``{"type":"control_request","request":{"subtype":"interrupt"}}`` (checked against 2.1.197: a
``control_response`` success, then the partial ``assistant`` line and a ``result``
``error_during_execution``; the process takes the next turn). Cancel and deadline send SIGINT,
which ends the tool shells too (real-peers.md §6), before the kit's stop.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import signal
import uuid
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

from runner_kit import approvals as ap
from runner_kit import command_scope as cs
from runner_kit import events as ev
from runner_kit import housekeeping, sandbox
from runner_kit.config import ConfigSchema, not_set_up
from runner_kit.errors import RunnerError, SessionMissing
from runner_kit.http import base_url
from runner_kit.inputs import UserInput
from runner_kit.logs import get_logger
from runner_kit.process import (
    AgentProcess,
    child_env,
    find_executable,
    parse_env_setting,
    private_home,
    save_attachment,
    workspace_dir,
)
from runner_kit.runner import DEFAULT_SESSION_RESET_TEXT, Adapter, RunEnv
from runner_kit.secret_proxy import SecretProxy, mcp_behind

from . import const
from .stream import TurnReader

log = get_logger("runner_kit.claude_code")

INSTALL_HINT = " (install it with `npm install -g @anthropic-ai/claude-code`)"
UPLOAD_DIR = "langbot-files"
IMAGE_TYPES = {"image/png", "image/jpeg", "image/gif", "image/webp"}  # what the Messages API takes as images


def _lines(raw: Any) -> list[str]:
    """A tool list from a comma/newline separated string or a list."""
    items = raw if isinstance(raw, list) else str(raw or "").replace("\n", ",").split(",")
    return [s for s in (str(i).strip() for i in items) if s]


def _short(value: Any, limit: int = 120) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = " ".join(cs.visible(text).split())  # a non-plain space stays visible, not a plain one
    return text if len(text) <= limit else text[: limit - 1] + "…"


def prefix_rule(suggestions: Any, command: str) -> str:
    """claude's own proposal for "don't ask again" on ``command``, as a kit prefix rule: an
    ``addRules`` entry ``Bash(<words>:*)`` whose words start the command, kept only when the
    command is a simple one (runner_kit.command_scope.prefix_key); "" otherwise. A rule without
    ``:*`` names one exact command, which the exact key already is. (Claude 2.1.197 suggests for a
    ``touch`` ``Bash(touch made.txt)`` to ``localSettings``, an ``addDirectories`` and a ``setMode
    acceptEdits``; none of them is sent back to claude: its own rules would answer later requests
    without the chat, by its own matching.)"""
    for s in suggestions if isinstance(suggestions, list) else []:
        if not (isinstance(s, dict) and s.get("type") == "addRules" and isinstance(s.get("rules"), list)):
            continue
        for rule in s["rules"]:
            content = rule.get("ruleContent") if isinstance(rule, dict) and rule.get("toolName") == "Bash" else None
            if isinstance(content, str) and content.endswith(":*"):
                if key := cs.prefix_key(content[:-2], command):
                    return key
    return ""


def permission_question(tool: str, tool_input: dict[str, Any], workspace: Path | None,
                        suggestions: Any = None) -> ap.Question:
    """The chat's question for claude's ``can_use_tool`` request, and what "allow for this
    session" covers: for Bash this exact command, or claude's own prefix rule when the command is a
    simple one; for a file edit this file inside the workspace (outside it: nothing, it can only be
    allowed once); for any other tool this exact call."""
    if tool == "Bash":
        command = str(tool_input.get("command") or "")
        detail = str(tool_input.get("description") or "") or (f"in {workspace}" if workspace else "")
        asked = cs.command_key(command)
        return ap.Question(title=f"run a command: {_short(command, 300)}", detail=_short(detail, 300),
                           scope=prefix_rule(suggestions, command) or asked, request=asked)
    if tool in const.EDIT_TOOLS:
        target = str(tool_input.get("file_path") or tool_input.get("notebook_path") or "a file")
        return ap.Question(title=f"edit {_short(target, 300)}", detail=tool,
                           scope=cs.file_key(cs.EDIT, target, workspace))
    shown = {k: v for k, v in tool_input.items() if v not in (None, "", [], {})}
    return ap.Question(title=f"use {tool}: {_short(shown) if shown else '(no input)'}",
                       scope=cs.tool_key(tool, tool_input))


# what 0.3.0 stored for a binding nobody touched, where the form's default has changed since: it is
# still untouched (whose session was the sender; the notice was the English line, now blank = built in)
FORMER_DEFAULTS = {"user-id-source": "actor", "session-reset-text": DEFAULT_SESSION_RESET_TEXT}


def check_setup(raw: Any, schema: ConfigSchema) -> None:
    """Set up by its owner = claude has a credential: ``api-key``, ``auth-token`` or one of the
    credential variables claude reads in ``env`` (a ``CLAUDE_CODE_OAUTH_TOKEN`` from ``claude
    setup-token``, Bedrock or Vertex). claude runs with a private HOME, so there is no other login.
    Without one nothing is written or started: a config LangBot stored untouched (a new pipeline
    bound to this runner with its YAML defaults) gets the "not set up yet" line, any other the
    missing key, together with every other setting it can already tell is wrong (a program that
    cannot be found, an address that is not one), so the owner fixes them in one go instead of
    learning of the next only after fixing the first."""
    raw = raw if isinstance(raw, Mapping) else {}
    cfg = schema.load(raw, required=False)
    if str(cfg.get("api-key") or "").strip() or str(cfg.get("auth-token") or "").strip():
        return
    if any(value for name, value in parse_env_setting(cfg.get("env")).items() if name in const.CREDENTIAL_ENV):
        return
    if schema.untouched(raw, former=FORMER_DEFAULTS):
        raise not_set_up(const.PLATFORM)
    problems = ["config key 'api-key' is required but empty (or set `auth-token`)"]
    try:
        find_executable(cfg.get("executable"), const.DEFAULT_EXECUTABLE, hint=INSTALL_HINT)
    except RunnerError as exc:
        problems.append(exc.message)
    if raw_url := str(cfg.get("base-url") or "").strip():
        try:
            base_url(raw_url, "base-url", suffixes=("/v1/messages", "/v1"), example=const.DEFAULT_API)
        except RunnerError as exc:
            problems.append(exc.message)
    raise RunnerError("config.missing", "; ".join(problems))


class ClaudeCodeAdapter(Adapter):
    """Drives one live ``claude`` process through the run's turns."""

    platform = const.PLATFORM
    session_key = const.SESSION_KEY
    multi_turn = True
    commands = True  # /new, /stop, /mode … from the chat (runner_kit.chat_commands)

    def workspace_path(self) -> Path | None:
        return workspace_dir(self.env, self.env.config.get("workspace"), const.PROCESS_PLATFORM)

    @classmethod
    def check_setup(cls, raw: Any, schema: ConfigSchema) -> None:
        check_setup(raw, schema)

    def __init__(self, env: RunEnv):
        super().__init__(env)
        self.proc: AgentProcess | None = None
        self.reader: TurnReader | None = None  # the turn in progress
        self.expected_session: str | None = None
        self.workspace: Path | None = None
        self.home: Path | None = None
        self._stack = contextlib.AsyncExitStack()
        self._proxy: SecretProxy | None = None
        self._mcp: contextlib.AsyncExitStack | None = None  # the LangBot MCP bridge of the running claude
        self._stack.push_async_callback(self._close_langbot_mcp)
        self._requests = 0
        self._asks: set[asyncio.Task[None]] = set()  # can_use_tool requests the chat is deciding
        self._asking: dict[str, asyncio.Task[None]] = {}  # request id -> its task (control_cancel_request)

    # --- the process -------------------------------------------------------------------------

    def permission_mode(self) -> str:
        return const.PERMISSION_MODES[str(self.env.config.get("permission-mode") or "workspace-write")]

    def child_environment(self, home: Path, proxy: SecretProxy | None = None) -> dict[str, str]:
        """The agent's environment. With ``proxy``, claude gets no secret: its base URL points at the
        proxy and its key and token are stand-ins that only the proxy turns into the real ones."""
        cfg = self.env.config
        extra: dict[str, str] = dict(const.QUIET_ENV)
        extra.update(parse_env_setting(cfg.get("env")))
        raw_url = str(cfg.get("base-url") or "").strip()
        if raw_url:
            extra["ANTHROPIC_BASE_URL"] = base_url(
                raw_url, "base-url", suffixes=("/v1/messages", "/v1"), example="https://api.anthropic.com"
            )
        if key := str(cfg.get("api-key") or "").strip():
            extra["ANTHROPIC_API_KEY"] = key
        if token := str(cfg.get("auth-token") or "").strip():
            extra["ANTHROPIC_AUTH_TOKEN"] = token
        if not any(extra.get(name) for name in const.CREDENTIAL_ENV):
            raise RunnerError("config.missing", "config key 'api-key' is required but empty (or set `auth-token`)")
        if proxy is not None and any(extra.get(n) for n in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")):
            extra["ANTHROPIC_BASE_URL"] = proxy.route(extra.get("ANTHROPIC_BASE_URL") or const.DEFAULT_API)
            for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"):
                if extra.get(name):
                    extra[name] = proxy.stand_in(extra[name])
        # who is asking, for gateways that attribute usage per end user (user-id-source decides the form)
        headers = [h for h in (extra.get("ANTHROPIC_CUSTOM_HEADERS") or "").splitlines() if h.strip()]
        extra["ANTHROPIC_CUSTOM_HEADERS"] = "\n".join([*headers, f"{const.USER_HEADER}: {self.env.user}"])
        retries = cfg.get("max-retries")
        extra["CLAUDE_CODE_MAX_RETRIES"] = str(int(retries) if isinstance(retries, (int, float)) else 1)
        if self.permission_mode() in const.BYPASS_MODES and os.geteuid() == 0:
            extra["IS_SANDBOX"] = "1"  # claude refuses bypass permissions as root without it
        return child_env(extra, home=home)

    async def argv(self) -> list[str]:
        cfg = self.env.config
        exe = find_executable(cfg.get("executable"), const.DEFAULT_EXECUTABLE, hint=INSTALL_HINT)
        argv = [exe, *const.BASE_ARGS]
        if current := self.env.session.current:
            argv += ["--resume", current]
            self.expected_session = current
        else:
            self.expected_session = str(uuid.uuid4())
            argv += ["--session-id", self.expected_session]
        if model := str(cfg.get("model") or "").strip():
            argv += ["--model", model]
        argv += ["--permission-mode", self.permission_mode()]
        if str(cfg.get("permission-mode") or "") == const.ASK_MODE:
            argv += list(const.PROMPT_TOOL_ARGS)
        if allowed := _lines(cfg.get("allowed-tools")):
            argv += ["--allowedTools", ",".join(allowed)]
        if denied := _lines(cfg.get("disallowed-tools")):
            argv += ["--disallowedTools", ",".join(denied)]
        if prompt := str(cfg.get("append-system-prompt") or "").strip():
            argv += ["--append-system-prompt", prompt]
        turns = cfg.get("max-turns")
        if isinstance(turns, (int, float)) and turns > 0:
            argv += ["--max-turns", str(int(turns))]
        if (mcp := await self._langbot_mcp()) is not None:
            argv += ["--mcp-config", str(self._private_json(mcp))]
        return argv

    def _private_json(self, doc: dict[str, Any]) -> Path:
        """A file only we can read (the MCP config holds the bridge's token), removed at close."""
        assert self.home is not None
        folder = self.home / "langbot-mcp"
        folder.mkdir(mode=0o700, exist_ok=True)
        path = folder / f"{uuid.uuid4().hex}.json"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(doc, fh)
        self._stack.callback(path.unlink, missing_ok=True)
        return path

    async def _langbot_mcp(self) -> dict[str, Any] | None:
        """LangBot's run-scoped MCP bridge as claude's ``--mcp-config``, when the run grants assets.

        One bridge per claude process: a claude started again (it crashed, or refused a resume)
        gets a new port and token, and the stopped one's bridge closes first."""
        try:
            from runner_kit.agent_mcp import langbot_mcp
        except ImportError:
            return None
        await self._close_langbot_mcp()
        enabled = self.env.config.get("langbot-tools", True) is not False
        stack = self._mcp = contextlib.AsyncExitStack()
        server = await stack.enter_async_context(langbot_mcp(self.env, enabled=enabled))
        if server is not None and self._proxy is not None:
            server = mcp_behind(server, self._proxy)  # claude's config file holds a stand-in, not the token
        return None if server is None else server.as_claude_config()

    async def _close_langbot_mcp(self) -> None:
        stack, self._mcp = self._mcp, None
        if stack is not None:
            await stack.aclose()

    async def _start(self) -> AgentProcess:
        cfg = self.env.config
        self.workspace = self.workspace_path()
        await housekeeping.hold(self._stack, const.PROCESS_PLATFORM, self.workspace, cfg.get("cleanup-after-days"))
        home = self.home = private_home(const.PROCESS_PLATFORM, self.workspace)
        if self._proxy is None:  # one per adapter: a restarted claude gets new routes on it
            self._proxy = await self._stack.enter_async_context(SecretProxy.open(self.env.redact))
        env = self.child_environment(home, self._proxy)
        argv = await self.argv()
        self.proc = await sandbox.spawn_agent(argv, config=cfg, agent=const.PLATFORM, name="claude",
                                              workspace=self.workspace, home=home, env=env, redact=self.env.redact)
        return self.proc

    # --- one turn ----------------------------------------------------------------------------

    def user_line(self, inp: UserInput) -> dict[str, Any]:
        """One SDK-shaped user message: the text, images as base64 image blocks, other files saved
        into the workspace and named in the text."""
        blocks: list[dict[str, Any]] = []
        text = inp.text
        saved: list[str] = []
        for f in inp.files:
            if f.data is None:
                if f.url:
                    saved.append(f.url)
                continue
            if f.mime_type in IMAGE_TYPES or (f.kind == "image" and not f.mime_type):
                blocks.append({"type": "image", "source": {
                    "type": "base64", "media_type": f.mime_type or "image/png",
                    "data": base64.b64encode(f.data).decode()}})
            elif self.workspace is not None:
                path = save_attachment(self.workspace, UPLOAD_DIR, f.name, f.data)
                saved.append(f"./{UPLOAD_DIR}/{path.name}")
        if saved:
            text = (text + "\n\n" if text else "") + "Attached: " + ", ".join(saved)
        if text or not blocks:
            blocks.insert(0, {"type": "text", "text": text or "(see the attachment)"})
        return {"type": "user", "session_id": "", "message": {"role": "user", "content": blocks},
                "parent_tool_use_id": None}

    async def turn(self, inp: UserInput, index: int) -> AsyncIterator[ev.Event]:
        proc = self.proc
        if proc is None or proc.returncode is not None:
            if proc is not None:
                await proc.stop()
            proc = await self._start()
        reader = self.reader = TurnReader()
        await proc.send_json(self.user_line(inp))
        try:
            while not reader.done:
                obj = await proc.read_json()
                if obj is None:
                    raise await self._ended(reader)
                self.env.touch()
                if obj.get("type") == "control_request":
                    self._control_request(proc, obj)
                    continue
                if obj.get("type") == "control_cancel_request":
                    # claude gave up on a request (e.g. the turn was interrupted): stop asking it
                    if (task := self._asking.pop(str(obj.get("request_id") or ""), None)) is not None:
                        task.cancel()
                    continue
                if obj.get("type") in ("control_response", "keep_alive"):
                    continue
                for item in reader.feed(obj):
                    yield item
        finally:
            self.reader = None
            for task in list(self._asks):
                task.cancel()  # the turn is over: claude no longer waits for these answers
        if reader.error is not None:
            if isinstance(reader.error, SessionMissing):
                await proc.stop()  # claude exits after refusing the resume; the next turn starts afresh
            raise reader.error
        if reader.session_id and self.expected_session and reader.session_id != self.expected_session:
            log.info("claude answered in session %s, not %s; keeping the new one", reader.session_id,
                     self.expected_session)
        self.expected_session = reader.session_id or self.expected_session
        if reader.finish_reason:
            yield ev.Finish(reader.finish_reason)

    # --- permission-mode: ask ----------------------------------------------------------------

    def _control_request(self, proc: AgentProcess, obj: dict[str, Any]) -> None:
        """claude asks something on its control channel. ``can_use_tool`` (sent because of
        ``--permission-prompt-tool stdio``) is answered by the chat in a task, so the turn keeps
        reading while the question waits (maybe into a later run); anything else is refused."""
        request = obj.get("request") or {}
        request_id = str(obj.get("request_id") or "")
        if request.get("subtype") == "can_use_tool":
            task = asyncio.create_task(self._can_use_tool(proc, request_id, request))
            self._asks.add(task)
            self._asking[request_id] = task
            task.add_done_callback(self._asks.discard)
            task.add_done_callback(lambda _t: self._asking.pop(request_id, None))
            return
        log.info("claude sent control request %r; not supported here", request.get("subtype"))
        reply = {"type": "control_response", "response": {
            "subtype": "error", "request_id": request_id,
            "error": f"unsupported control request {request.get('subtype')!r}"}}
        task = asyncio.create_task(self._send_quietly(proc, reply))
        self._asks.add(task)
        task.add_done_callback(self._asks.discard)

    @staticmethod
    async def _send_quietly(proc: AgentProcess, obj: dict[str, Any]) -> None:
        if proc.returncode is None:
            with contextlib.suppress(RunnerError, OSError):
                await proc.send_json(obj)

    async def _can_use_tool(self, proc: AgentProcess, request_id: str, request: dict[str, Any]) -> None:
        tool = str(request.get("tool_name") or "a tool")
        raw = request.get("input")
        tool_input: dict[str, Any] = raw if isinstance(raw, dict) else {}
        try:
            if tool == const.QUESTION_TOOL:
                answer = await self._questions(tool_input)
            else:
                answer = await self._permission(tool, tool_input, request.get("permission_suggestions"))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # never leave claude waiting on an answer that will not come
            log.warning("answering claude's %s request: %s", tool, self.env.redact(repr(exc)))
            answer = {"behavior": "deny", "message": "the permission request could not be asked in the chat"}
        await self._send_quietly(proc, {"type": "control_response", "response": {
            "subtype": "success", "request_id": request_id, "response": answer}})

    async def _permission(self, tool: str, tool_input: dict[str, Any], suggestions: Any) -> dict[str, Any]:
        question = permission_question(tool, tool_input, self.workspace, suggestions)
        decision = await self.env.ask(question)  # self.env read now: after a park it is a later run's
        log.info("claude asked to %s: %s by %s", question.title, decision.word, decision.by or "?")
        if not decision.allow:
            reason = decision.reason or ("nobody answered in time" if decision.timed_out else "denied in the chat")
            return {"behavior": "deny", "message": reason}
        # "for this session" is kept by the kit, which answers claude's next request by itself: no
        # updatedPermissions, as claude's own rule would cover what the chat never saw (its
        # prefix matching, a settings file that outlives a reset)
        return {"behavior": "allow", "updatedInput": tool_input}

    async def _questions(self, tool_input: dict[str, Any]) -> dict[str, Any]:
        """``AskUserQuestion``: each question goes to the chat; the answers go back in
        ``updatedInput.answers`` keyed by the question text (as the Agent SDK documents)."""
        answers: dict[str, str] = {}
        for item in tool_input.get("questions") or []:
            if not isinstance(item, dict) or not str(item.get("question") or "").strip():
                continue
            text = str(item["question"]).strip()
            options = [ap.Option(str(o.get("label")), str(o.get("label")), str(o.get("description") or "") or None)
                       for o in item.get("options") or [] if isinstance(o, dict) and o.get("label")]
            detail = str(item.get("header") or "")
            if item.get("multiSelect"):
                detail = (detail + " · " if detail else "") + "several may be chosen (separate them with commas)"
            decision = await self.env.ask(ap.Question(title=" ".join(text.split())[:300], detail=detail[:300],
                                                      kind="question", options=options, free_text=True))
            if decision.answer is None or (not decision.allow and not decision.answer):
                reason = decision.reason or ("nobody answered in time" if decision.timed_out
                                             else "the user did not answer")
                return {"behavior": "deny", "message": reason}
            answers[text] = decision.answer
        return {"behavior": "allow", "updatedInput": {**tool_input, "answers": answers}}

    async def _ended(self, reader: TurnReader) -> BaseException:
        """claude's stdout closed before the turn's result: say why."""
        assert self.proc is not None
        await self.proc.wait(2.0)
        tail = self.proc.stderr_tail()
        if const.NO_CONVERSATION in tail and not reader.text_seen:
            await self.proc.stop()
            return SessionMissing()
        if "cannot be used with root" in tail:
            return RunnerError("config.invalid", f"Claude Code refused the permission mode as root: {tail[:300]}")
        return self.proc.exit_error("ended before finishing the turn")

    # --- stopping ----------------------------------------------------------------------------

    async def interrupt(self) -> None:
        """Stop the running turn with claude's control interrupt (SIGINT if that cannot be sent)."""
        proc, reader = self.proc, self.reader
        if proc is None or reader is None or proc.returncode is not None:
            return
        reader.interrupted = True
        self._requests += 1
        log.info("interrupting claude's running turn for a follow-up")
        try:
            await proc.send_json({"type": "control_request", "request_id": f"req_{self._requests}_interrupt",
                                  "request": {"subtype": "interrupt"}})
        except RunnerError:
            proc.send_signal(signal.SIGINT)

    async def cancel(self) -> None:
        """Host cancel or deadline: SIGINT (claude stops the tool and ends cleanly), then the stop."""
        proc = self.proc
        if proc is None or proc.returncode is not None:
            return
        if self.reader is not None:
            self.reader.interrupted = True
        proc.send_signal(signal.SIGINT)
        await proc.wait(1.5)

    async def close(self) -> None:
        """End of the run: claude (and whatever it started) and the MCP bridge stop side by side."""
        proc, self.proc = self.proc, None
        for task in list(self._asks):
            task.cancel()

        async def stop_claude() -> None:
            if proc is None:
                return
            if proc.writer is not None and proc.returncode is None:
                with contextlib.suppress(Exception):
                    proc.writer.close()  # claude exits on end of input
                await proc.wait(1.0)
            await proc.stop(grace=1.0)

        for outcome in await asyncio.gather(stop_claude(), self._stack.aclose(), return_exceptions=True):
            if isinstance(outcome, BaseException):
                log.warning("closing the claude session: %s", self.env.redact(repr(outcome)))
