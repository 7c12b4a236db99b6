"""Codex adapter: one ``codex app-server`` process per run, one thread per conversation.

Wire (JSON-RPC lines on stdio, docs platforms.md §11 and real-peers.md §4): ``initialize`` →
``initialized`` → ``thread/start {cwd, sandbox, approvalPolicy, model…}`` or ``thread/resume
{threadId, …}`` (the id kept under ``codex.thread_id``) → per turn ``turn/start {threadId,
input}`` and its notifications until ``turn/completed`` (see :mod:`codex_agent.mapping`). Follow-ups
the host hands over while the run lives become further ``turn/start`` calls on the same process and
thread. ``turn/interrupt`` stops a turn for a follow-up in ``interrupt`` mode, a host cancel and the
deadline; ``close`` ends stdin (app-server exits on EOF), then the kit's stop escalates.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

from runner_kit import approvals as ap
from runner_kit import events as ev
from runner_kit import housekeeping, sandbox
from runner_kit.config import ConfigSchema, not_set_up
from runner_kit.errors import RunnerError, SessionMissing
from runner_kit.http import base_url
from runner_kit.inputs import InputFile, UserInput
from runner_kit.logs import get_logger
from runner_kit.process import (
    AgentProcess,
    child_env,
    data_dir,
    find_executable,
    parse_env_setting,
    private_home,
    save_attachment,
    workspace_dir,
)
from runner_kit.runner import DEFAULT_SESSION_RESET_TEXT, Adapter, RunEnv
from runner_kit.secret_proxy import SecretProxy, mcp_behind

from . import const
from .errors import rpc_failure, session_gone
from .home import codex_config, native_codex, write_config
from .mapping import TurnMapper, UsageMeter
from .policy import APPROVAL_METHODS, FILE_CHANGE_APPROVAL, USER_INPUT, Permissions, question
from .rpc import Notification, Peer, PeerClosed, RpcError

try:  # the run-scoped LangBot MCP bridge (runner_kit.agent_mcp)
    from runner_kit.agent_mcp import langbot_mcp
except ImportError:  # pragma: no cover - an older kit
    langbot_mcp = None  # type: ignore[assignment]

log = get_logger("codex_agent")

DATA = "codex-agent"  # the plugin's data directory name (workspaces, homes)
MCP_TOKEN_ENV = "LANGBOT_MCP_TOKEN"
INTERRUPT_WAIT = 3.0  # seconds for turn/interrupt to be acknowledged
EXIT_WAIT = 1.0  # seconds for app-server to exit by itself once stdin closes
_ATTACHMENTS = ".langbot-attachments"
_RESERVED_ENV = frozenset({"PATH", "HOME", "CODEX_HOME", "SHELL", "USER", MCP_TOKEN_ENV})


# what 0.3.0 stored for a binding nobody touched, where the form's default has changed since (the
# notice was the English line, now blank = built in): it is still untouched
FORMER_DEFAULTS = {"session-reset-text": DEFAULT_SESSION_RESET_TEXT}


def check_setup(raw: Any, schema: ConfigSchema) -> None:
    """Set up by its owner = ``api-key`` is set (codex always talks to the configured model API
    with it; it runs with a private CODEX_HOME, so there is no other login). A config LangBot
    stored untouched (a new pipeline bound to this runner with its YAML defaults, ``api-key``
    absent) gets the "not set up yet" line before anything is written or started; any other config
    without the key fails as the schema says (``config key 'api-key' is required``)."""
    raw = raw if isinstance(raw, Mapping) else {}
    if not str(raw.get("api-key") or "").strip() and schema.untouched(raw, former=FORMER_DEFAULTS):
        raise not_set_up(const.PLATFORM)


class CodexAdapter(Adapter):
    """Maps LangBot turns onto one live ``codex app-server`` thread."""

    platform = const.PLATFORM
    session_key = const.SESSION_KEY
    multi_turn = True
    commands = True  # /new, /stop, /mode … from the chat (runner_kit.chat_commands)

    def workspace_path(self) -> Path | None:
        return workspace_dir(self.env, self.env.config.get("workspace"), DATA)

    @classmethod
    def check_setup(cls, raw: Any, schema: ConfigSchema) -> None:
        check_setup(raw, schema)

    def __init__(self, env: RunEnv):
        super().__init__(env)
        self._proc: AgentProcess | None = None
        self._peer: Peer | None = None
        self._stack = contextlib.AsyncExitStack()
        self._workspace: Path | None = None
        self._perms: Permissions | None = None
        self._thread_params: dict[str, Any] = {}
        self._thread: str | None = None
        self._meter: UsageMeter | None = None
        self._turn: str | None = None  # the running turn's id
        self._stop_asked = False  # interrupt() came before turn/start answered
        self._events: list[ev.Event] = []  # from server requests, yielded by the running turn
        self._file_paths: dict[str, list[str]] = {}  # fileChange item id -> its paths (for approvals)
        self._file_changes: dict[str, list[Any]] = {}  # fileChange item id -> its changes (path, kind)
        self._images: Path | None = None
        self._proxy: SecretProxy | None = None

    # --- the process --------------------------------------------------------------------------

    async def _start(self) -> Peer:
        if self._peer is not None:
            if self._peer.closed:
                raise await self._exit_error("is not running any more")
            return self._peer
        cfg = self.env.config
        workspace = self.workspace_path()
        await housekeeping.hold(self._stack, DATA, workspace, cfg.get("cleanup-after-days"))
        home = private_home(DATA, workspace)
        codex_home = home / ".codex"
        codex_home.mkdir(exist_ok=True)
        url = base_url(cfg.get("base-url"), "base-url", default=const.DEFAULT_BASE_URL, suffixes=("/responses",),
                       example="https://api.openai.com/v1")
        env_key = str(cfg.get("env-key") or const.DEFAULT_ENV_KEY).strip()
        if not env_key.replace("_", "A").isalnum() or env_key[0].isdigit() or env_key in _RESERVED_ENV:
            raise RunnerError("config.invalid", "config key 'env-key' must be an environment variable name "
                                                "of its own (not PATH, HOME or CODEX_HOME)")
        # codex gets no secret: its provider's base URL is this agent's proxy, and its key a stand-in
        self._proxy = await self._stack.enter_async_context(SecretProxy.open(self.env.redact))
        key = str(cfg.get("api-key") or "")
        write_config(codex_home, codex_config(
            base_url=self._proxy.route(url), env_key=env_key, wire_api=str(cfg.get("wire-api") or "responses"),
            max_retries=_max_retries(cfg),
            model=str(cfg.get("model") or "").strip() or None, web_search=bool(cfg.get("web-search")),
        ))
        extra = parse_env_setting(cfg.get("env"))
        extra.update({"CODEX_HOME": str(codex_home), env_key: self._proxy.stand_in(key) if key else ""})
        self._perms = Permissions.from_config(cfg, workspace)
        self._workspace = workspace
        params: dict[str, Any] = {"cwd": str(workspace), **self._perms.thread_params()}
        if model := str(cfg.get("model") or "").strip():
            params["model"] = model
        if instructions := str(cfg.get("instructions") or "").strip():
            params["developerInstructions"] = instructions
        if langbot_mcp is not None:
            server = await self._stack.enter_async_context(langbot_mcp(self.env, bool(cfg.get("langbot-tools", True))))
            if server is not None:
                server = mcp_behind(server, self._proxy)
                params["config"] = {f"mcp_servers.{server.name}": server.as_codex_config(token_env_var=MCP_TOKEN_ENV)}
                extra[MCP_TOKEN_ENV] = server.token
        self._thread_params = params
        exe = find_executable(cfg.get("executable"), const.DEFAULT_EXECUTABLE,
                              hint=" (install it with `npm install -g @openai/codex`)")
        program, path_dirs = native_codex(exe)
        env = child_env(extra, home=home)
        if path_dirs:
            env["PATH"] = os.pathsep.join([*path_dirs, env.get("PATH", os.defpath)])
        argv = [program, "app-server"]
        self._proc = await sandbox.spawn_agent(argv, config=cfg, agent=const.PLATFORM, name="codex app-server",
                                               workspace=workspace, home=home, env=env, redact=self.env.redact,
                                               read_only=[Path(d) for d in path_dirs])
        self._peer = Peer(self._proc.send_json, self._proc.read_json, self._answer, name="codex app-server",
                          observe=self._observe)
        self._peer.start()
        await self._call("initialize", {"clientInfo": {"name": const.CLIENT_NAME, "title": const.CLIENT_TITLE,
                                                       "version": const.CLIENT_VERSION}})
        await self._peer.notify("initialized")
        return self._peer

    async def _call(self, method: str, params: dict[str, Any]) -> Any:
        assert self._peer is not None
        try:
            return await self._peer.request(method, params)
        except RpcError as exc:
            if method == "thread/resume" and session_gone(exc.message):
                raise SessionMissing(exc.message) from None
            raise rpc_failure(method, exc.code, exc.message) from None
        except PeerClosed:
            raise await self._exit_error(f"exited before it answered {method}") from None

    async def _exit_error(self, what: str) -> RunnerError:
        if self._proc is None:
            return RunnerError("process.exited", f"codex app-server {what}")
        await self._proc.wait(EXIT_WAIT)
        return self._proc.exit_error(what)

    # --- the thread ---------------------------------------------------------------------------

    async def _open_thread(self) -> str:
        stored = self.env.session.current
        if stored:
            result = await self._call("thread/resume", {"threadId": str(stored), **self._thread_params})
            got = _thread_id(result)
            if got is None or got != stored:
                log.warning("thread/resume of %s answered with thread %s; starting a new thread", stored, got)
                raise SessionMissing(f"thread/resume returned {got}")
            self._meter = UsageMeter(fresh_thread=False)
        else:
            result = await self._call("thread/start", self._thread_params)
            got = _thread_id(result)
            if not got:
                raise RunnerError("upstream.protocol", "Codex started a thread without an id")
            self._meter = UsageMeter(fresh_thread=True)
        self._thread = got
        return got

    # --- turns --------------------------------------------------------------------------------

    async def turn(self, inp: UserInput, index: int) -> AsyncIterator[ev.Event]:
        peer = await self._start()
        if self._thread is None:
            yield ev.SessionId(await self._open_thread())
        assert self._thread is not None and self._meter is not None
        items = await self._input_items(inp)
        mapper = TurnMapper(self._thread, None, self._meter, network_retries=_max_retries(self.env.config))
        self._stop_asked = False
        result = await self._call("turn/start", {"threadId": self._thread, "input": items})
        turn = result.get("turn") if isinstance(result, dict) else None
        mapper.turn_id = str(turn.get("id")) if isinstance(turn, dict) and turn.get("id") else None
        self._turn = mapper.turn_id
        if self._stop_asked:
            await self.interrupt()
        while not mapper.done:  # (a closed iterator leaves _turn set: cancel() interrupts that turn)
            note = await peer.next_notification()
            if note is None:
                self._turn = None
                raise await self._exit_error("exited in the middle of a turn")
            self.env.touch()
            for event in mapper.feed(note):
                yield event
            while self._events:
                yield self._events.pop(0)
            if mapper.give_up is not None:
                raise mapper.give_up  # the kit then interrupts the turn and stops the process
        self._turn = None
        if mapper.error is not None:
            raise mapper.error

    async def _input_items(self, inp: UserInput) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        text = inp.text.strip()
        saved: list[str] = []
        for f in inp.files:
            if f.kind == "image" and f.data is not None:
                items.append({"type": "localImage", "path": str(await asyncio.to_thread(self._save_image, f))})
            elif f.kind == "image" and f.url:
                items.append({"type": "image", "url": f.url})
            elif f.data is not None:
                saved.append(str(await asyncio.to_thread(self._save_file, f)))
            elif f.url:
                saved.append(f.url)
        if saved:
            listed = "\n".join(f"- {p}" for p in saved)
            text = f"{text}\n\n(Files sent with this message:\n{listed})".strip()
        if text:
            items.insert(0, {"type": "text", "text": text, "text_elements": []})
        return items

    def _save_image(self, f: InputFile) -> Path:
        if self._images is None:
            root = data_dir(DATA) / "images"
            root.mkdir(parents=True, exist_ok=True)
            self._images = Path(tempfile.mkdtemp(prefix="run-", dir=root))
        return save_attachment(self._images.parent, self._images.name, f.name or "image", f.data or b"")

    def _save_file(self, f: InputFile) -> Path:
        assert self._workspace is not None
        return save_attachment(self._workspace, _ATTACHMENTS, f.name, f.data or b"")

    # --- server requests (approvals) ----------------------------------------------------------

    def _observe(self, note: Notification) -> None:
        """Seen in arrival order, before the turn loop: remember each file change's paths, which
        its approval request does not repeat."""
        if note.method == "item/started":
            item = note.params.get("item")
            if isinstance(item, dict) and item.get("type") == "fileChange":
                changes = v if isinstance(v := item.get("changes"), list) else []
                self._file_paths[str(item.get("id"))] = [str(c.get("path")) for c in changes
                                                         if isinstance(c, dict) and c.get("path")]
                self._file_changes[str(item.get("id"))] = [c for c in changes if isinstance(c, dict)]

    async def _answer(self, method: str, params: dict[str, Any]) -> Any:
        if method in APPROVAL_METHODS and self._perms is not None:
            paths = self._file_paths.get(str(params.get("itemId"))) if method == FILE_CHANGE_APPROVAL else None
            if self._perms.asks:
                return await self._ask(method, params, paths)
            accepted, why = self._perms.answer(method, params, paths)
            what = params.get("command") or ", ".join(paths or []) or method
            self._events.append(ev.Log(f"Codex asked to approve {what}: {'accepted' if accepted else 'declined'} "
                                       f"({why}; permission-mode {self._perms.mode})"))
            return self._perms.decision(method, accepted)
        if method == USER_INPUT and self._perms is not None and self._perms.asks:
            return await self._questions(params)
        if method == "mcpServer/elicitation/request":
            return {"action": "decline", "content": None}
        self._events.append(ev.Log(f"Codex asked {method}, which this runner does not answer", "warning"))
        raise RpcError(-32601, f"{method} is not supported by the LangBot Codex runner")

    async def _ask(self, method: str, params: dict[str, Any], paths: list[str] | None) -> Any:
        """permission-mode ask: the chat answers. This runs in its own task (the peer answers each
        server request in a task), so the reader keeps reading while the question waits, possibly
        into a later run; ``self.env`` is read only after the wait, as the kit may have swapped it."""
        assert self._perms is not None
        changes = self._file_changes.get(str(params.get("itemId"))) if method == FILE_CHANGE_APPROVAL else None
        q = question(method, params, changes if changes is not None else paths, self._perms.workspace)
        title = q.title
        d = await self.env.ask(q)
        verdict = "allowed for this session" if d.allow and d.always else "allowed" if d.allow else "denied"
        why = f" ({d.reason})" if d.reason and not d.allow else ""
        self._events.append(ev.Log(f"Codex asked to {title}: {verdict}{why}"))
        if (note := ap.denial_note(title, d)) is not None:  # the decline has no reason field: next turn
            self.env.tell_agent(note)
        return self._perms.decision(method, d.allow)  # "always" is kept by the kit (see policy.py)

    async def _questions(self, params: dict[str, Any]) -> dict[str, Any]:
        """``item/tool/requestUserInput`` (the request_user_input tool): each question asked in the
        chat in turn; the answer is ``{answers: {<question id>: {answers: [..]}}}``
        (app-server-protocol v2 ``ToolRequestUserInputResponse``); an unanswered question gets
        an empty list."""
        answers: dict[str, Any] = {}
        for q in params.get("questions") or []:
            if not isinstance(q, dict) or not q.get("id"):
                continue
            opts = [ap.Option(str(o.get("label")), str(o.get("label")), str(o.get("description") or "") or None)
                    for o in (q.get("options") or []) if isinstance(o, dict) and o.get("label")]
            d = await self.env.ask(ap.Question(
                title=str(q.get("question") or q.get("header") or "a question"), detail=str(q.get("header") or ""),
                kind="question", options=opts, free_text=bool(q.get("isOther")) or not opts))
            got = d.answer if d.allow and d.answer else None
            answers[str(q["id"])] = {"answers": [got] if got else []}
        return {"answers": answers}

    # --- stopping -----------------------------------------------------------------------------

    async def interrupt(self) -> None:
        if self._peer is None or self._peer.closed:
            return
        if self._turn is None:
            self._stop_asked = True  # turn/start has not answered yet: interrupt as soon as it does
            return
        try:
            await asyncio.wait_for(self._peer.request("turn/interrupt", {"threadId": self._thread,
                                                                          "turnId": self._turn}), INTERRUPT_WAIT)
        except (RpcError, PeerClosed, TimeoutError) as exc:
            log.info("turn/interrupt did not go through: %s", type(exc).__name__)

    async def cancel(self) -> None:
        await self.interrupt()

    async def close(self) -> None:
        proc, peer = self._proc, self._peer
        try:
            if proc is not None:
                if proc.writer is not None and not proc.writer.is_closing():
                    proc.writer.close()  # app-server saves the thread and exits on end of input
                await proc.wait(EXIT_WAIT)
                await proc.stop()
            if peer is not None:
                await peer.aclose()
        finally:
            await self._stack.aclose()
            if self._images is not None:
                await asyncio.to_thread(shutil.rmtree, self._images, True)


def _max_retries(cfg: Any) -> int:
    value = cfg.get("max-retries")
    return int(value) if isinstance(value, (int, float)) and value >= 0 else 2


def _thread_id(result: Any) -> str | None:
    thread = result.get("thread") if isinstance(result, dict) else None
    tid = thread.get("id") if isinstance(thread, dict) else None
    return str(tid) if tid else None
