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
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from runner_kit import events as ev
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
from runner_kit.runner import Adapter, RunEnv

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


class ClaudeCodeAdapter(Adapter):
    """Drives one live ``claude`` process through the run's turns."""

    platform = const.PLATFORM
    session_key = const.SESSION_KEY
    multi_turn = True

    def __init__(self, env: RunEnv):
        super().__init__(env)
        self.proc: AgentProcess | None = None
        self.reader: TurnReader | None = None  # the turn in progress
        self.expected_session: str | None = None
        self.workspace: Path | None = None
        self.home: Path | None = None
        self._stack = contextlib.AsyncExitStack()
        self._requests = 0

    # --- the process -------------------------------------------------------------------------

    def permission_mode(self) -> str:
        return const.PERMISSION_MODES[str(self.env.config.get("permission-mode") or "workspace-write")]

    def child_environment(self, home: Path) -> dict[str, str]:
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
        """LangBot's run-scoped MCP bridge as claude's ``--mcp-config``, when the run grants assets."""
        try:
            from runner_kit.agent_mcp import langbot_mcp
        except ImportError:
            return None
        enabled = self.env.config.get("langbot-tools", True) is not False
        server = await self._stack.enter_async_context(langbot_mcp(self.env, enabled=enabled))
        return None if server is None else server.as_claude_config()

    async def _start(self) -> AgentProcess:
        cfg = self.env.config
        self.workspace = workspace_dir(self.env, cfg.get("workspace"), const.PROCESS_PLATFORM)
        home = self.home = private_home(const.PROCESS_PLATFORM, self.workspace)
        env = self.child_environment(home)
        argv = await self.argv()
        self.proc = await AgentProcess.spawn(argv, cwd=self.workspace, env=env, name="claude", redact=self.env.redact)
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
                if obj.get("type") in ("control_response", "control_request", "keep_alive"):
                    continue
                for item in reader.feed(obj):
                    yield item
        finally:
            self.reader = None
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
