"""Hand a coding agent LangBot's run-scoped MCP server: the SDK's ``AgentRunMCPBridge``.

A coding-agent runner (Claude Code, Codex, an ACP agent) runs the agent as a child process. When
the LangBot run grants tools, knowledge bases, history or a sandbox, the agent gets an MCP server
through which it can reach exactly what this run authorised, and nothing once the run is over::

    async with langbot_mcp(env, bool(env.config.get("langbot-tools"))) as server:
        if server is not None:
            args += ["--mcp-config", write_private_json(server.as_claude_config())]
        ...  # run the agent

What the SDK's bridge offers (langbot-plugin 0.7.16 and 0.7.18 ship the same code):

* a ``ThreadingHTTPServer`` on 127.0.0.1 and a free port (port 0), started on the run's event
  loop; each request is handled in a thread that runs the tool on that loop;
* ``POST /mcp/http``: MCP JSON-RPC over plain HTTP (stateless, JSON responses, 202 for
  notifications, batches; no SSE stream, no ``Mcp-Session-Id``); ``POST /mcp``: the private
  ``{method, params}`` form its stdio proxy (``python -m langbot_plugin.api.agent_tools.mcp_stdio``)
  uses; ``GET /healthz``. Both POST paths require ``Authorization: Bearer <token>`` (or
  ``X-LangBot-Agent-MCP-Token``) and answer 401 without it; the token is random per bridge;
* not the granted tools under their own names but a fixed set of LangBot tools, each listed only
  when the run allows it: ``langbot_call_tool`` / ``langbot_get_tool_detail`` (any granted tool,
  by name; the SDK proxy refuses a tool that is not in ``ctx.resources``),
  ``langbot_retrieve_knowledge``, ``langbot_history_page``, the box tools and
  ``langbot_reply_files``, plus ``langbot_get_current_event`` and ``langbot_list_assets``, which
  are always there. A run that grants none of the former gets no server at all.

The bridge belongs to the agent process, not to one run: an adapter keeps the block open for the
life of its agent (its exit stack). The bridge serves whichever run holds that agent now:

* while the run that started it holds the agent, calls go out under that run's id, with its grants;
* when the agent is parked on a question (:mod:`runner_kit.approvals`: the run ends, the agent
  waits), the kit calls :func:`release`: from then on every call is refused with
  :data:`NO_RUN` (the calls still running are cancelled and answered the same way), and
  ``tools/list`` is empty. LangBot forgets a run at its end, so nothing may go out under it;
* when a later run attaches to the parked agent, the kit calls :func:`hand_over`: the bridge serves
  that run (its id, its grants; a tool it does not grant is refused), with the same port and token.
  The token is added to the new run's redactor and a request waits at most as long as that run has
  left.

The bridge is stopped when the block exits, however it exits (a host cancel included): the tool
calls still running on the loop are cancelled, the listening socket is closed and its serving
thread joined, and a request that slips in before then is refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .logs import get_logger

if TYPE_CHECKING:
    from .runner import RunEnv

# tools the SDK lists for every run, whatever it grants: they alone are no reason to start a server
ALWAYS_LISTED = frozenset({"langbot_get_current_event", "langbot_list_assets"})
DEFAULT_NAME = "langbot"
# Codex wants ``^[a-zA-Z0-9_-]+$`` for a server name; Claude Code builds ``mcp__<name>__<tool>``
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_ENDED = "the LangBot run this MCP server belonged to has ended"
NO_RUN = "the LangBot run this tool belonged to has ended; the agent is waiting for an answer"
"""What a call gets while no run holds the agent (parked on a question, or between runs)."""
NO_API = "the LangBot run that holds the agent offers no host API to call"

log = get_logger("runner_kit.agent_mcp")


@dataclass(frozen=True)
class LangBotMCP:
    """A live run-scoped MCP server and the forms each agent CLI takes it in."""

    name: str
    url: str
    """The streamable-HTTP MCP endpoint: ``http://127.0.0.1:<port>/mcp/http``."""
    tool_names: tuple[str, ...]
    """The MCP tools the bridge listed for the run that started it (``langbot_call_tool``, ...); a
    later run that takes the agent over may grant other ones, and ``tools/list`` says which."""
    token: str = field(repr=False)
    """The bearer token (already in ``env.redact``); hand it to an agent only through a header,
    an environment variable or a private file, never on a command line."""
    stdio_command: str = ""
    stdio_args: tuple[str, ...] = ()
    stdio_env: dict[str, str] = field(default_factory=dict, repr=False)

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def as_acp(self) -> dict[str, Any]:
        """An ACP ``session/new`` ``mcpServers`` entry over HTTP (the agent must advertise
        ``agentCapabilities.mcpCapabilities.http``)."""
        return {
            "type": "http",
            "name": self.name,
            "url": self.url,
            "headers": [{"name": k, "value": v} for k, v in self.headers.items()],
        }

    def as_acp_stdio(self) -> dict[str, Any]:
        """An ACP ``mcpServers`` entry over stdio, which every ACP agent must support: the agent
        starts the SDK's stdio proxy with this Python, and the proxy calls the bridge."""
        return {
            "name": self.name,
            "command": self.stdio_command,
            "args": list(self.stdio_args),
            "env": [{"name": k, "value": v} for k, v in self.stdio_env.items()],
        }

    def as_claude_config(self) -> dict[str, Any]:
        """The JSON for ``claude --mcp-config`` (write it to a private file: it holds the token).
        ``--mcp-config`` takes several values, so it swallows a prompt that follows it: put the
        prompt first, or send it on stdin. Claude Code names the tools ``mcp__<name>__<tool>``."""
        return {"mcpServers": {self.name: {"type": "http", "url": self.url, "headers": self.headers}}}

    def as_codex_config(self, *, token_env_var: str | None = None) -> dict[str, Any]:
        """The ``mcp_servers.<name>`` table of Codex's config (a streamable-HTTP server).

        With ``token_env_var`` the token stays out of the config: Codex reads it from that
        variable (``bearer_token_env_var``), which the caller sets to :attr:`token` in Codex's
        environment. Without it the header is literal (``http_headers``). Codex refuses an inline
        ``bearer_token``. Pass it as ``config={f"mcp_servers.{server.name}": table}`` to
        app-server ``thread/start`` or under ``[mcp_servers.<name>]`` in a config file.
        """
        table: dict[str, Any] = {"url": self.url}
        if token_env_var:
            table["bearer_token_env_var"] = token_env_var
        else:
            table["http_headers"] = self.headers
        return table


class _RunTools:
    """The SDK's tool surface as the bridge sees it: the one of the run that holds the agent now,
    or none (every call refused); closable when the agent stops.

    Tool calls run as tasks on the loop (the bridge's threads submit them); they are remembered so
    that a release or the close cancels them instead of leaving host calls running.
    """

    def __init__(self, external_tools_cls: Any):
        self._cls = external_tools_cls
        self._tools: Any = None  # AgentRunExternalTools(api, ctx) of the run that holds the agent
        self._why = NO_RUN  # what a call gets while _tools is None
        self._calls: set[asyncio.Task[Any]] = set()
        self._released: set[asyncio.Task[Any]] = set()  # calls cancelled by release(): answered _why
        self.env: RunEnv | None = None  # the run this surface is listed on (see _holders)
        self.run_id: str | None = None  # the run the calls go out under; None while none holds the agent
        self.bridge: Any = None
        self.closed = False

    def bind(self, env: RunEnv) -> None:
        """Serve the run of ``env``: its host API, its id and grants. RuntimeError when the run has
        no host API (then nothing is served)."""
        self._move_to(env)
        self.unbind(NO_API)
        api = env.ctx.api  # RuntimeError: no active host API
        self._tools = self._cls(api, env.ctx)
        self.run_id = str(env.ctx.run_id)
        if self.bridge is not None:
            env.redact.add(self.bridge.token)
            # a request waits for its tool call at most as long as this run has left
            self.bridge.request_timeout = max(1.0, env.deadline - time.monotonic())

    def unbind(self, why: str = NO_RUN) -> None:
        """Serve no run: every call, and those still running (cancelled), is answered ``why``."""
        self._tools, self._why, self.run_id = None, why, None
        for task in list(self._calls):
            self._released.add(task)
            task.cancel()

    def _move_to(self, env: RunEnv) -> None:
        if self.env is env:
            return
        if self.env is not None and self in _holders(self.env):
            _holders(self.env).remove(self)
        self.env = env
        _holders(env).append(self)

    def mcp_tools(self, *, include_unavailable: bool = False, include_run_token: bool = False) -> list[dict[str, Any]]:
        if self.closed or self._tools is None:
            return []
        listed: list[dict[str, Any]] = self._tools.mcp_tools(include_run_token=include_run_token)
        return listed

    async def call_mcp_tool(self, name: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        if self.closed:
            return _refusal(_ENDED)
        tools = self._tools
        if tools is None:
            return _refusal(self._why)
        task = asyncio.current_task()
        if task is not None:
            self._calls.add(task)
        try:
            result: dict[str, Any] = await tools.call_mcp_tool(name, arguments)
            return result
        except asyncio.CancelledError:
            if task is None or task not in self._released or self.closed:
                raise
            task.uncancel()  # released, not stopped: the agent gets the refusal, not a broken request
            return _refusal(self._why)
        finally:
            if task is not None:
                self._calls.discard(task)
                self._released.discard(task)

    def close(self) -> None:
        self.closed = True
        if self.env is not None and self in _holders(self.env):
            _holders(self.env).remove(self)
        self._tools, self.run_id = None, None
        for task in list(self._calls):
            task.cancel()


def _refusal(text: str) -> dict[str, Any]:
    return {"isError": True, "content": [{"type": "text", "text": text}]}


def _holders(env: Any) -> list[_RunTools]:
    """The bridges of the agent that ``env``'s run holds (``RunEnv.mcp_bridges``)."""
    held: list[_RunTools] | None = getattr(env, "mcp_bridges", None)
    if held is None:
        held = []
        env.mcp_bridges = held
    return held


def release(env: RunEnv) -> None:
    """The run of ``env`` no longer holds its agent (it is parked on a question): its bridges
    refuse every call until a later run takes the agent (:func:`hand_over`)."""
    for tools in list(_holders(env)):
        if tools.run_id is not None:
            log.info("LangBot MCP server: run %s let go of the agent; tool calls are refused until a "
                     "later run takes it", tools.run_id)
        tools.unbind(NO_RUN)


def hand_over(old: RunEnv, new: RunEnv) -> None:
    """A later run (``new``) takes the agent that ``old``'s run held: the agent's bridges serve it."""
    if old is new:
        return
    for tools in list(_holders(old)):
        try:
            tools.bind(new)
        except RuntimeError:
            log.info("LangBot MCP server: run %s has no host API; tool calls are refused", new.ctx.run_id)
            continue
        log.info("LangBot MCP server: now serving run %s", tools.run_id)


def _sdk() -> tuple[Any, Any] | None:
    try:
        from langbot_plugin.api.agent_tools.external_tools import AgentRunExternalTools
        from langbot_plugin.api.agent_tools.mcp_bridge import AgentRunMCPBridge
    except ImportError:
        return None
    return AgentRunExternalTools, AgentRunMCPBridge


@contextlib.asynccontextmanager
async def langbot_mcp(env: RunEnv, enabled: bool, name: str = DEFAULT_NAME) -> AsyncIterator[LangBotMCP | None]:
    """Start this run's LangBot MCP bridge for the block; ``None`` (with one info line saying why)
    when it is disabled, when the run grants nothing it could offer, or when the SDK lacks it."""
    if not _NAME.match(name):
        raise ValueError(f"MCP server name {name!r} must be 1-64 letters, digits, '_' or '-'")
    if not enabled:
        log.info("LangBot MCP server: disabled in the runner's config")
        yield None
        return
    sdk = _sdk()
    if sdk is None:
        log.info("LangBot MCP server: this langbot-plugin SDK has no agent_tools bridge")
        yield None
        return
    external_tools_cls, bridge_cls = sdk
    try:
        api = env.ctx.api
    except RuntimeError:
        log.info("LangBot MCP server: the run has no active host API")
        yield None
        return
    surface = external_tools_cls(api, env.ctx)
    tool_names = tuple(str(t.get("name")) for t in surface.mcp_tools())
    if not set(tool_names) - ALWAYS_LISTED:
        log.info("LangBot MCP server: the run grants no tools, knowledge bases, history or sandbox")
        yield None
        return
    tools = _RunTools(external_tools_cls)
    bridge = bridge_cls(tools, host="127.0.0.1", port=0, server_name=name)
    tools.bridge = bridge
    tools.bind(env)  # the token into the run's redactor; the request timeout from its deadline
    try:
        bridge.start()
    except OSError as exc:
        tools.close()
        log.warning("LangBot MCP server: could not listen on 127.0.0.1: %s", exc)
        yield None
        return
    try:
        http = bridge.mcp_server(transport="http").to_dict()
        stdio = bridge.mcp_server(transport="stdio").to_dict()
        server = LangBotMCP(
            name=name,
            url=str(http["url"]),
            tool_names=tool_names,
            token=str(bridge.token),
            stdio_command=str(stdio.get("command") or ""),
            stdio_args=tuple(str(a) for a in stdio.get("args") or ()),
            stdio_env={str(k): str(v) for k, v in dict(stdio.get("env") or {}).items()},
        )
        log.info("LangBot MCP server %s on %s offers %s", name, server.url, ", ".join(tool_names))
        yield server
    finally:
        tools.close()
        await _stop(bridge)


async def _stop(bridge: Any) -> None:
    """Stop the bridge off the loop; if this task is cancelled meanwhile, the stop still completes
    in its thread. The SDK's server checks for shutdown only between its 0.5 s polls, so a few
    empty connections wake it at once (a run's end then waits milliseconds, not half a second)."""
    address = _address(bridge)
    stopping = asyncio.ensure_future(asyncio.to_thread(bridge.stop))
    try:
        for _ in range(50):
            if stopping.done() or address is None:
                break
            await asyncio.to_thread(_knock, address)
            await asyncio.wait([stopping], timeout=0.01)
        await asyncio.shield(stopping)
    except asyncio.CancelledError:
        stopping.add_done_callback(lambda f: f.cancelled() or f.exception())
        raise


def _address(bridge: Any) -> tuple[str, int] | None:
    server = getattr(bridge, "_server", None)
    address = getattr(server, "server_address", None)
    if isinstance(address, tuple) and len(address) >= 2:
        return str(address[0]), int(address[1])
    return None


def _knock(address: tuple[str, int]) -> None:
    """Open and close one connection (wakes a ``serve_forever`` poll)."""
    try:
        with socket.create_connection(address, timeout=0.2):
            pass
    except OSError:
        pass


__all__ = ["ALWAYS_LISTED", "DEFAULT_NAME", "NO_RUN", "LangBotMCP", "hand_over", "langbot_mcp", "release"]
