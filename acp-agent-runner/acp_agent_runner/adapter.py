"""ACP (Agent Client Protocol) adapter: LangBot as the ACP client of a coding agent.

One agent process lives for the run (``AgentProcess``), spoken to with the ``acp`` library's
``ClientSideConnection`` over its stdin/stdout. Per run:

``initialize`` (protocol version checked; honest client capabilities: ``fs`` read/write confined to
the workspace, write only when the permission mode allows it, no terminal) → ``authenticate`` when
``auth-method`` is set → ``session/resume`` (preferred) or ``session/load`` of the stored session
(the history ``load`` replays is dropped) or ``session/new`` → the permission mode as the agent's own
session mode → per turn ``session/prompt``, whose ``session/update`` notifications stream in:

- ``agent_message_chunk`` → answer text (codex-acp's model-metadata warning chunk is dropped),
  ``agent_thought_chunk`` → think, ``tool_call``/``tool_call_update`` → tool events (upserts by id),
  ``plan`` → the progress line, ``usage_update`` → logged only (the context window's fill, not usage);
- the prompt's result (``stopReason``, ``usage``) ends the turn; a JSON-RPC error is mapped by
  :mod:`.errors`.

``session/cancel`` is the interrupt, the host cancel and the deadline stop; ``close()`` stops the
process and every descendant (codex-acp ignores stdin EOF; tool shells escape the process group).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import shlex
from collections.abc import AsyncIterator, Awaitable, Mapping
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, TypeVar

from acp import PROTOCOL_VERSION, RequestError, image_block, resource_link_block, text_block
from acp.client.connection import ClientSideConnection
from acp.schema import (
    AcceptElicitationResponse,
    AllowedOutcome,
    CancelElicitationResponse,
    ClientCapabilities,
    DeclineElicitationResponse,
    DeniedOutcome,
    ElicitationCapabilities,
    ElicitationFormCapabilities,
    FileSystemCapabilities,
    Implementation,
    ReadTextFileResponse,
    RequestPermissionResponse,
    WriteTextFileResponse,
)
from pydantic import ValidationError

from runner_kit import approvals as ap
from runner_kit import events as ev
from runner_kit import housekeeping, sandbox
from runner_kit.config import ConfigSchema, not_set_up
from runner_kit.errors import RunnerError, SessionMissing
from runner_kit.inputs import InputFile, UserInput
from runner_kit.logs import get_logger
from runner_kit.process import AgentProcess, child_env, private_home, save_attachment, workspace_dir
from runner_kit.runner import Adapter
from runner_kit.secret_proxy import SecretProxy
from runner_kit.texts import t

from . import const, policy, providers
from .errors import map_request_error, session_gone
from .mcp import McpServer, mcp_servers, mcp_stdio_paths

log = get_logger("runner_kit.acp")

T = TypeVar("T")
_END = object()
CLIENT_INFO = Implementation(name="langbot-acp-runner", title="LangBot", version="0.3.0")
CANCEL_WAIT = 0.2  # how long the prompt gets to answer "cancelled" before the process is stopped
EOF_GRACE = 1.0  # after a run that ended normally: how long the agent gets to save its session and exit
# agents known to ignore stdin EOF (real-peers.md §6): they are stopped without waiting
IGNORES_EOF = frozenset({"codex-acp"})
MAX_READ_CHARS = 4 * 1024 * 1024
KEPT_COSTS = 20  # sessions whose last cumulative cost is kept (as many as /sessions lists)


def is_metadata_warning(text: str) -> bool:
    """codex-acp's "Model metadata for `<model>` not found. Defaulting to fallback metadata…" chunk."""
    t = text.strip()
    return t.startswith(const.MODEL_METADATA_WARNING) and t.endswith(const.MODEL_METADATA_WARNING_END)


def _command_text(command: Any) -> Any:
    if isinstance(command, list) and all(isinstance(c, str) for c in command):
        if len(command) == 3 and command[1] in ("-c", "-lc") and command[0].endswith("sh"):
            return command[2]  # codex-acp: ["/bin/bash", "-lc", "<the command>"]
        return shlex.join(command)
    return command


def _content_text(content: Any) -> str:
    """The text of a tool call's content list (text blocks and diffs)."""
    parts: list[str] = []
    for item in content or []:
        kind = getattr(item, "type", None)
        if kind == "content":
            text = getattr(getattr(item, "content", None), "text", None)
            if text:
                parts.append(text)
        elif kind == "diff":
            parts.append(f"edited {item.path}")
    return "\n".join(parts)


class _Tool:
    __slots__ = ("content", "done", "kind", "name", "raw_input", "raw_output", "started", "status", "title")

    def __init__(self) -> None:
        self.kind: str | None = None
        self.title = ""
        self.name = ""
        self.status: str | None = None
        self.raw_input: Any = None
        self.raw_output: Any = None
        self.content: Any = None
        self.started = False
        self.done = False


class _Turn:
    """What one prompt turn collected besides its streamed events."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self.context_used: int | None = None
        self.context_size: int | None = None
        self.cost: tuple[float, str] | None = None  # usage_update's cumulative session cost, the latest


class ACPClient:
    """The client side the agent calls back: session updates, permission requests, files."""

    def __init__(self, adapter: ACPAdapter):
        self.adapter = adapter

    def on_connect(self, conn: Any) -> None:
        pass

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.adapter.on_update(session_id, update)

    async def request_permission(
        self, session_id: str, tool_call: Any, options: list[Any], **kwargs: Any
    ) -> RequestPermissionResponse:
        return await self.adapter.on_permission(tool_call, options)

    async def read_text_file(
        self, session_id: str, path: str, line: int | None = None, limit: int | None = None, **kwargs: Any
    ) -> ReadTextFileResponse:
        return ReadTextFileResponse(content=self.adapter.read_file(path, line, limit))

    async def write_text_file(self, session_id: str, path: str, content: str, **kwargs: Any) -> WriteTextFileResponse:
        self.adapter.write_file(path, content)
        return WriteTextFileResponse()

    async def create_elicitation(self, message: str, mode: Any, **kwargs: Any) -> Any:
        return await self.adapter.on_elicitation(message, mode)

    async def complete_elicitation(self, elicitation_id: str, **kwargs: Any) -> None:
        pass  # only form elicitation is offered; URL elicitations (which this completes) are not

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        raise RequestError.method_not_found(method)

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        log.debug("ACP agent sent extension notification %s", method)


# --- set up by its owner? ------------------------------------------------------------------------
# LangBot 4.11.2 binds a new pipeline to the first runner it lists and stores that runner's YAML
# defaults as its config; up to 0.3.0 `provider` defaulted to `codex`, so an untouched pipeline
# started codex-acp (workspace-write) for anyone who wrote to the bot. Now no agent is preselected
# and a binding starts an agent only when its owner chose one and, for an agent that signs in to a
# model API with a key, gave it a way to sign in.
AGENT = "the ACP coding agent"  # how the chat names this runner when it is not set up
FORMER_DEFAULTS = {  # what 0.3.0 and earlier stored for an untouched binding
    "provider": "codex",
    "session-reset-text": "(The previous conversation could not be continued, so this reply starts a new one.)",
}
# the presets that sign in to a model API with a key: the agent runs with a private HOME (and
# CODEX_HOME), so no login of the host's user reaches it
KEYED = {"codex": "codex-acp", "claude-code": "claude-code-acp", "gemini": "Gemini CLI", "qwen-code": "Qwen Code"}
# any of these set means the owner gave the agent a key, its environment or a program of their own
SIGN_IN_KEYS = ("api-key", "env", "command", "executable", "auth-method")


def check_setup(raw: Any, schema: ConfigSchema) -> None:
    """Raise ``config.missing`` before anything is written or started when the binding's owner has
    not set it up: no agent chosen (``provider`` empty), or a keyed preset with nothing to sign in
    with — in a config LangBot stored untouched that is the "not set up yet" line."""
    raw = raw if isinstance(raw, Mapping) else {}
    provider = str(raw.get("provider") or "").strip()
    if not provider:
        raise not_set_up(AGENT)
    if provider not in KEYED:
        return  # opencode takes its settings from `env` or its own files; custom needs `command`
    cfg = schema.load(raw, required=False)
    if any(str(cfg.get(key) or "").strip() for key in SIGN_IN_KEYS):
        return
    if schema.untouched(raw, former=FORMER_DEFAULTS):
        raise not_set_up(AGENT)
    raise RunnerError(
        "config.missing",
        f"{KEYED[provider]} has nothing to sign in to its model API with: set `api-key` (or the agent's key in "
        "`env`); it runs with a private HOME, so a login of the host's user does not reach it",
    )


class ACPAdapter(Adapter):
    """One live ACP agent session for the run; each turn is one ``session/prompt``."""

    platform = const.PLATFORM
    session_key = const.SESSION_KEY
    multi_turn = True
    commands = True  # /new, /stop, /mode … from the chat (runner_kit.chat_commands)

    def workspace_path(self) -> Path | None:
        return workspace_dir(self.env, self.env.config.get("workspace"), const.DATA_NAME)

    @classmethod
    def check_setup(cls, raw: Any, schema: ConfigSchema) -> None:
        check_setup(raw, schema)

    def __init__(self, env: Any):
        super().__init__(env)
        self.mode = str(env.config.get("permission-mode") or "workspace-write")
        self.proc: AgentProcess | None = None
        self.conn: ClientSideConnection | None = None
        self.caps: Any = None
        self.agent_name = "ACP agent"
        self.auth_methods: list[str] = []
        self.workspace = Path(".")
        self.session_id: str | None = None
        self._cost_base: float | None = None  # the session's cumulative cost seen last (usage_update.cost)
        self._turn: _Turn | None = None
        self._prompt: asyncio.Task[Any] | None = None
        self._cancelling = False
        self._tools: dict[str, _Tool] = {}
        self._stack = AsyncExitStack()
        self._servers: list[McpServer] | None = None
        self._proxy: SecretProxy | None = None
        self._closed = False
        self._clean = False  # the last turn ended by itself (the agent may still be saving its session)
        self._ignores_eof = False

    # --- process and connection ---------------------------------------------------------------

    async def _start(self) -> None:
        cfg = self.env.config
        self.workspace = self.workspace_path()
        await housekeeping.hold(self._stack, const.DATA_NAME, self.workspace, cfg.get("cleanup-after-days"))
        self._proxy = await self._stack.enter_async_context(SecretProxy.open(self.env.redact))
        spec = providers.launch(cfg, self._proxy)
        home = private_home(const.DATA_NAME, self.workspace)
        extra = dict(spec.env)
        if spec.codex_home:
            extra.setdefault("CODEX_HOME", str(home))
        for name, value in spec.env.items():
            if name.endswith(("KEY", "TOKEN", "SECRET", "PASSWORD")):
                self.env.redact.add(value)
        self.agent_name = os.path.basename(spec.argv[0]) or "ACP agent"
        env = child_env(extra, home=home)
        self.proc = await sandbox.spawn_agent(
            spec.argv, config=cfg, agent=self.agent_name, name=self.agent_name, workspace=self.workspace, home=home,
            env=env, redact=self.env.redact, read_only=mcp_stdio_paths(),
        )
        assert self.proc.writer is not None
        client: Any = ACPClient(self)  # the library's Client protocol, structurally
        self.conn = ClientSideConnection(client, self.proc.writer, self.proc.reader, use_unstable_protocol=True)
        init = await self._call(
            self.conn.initialize(
                protocol_version=PROTOCOL_VERSION,
                client_capabilities=ClientCapabilities(
                    fs=FileSystemCapabilities(read_text_file=True, write_text_file=policy.may_write(self.mode)),
                    terminal=False,
                    # questions to the user are asked in the chat only where someone answers them
                    elicitation=ElicitationCapabilities(form=ElicitationFormCapabilities())
                    if self.mode == "ask" else None,
                ),
                client_info=CLIENT_INFO,
            ),
            "initialize",
        )
        if init.protocol_version != PROTOCOL_VERSION:
            raise RunnerError(
                "upstream.protocol",
                f"{self.agent_name} speaks ACP protocol version {init.protocol_version}; this runner speaks "
                f"version {PROTOCOL_VERSION}",
            )
        if init.agent_info is not None:
            self._ignores_eof = init.agent_info.name in IGNORES_EOF
            self.agent_name = init.agent_info.title or init.agent_info.name or self.agent_name
        self.caps = init.agent_capabilities
        self.auth_methods = [m.id for m in (init.auth_methods or [])]
        method = str(cfg.get("auth-method") or "").strip()
        if method:
            if method not in self.auth_methods:
                offered = ", ".join(self.auth_methods) or "none"
                raise RunnerError("config.invalid", f"`auth-method` {method!r} is not offered by {self.agent_name} "
                                                    f"(it offers: {offered})")
            await self._call(self.conn.authenticate(method_id=method), "authenticate")

    async def _call(self, aw: Awaitable[T], what: str) -> T:
        """One request to the agent; errors mapped (a dead process names its exit and stderr)."""
        try:
            return await aw
        except RequestError as exc:
            if exc.code == -32000 and what.startswith("session/") and what != "session/prompt":
                offered = ", ".join(self.auth_methods) or "none"
                raise RunnerError(
                    "upstream.auth",
                    f"{self.agent_name} requires authentication: set `auth-method` (offered: {offered}) or "
                    "the key its method needs in `api-key`/`env`",
                ) from None
            err = map_request_error(exc, what, self.agent_name)
            tail = self.proc.stderr_tail(300) if self.proc is not None and what != "session/prompt" else ""
            if tail:  # e.g. claude-code-acp as root without IS_SANDBOX: the reason is only on stderr
                err = RunnerError(err.code, f"{err.message} — {self.agent_name} stderr: {tail}", retryable=err.retryable)
            raise err from None
        except ValidationError as exc:
            raise RunnerError("upstream.protocol", f"{self.agent_name} answered {what} with an invalid "
                                                   f"message ({exc.error_count()} problems)") from None
        except (ConnectionError, BrokenPipeError) as exc:
            raise await self._gone(what) from exc

    async def _gone(self, what: str) -> RunnerError:
        assert self.proc is not None
        await self.proc.wait(1.0)
        if self.proc.returncode is None:
            return RunnerError("upstream.protocol", f"{self.agent_name} closed its output during {what}")
        return self.proc.exit_error(f"during {what}")

    # --- session ------------------------------------------------------------------------------

    async def _open_session(self) -> AsyncIterator[ev.Event]:
        assert self.conn is not None
        stored = self.env.session.current
        cwd = str(self.workspace)
        if self._servers is None:  # once per run: the bridge lives until close()
            self._servers = await mcp_servers(self.env, self.caps, self._stack, self._proxy)
        servers = self._servers
        modes = None
        if stored:
            resume = getattr(getattr(self.caps, "session_capabilities", None), "resume", None) is not None
            if resume or self.caps.load_session:
                modes = await self._continue(stored, cwd, servers, resume)
                self.session_id = stored
            else:
                log.info("%s cannot resume sessions; starting a new one", self.agent_name)
        if self.session_id is None:
            new = await self._call(self.conn.new_session(cwd=cwd, mcp_servers=list(servers)), "session/new")
            if not isinstance(new.session_id, str) or not new.session_id.strip():
                raise RunnerError("upstream.protocol", f"{self.agent_name} returned no session id")
            self.session_id = new.session_id
            self._cost_base = 0.0  # a new session has cost nothing yet
            modes = new.modes
            yield ev.SessionId(new.session_id)
        await self._apply_mode(modes)

    async def _continue(self, stored: str, cwd: str, servers: list[McpServer], resume: bool) -> Any:
        """``session/resume`` (no replay) or ``session/load``; SessionMissing when the id is unknown."""
        assert self.conn is not None
        what = "session/resume" if resume else "session/load"
        resp: Any
        try:
            if resume:
                resp = await self.conn.resume_session(session_id=stored, cwd=cwd, mcp_servers=list(servers))
            else:  # the replayed history arrives while no turn listens: it is dropped
                resp = await self.conn.load_session(session_id=stored, cwd=cwd, mcp_servers=list(servers))
        except RequestError as exc:
            if session_gone(exc):
                log.info("%s does not know session %s any more", self.agent_name, stored)
                raise SessionMissing() from None
            if resume and exc.code == -32601 and self.caps.load_session:
                return await self._continue(stored, cwd, servers, False)
            raise map_request_error(exc, what, self.agent_name) from None
        except (ConnectionError, BrokenPipeError):
            raise await self._gone(what) from None
        return getattr(resp, "modes", None)

    async def _apply_mode(self, modes: Any) -> None:
        """Switch the agent to its own mode for the permission mode (codex-acp starts in full-access)."""
        if modes is None or self.conn is None or self.session_id is None:
            return
        offered = {m.id for m in modes.available_modes}
        for mode_id in const.SESSION_MODES.get(self.mode, ()):
            if mode_id in offered:
                if mode_id != modes.current_mode_id:
                    try:
                        await self.conn.set_session_mode(session_id=self.session_id, mode_id=mode_id)
                    except RequestError as exc:
                        if self.mode == "full-access":
                            log.info("%s refused mode %s: %s", self.agent_name, mode_id, exc)
                            return
                        raise map_request_error(exc, "session/set_mode", self.agent_name) from None
                return

    # --- turns --------------------------------------------------------------------------------

    async def turn(self, inp: UserInput, index: int) -> AsyncIterator[ev.Event]:
        if self.conn is None:
            await self._start()
        if self.session_id is None:
            async for item in self._open_session():
                yield item
        assert self.conn is not None and self.session_id is not None
        blocks = self._blocks(inp)
        turn = self._turn = _Turn()
        self._cancelling = False
        self._clean = False
        task = asyncio.ensure_future(self._call(self.conn.prompt(session_id=self.session_id, prompt=blocks),
                                                "session/prompt"))
        task.add_done_callback(lambda _: turn.queue.put_nowait(_END))
        self._prompt = task
        try:
            while (item := await turn.queue.get()) is not _END:
                yield item
            while not turn.queue.empty():
                if (item := turn.queue.get_nowait()) is not _END:
                    yield item
            resp = task.result()
            self._clean = not self._cancelling
        finally:
            self._turn = None
            if not task.done():  # the run is ending under this turn (cancel, deadline, failure)
                await self.interrupt()
        for item in self._finish(resp, turn):
            yield item

    def _cost_key(self) -> str | None:
        return f"{self.env.session.key}.cost" if self.env.session.key else None

    def _turn_cost(self, turn: _Turn) -> float | None:
        """What this turn cost in US dollars: usage_update's ``cost`` is the session's cumulative
        cost, so the turn's is its growth since the last one seen. A session continued by a new
        process starts from the last total an earlier run kept (``<session key>.cost``), unless
        the agent's total is below it (it counts from its own start, not the session's): then from 0.
        A session never seen with a cost leaves its first turn's cost unknown."""
        if turn.cost is None:
            return None
        amount, currency = turn.cost
        base, self._cost_base = self._cost_base, amount
        if currency != "USD":
            log.info("%s reports its cost in %s, not USD; not counted", self.agent_name, currency or "?")
            return None
        if base is None and (kept := self._kept_costs().get(self.session_id or "")) is not None:
            base = kept if amount >= kept else 0.0
        return None if base is None else max(0.0, amount - base)

    def _kept_costs(self) -> dict[str, float]:
        """The last cumulative cost kept for each session of this session key, oldest first: one
        entry per session (``/new`` and ``/resume`` switch between them), at most
        :data:`KEPT_COSTS`; the shape of one session alone (``session``, ``amount``) is read too."""
        kept = (self.env.ctx.state.conversation or {}).get(self._cost_key() or "")
        if not isinstance(kept, dict):
            return {}
        pairs = [(kept.get("session"), kept.get("amount"))]
        if isinstance(kept.get("sessions"), dict):
            pairs += list(kept["sessions"].items())
        return {sid: float(v) for sid, v in pairs if isinstance(sid, str) and sid
                and isinstance(v, (int, float)) and not isinstance(v, bool)}

    def _finish(self, resp: Any, turn: _Turn) -> list[ev.Event]:
        out: list[ev.Event] = []
        u = resp.usage
        cost = self._turn_cost(turn)
        if turn.cost is not None and (key := self._cost_key()) is not None and self.session_id:
            costs = self._kept_costs()
            costs.pop(self.session_id, None)
            costs[self.session_id] = turn.cost[0]
            value = {"sessions": dict(list(costs.items())[-KEPT_COSTS:])}
            out.append(ev.State(key, value))
            if isinstance(self.env.ctx.state.conversation, dict):  # an agent started again in this run reads it
                self.env.ctx.state.conversation[key] = value
        if u is not None:
            extra = {k: v for k, v in (("thought_tokens", u.thought_tokens), ("cached_read_tokens", u.cached_read_tokens),
                                       ("cached_write_tokens", u.cached_write_tokens)) if v is not None}
            if cost is not None:
                extra["cost_usd"] = cost
            out.append(ev.Usage(prompt_tokens=u.input_tokens, completion_tokens=u.output_tokens,
                                total_tokens=u.total_tokens, extra=extra))
        elif cost is not None:
            out.append(ev.Usage(None, None, None, extra={"cost_usd": cost}))
        elif turn.context_used:
            # usage_update only tells how full the context window is (the tokens in it after the
            # turn), not what the turn consumed: reported as usage and summed over turns, two small
            # turns came to 81,000 "tokens". Consumption or nothing: the fill is only logged.
            log.info("%s: the context window holds %s of %s tokens after this turn", self.agent_name,
                     turn.context_used, turn.context_size or "?")
        reason = str(resp.stop_reason)
        out.append(ev.Meta("stop_reason", reason))
        out.append(ev.Finish(const.FINISH_REASONS.get(reason, reason)))
        if reason == "refusal":
            out.append(ev.Log(f"{self.agent_name} refused to continue this turn", "warning"))
        return out

    def _blocks(self, inp: UserInput) -> list[Any]:
        """Text, then each file: inline image content when the agent takes images, else a link."""
        caps = getattr(self.caps, "prompt_capabilities", None)
        images = bool(getattr(caps, "image", False))
        blocks: list[Any] = []
        if inp.text.strip():
            blocks.append(text_block(inp.text))
        for f in inp.files:
            if images and f.data is not None and (f.kind == "image" or f.mime_type.startswith("image/")):
                blocks.append(image_block(base64.b64encode(f.data).decode("ascii"), f.mime_type))
            else:
                blocks.append(self._link(f))
        return blocks

    def _link(self, f: InputFile) -> Any:
        """A file the agent cannot take inline: saved into the workspace and linked (baseline ACP)."""
        name = os.path.basename(f.name.replace("\\", "/")) or "attachment"
        if f.data is None:
            return resource_link_block(name, f.url or "", mime_type=f.mime_type)
        path = save_attachment(self.workspace, "langbot-attachments", name, f.data)
        return resource_link_block(path.name, path.as_uri(), mime_type=f.mime_type, size=len(f.data))

    # --- agent → client -----------------------------------------------------------------------

    def on_update(self, session_id: str, update: Any) -> None:
        turn = self._turn
        if turn is None or session_id != self.session_id:
            return  # replayed history of session/load, or another session's chatter
        for item in self._map(update, turn):
            turn.queue.put_nowait(item)

    def _map(self, update: Any, turn: _Turn) -> list[ev.Event]:
        kind = getattr(update, "session_update", None)
        if kind == "agent_message_chunk":
            text = getattr(update.content, "text", None)
            if not text:
                return []
            if is_metadata_warning(text):
                return [ev.Log(f"{self.agent_name}: {text.strip()}", "info")]
            return [ev.Text(text)]
        if kind == "agent_thought_chunk":
            text = getattr(update.content, "text", None)
            return [ev.Think(text)] if text else []
        if kind in ("tool_call", "tool_call_update"):
            return self._tool(update)
        if kind == "plan":
            return _plan(update.entries)
        if kind == "usage_update":
            turn.context_used, turn.context_size = update.used, update.size
            cost = getattr(update, "cost", None)
            if cost is not None and isinstance(getattr(cost, "amount", None), (int, float)):
                turn.cost = (float(cost.amount), str(getattr(cost, "currency", "") or "").upper())
            return []
        if kind == "current_mode_update":
            log.info("%s switched to mode %s", self.agent_name, update.current_mode_id)
        return []

    def _tool(self, update: Any) -> list[ev.Event]:
        call_id = str(update.tool_call_id)
        tool = self._tools.setdefault(call_id, _Tool())
        for attr in ("kind", "status", "raw_input", "raw_output", "content"):
            value = getattr(update, attr, None)
            if value is not None and value != {} and value != []:
                setattr(tool, attr, value)
        if update.title:
            tool.title = update.title
        meta = getattr(update, "field_meta", None) or {}
        name = (meta.get("claudeCode") or {}).get("toolName") if isinstance(meta.get("claudeCode"), dict) else None
        if name:
            tool.name = str(name)
        out: list[ev.Event] = []
        finished = tool.status in ("completed", "failed")
        # claude-code-acp first announces a call with an empty rawInput, then again with its input
        if not tool.started and (tool.raw_input or finished or tool.status == "in_progress"
                                 or update.session_update == "tool_call_update"):
            tool.started = True
            out.append(ev.ToolStarted(call_id=call_id, name=self._tool_name(tool), parameters=self._params(tool)))
        if finished and tool.started and not tool.done:
            tool.done = True
            result = tool.raw_output if tool.raw_output not in (None, "") else _content_text(tool.content)
            error = None
            if tool.status == "failed":
                error = (result if isinstance(result, str) and result else None) or "the tool failed"
            out.append(ev.ToolCompleted(call_id=call_id, name=self._tool_name(tool), result=result, error=error))
        return out

    @staticmethod
    def _tool_name(tool: _Tool) -> str:
        if tool.name:
            return tool.name
        command = tool.raw_input.get("command") if isinstance(tool.raw_input, dict) else None
        if tool.kind == "execute" and command is not None and _command_text(command) == tool.title:
            return "shell"  # codex-acp titles a command with the command itself
        return tool.title or tool.kind or "tool"

    @staticmethod
    def _params(tool: _Tool) -> dict[str, Any]:
        params = dict(tool.raw_input) if isinstance(tool.raw_input, dict) else {}
        if "command" in params:
            params["command"] = _command_text(params["command"])
        for key in ("call_id", "turn_id", "started_at_ms", "process_id", "parsed_cmd", "source"):
            params.pop(key, None)  # codex-acp bookkeeping
        if tool.title and "command" not in params:
            params.setdefault("title", tool.title)
        if tool.kind:
            params.setdefault("kind", tool.kind)
        return params

    async def on_permission(self, tool_call: Any, options: list[Any]) -> RequestPermissionResponse:
        if self._cancelling or self._turn is None:  # after session/cancel the answer must be "cancelled"
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        known = self._tools.get(str(tool_call.tool_call_id))
        kind = tool_call.kind or (known.kind if known else None)
        paths = policy.tool_paths(tool_call) + (policy.tool_paths(known) if known else [])
        if self.mode == "ask" and policy.ask_first(kind, paths, self.workspace):
            return await self._ask(tool_call, known, kind, paths, options)
        allow = policy.allowed(self.mode, kind, paths, self.workspace)
        option = policy.choose(options, allow)
        title = tool_call.title or (known.title if known else "") or kind or "a tool"
        log.info("%s asked to run %s: %s (permission-mode %s)", self.agent_name, title,
                 "allowed" if allow else "rejected", self.mode)
        if not allow and self._turn is not None:
            self._turn.queue.put_nowait(ev.Log(f"rejected {title!r} under permission-mode {self.mode}", "info"))
        if option is None:
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=option))

    async def _ask(self, tool_call: Any, known: _Tool | None, kind: str | None, paths: list[str],
                   options: list[Any]) -> RequestPermissionResponse:
        """``permission-mode: ask``: the chat decides. The wait may outlast this run (the kit parks
        this adapter and a later run swaps ``self.env``), so nothing run-bound is held across it."""
        raw = tool_call.raw_input if tool_call.raw_input not in (None, {}) else (known.raw_input if known else None)
        command = _command_text(raw.get("command")) if isinstance(raw, dict) and raw.get("command") else None
        label = tool_call.title or (known.title if known else "") or ""
        cwd = raw.get("cwd") if isinstance(raw, dict) and isinstance(raw.get("cwd"), str) else None
        if kind == "execute":
            text = command if isinstance(command, str) and command else label or "a command"
            title, detail = f"run a command: {text}", f"in {cwd or self.workspace}"
        elif kind in const.EDIT_KINDS:
            target = ", ".join(dict.fromkeys(paths)) or label or "a file"
            verb = {"delete": "delete", "move": "move"}.get(kind, "edit")
            title, detail = f"{verb} {target}", label if label and label not in target else ""
        else:
            target = label or (", ".join(dict.fromkeys(paths))) or kind or "a tool"
            title, detail = f"use {kind or 'a tool'}: {target}", ""
        scope = policy.scope(kind, raw.get("command") if isinstance(raw, dict) else None, paths, self.workspace,
                             label, raw)
        question = ap.Question(title=" ".join(ap.shown(title).split())[:300], detail=" ".join(ap.shown(detail).split())[:300],
                               scope=scope)
        decision = await self.env.ask(question)  # self.env read now: it may be a later run's
        if self._cancelling or self._closed:  # session/cancel came while the chat was deciding
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        option = policy.choose_answer(options, decision.allow, decision.always)
        log.info("%s asked to %s: %s by %s", self.agent_name, question.title, decision.word, decision.by or "?")
        if (note := ap.denial_note(question.title, decision)) is not None:
            self.env.tell_agent(note)  # the outcome has no reason field (_meta is read by few agents)
        if option is None:
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        meta = None
        if not decision.allow:
            # ACP's outcome has no reason field: it travels in _meta for agents that read it
            reason = decision.reason or ("nobody answered in time" if decision.timed_out else "denied in the chat")
            meta = {"langbot": {"reason": reason, "by": decision.by}}
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=option, field_meta=meta))

    async def on_elicitation(self, message: str, mode: Any) -> Any:
        """``elicitation/create`` (form mode, offered in ``permission-mode: ask``): the agent asks the
        user for input described by a JSON schema; asked in the chat like a permission, the answer is
        sent back as the form's content (``accept``), or ``decline`` (denied, timed out, or a URL
        elicitation, which is not offered)."""
        if self._cancelling or self._closed or self._turn is None or self.mode != "ask":
            return CancelElicitationResponse(action="cancel")
        schema = getattr(mode, "requested_schema", None)
        if schema is None:
            log.info("%s sent a %s elicitation, which this runner does not offer; declined", self.agent_name,
                     type(mode).__name__)
            return DeclineElicitationResponse(action="decline")
        form = ap.schema_form(message, schema.model_dump(by_alias=True, exclude_none=True))
        for _ in range(3):  # an answer that misses a field is asked again, saying what is missing
            decision = await self.env.ask(form.question)  # self.env read now: it may be a later run's
            if self._cancelling or self._closed:
                return CancelElicitationResponse(action="cancel")
            content = form.content(decision.answer) if decision.allow and decision.answer is not None else None
            if isinstance(content, str):
                form = form.again(content)
                continue
            if content is None:
                log.info("%s asked for input (%s): declined by %s", self.agent_name, form.message[:80],
                         decision.by or ("nobody in time" if decision.timed_out else "?"))
                return DeclineElicitationResponse(action="decline")
            log.info("%s asked for input (%s): answered by %s", self.agent_name, form.message[:80], decision.by or "?")
            return AcceptElicitationResponse(action="accept", content=content)
        return DeclineElicitationResponse(action="decline")

    def _confined(self, path: str) -> Path:
        if not os.path.isabs(path):
            raise RequestError.invalid_params({"message": "path must be absolute"})
        if not policy.inside(self.workspace, path):
            raise RequestError.invalid_params({"message": f"{path} is outside the workspace"})
        return Path(path)

    def read_file(self, path: str, line: int | None, limit: int | None) -> str:
        target = self._confined(path)
        try:
            with open(target, encoding="utf-8", errors="replace") as fh:
                text = fh.read(MAX_READ_CHARS)
        except OSError as exc:
            raise RequestError.resource_not_found(path) if isinstance(exc, FileNotFoundError) else \
                RequestError.internal_error({"message": exc.strerror or str(exc)}) from None
        if line is not None or limit is not None:
            lines = text.splitlines(keepends=True)
            start = max((line or 1) - 1, 0)
            text = "".join(lines[start: start + limit if limit is not None else None])
        return text

    def write_file(self, path: str, content: str) -> None:
        if not policy.may_write(self.mode):
            raise RequestError.invalid_params({"message": "writing files is not allowed (permission-mode read-only)"})
        target = self._confined(path)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content, encoding="utf-8")
        except OSError as exc:
            raise RequestError.internal_error({"message": exc.strerror or str(exc)}) from None

    # --- stopping -----------------------------------------------------------------------------

    async def interrupt(self) -> None:
        """``session/cancel``: the agent stops and answers the prompt with ``cancelled``."""
        task = self._prompt
        if self.conn is None or self.session_id is None or task is None or task.done():
            return
        self._cancelling = True
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.conn.cancel(session_id=self.session_id), CANCEL_WAIT)

    async def cancel(self) -> None:
        self._clean = False  # host cancel or deadline: no waiting for the agent to wind down
        await self.interrupt()
        task = self._prompt
        if task is not None and not task.done():
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(asyncio.shield(task), CANCEL_WAIT)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._prompt is not None and not self._prompt.done():
            self._prompt.cancel()
        if self.conn is not None:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(self.conn.close(), CANCEL_WAIT)
        if self.proc is not None:
            if self._clean and not self._ignores_eof and self.proc.returncode is None:
                # end of input (the library's close leaves stdin open): claude-code-acp and most
                # agents finish writing the session and exit; killing them at once can lose the
                # session the next run resumes
                if self.proc.writer is not None:
                    with contextlib.suppress(Exception):
                        self.proc.writer.close()
                await self.proc.wait(EOF_GRACE)
            await self.proc.stop(grace=1.0)  # SIGTERM, SIGKILL; then every recorded descendant
        with contextlib.suppress(BaseException):
            await self._stack.aclose()


def _plan(entries: list[Any]) -> list[ev.Event]:
    """The plan as one progress line: the step in progress (or the next one) and how far along."""
    if not entries:
        return []
    done = sum(1 for e in entries if e.status == "completed")
    current = next((e for e in entries if e.status == "in_progress"), None) or next(
        (e for e in entries if e.status == "pending"), None)
    if current is None:
        return [ev.Progress(t("Plan: all {n} steps done", "计划：{n} 个步骤已全部完成", n=len(entries)))]
    return [ev.Progress(t("Plan {i}/{n}: {step}", "计划 {i}/{n}：{step}", i=done + 1, n=len(entries),
                          step=current.content.strip()[:120]))]
