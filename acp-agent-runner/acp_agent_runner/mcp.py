"""The ``mcpServers`` handed to ``session/new`` / ``session/resume`` / ``session/load``.

LangBot's run-scoped bridge (``runner_kit.agent_mcp``) comes first when ``langbot-tools`` is on and
the run grants anything; then the owner's ``mcp-servers``: a JSON list of ACP entries, or an object
``{name: {command, args, env} | {type: http|sse, url, headers}}``. HTTP/SSE servers are only
offered to an agent that advertises them (``mcpCapabilities``); stdio servers always.
"""

from __future__ import annotations

import contextlib
import sys
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from acp.schema import EnvVariable, HttpHeader, HttpMcpServer, McpServerStdio, SseMcpServer

from runner_kit.agent_mcp import langbot_mcp
from runner_kit.errors import RunnerError
from runner_kit.logs import get_logger
from runner_kit.secret_proxy import mcp_behind

log = get_logger("runner_kit.acp")


def _pairs(value: Any, key: str) -> list[dict[str, str]]:
    if isinstance(value, dict):
        return [{"name": str(k), "value": str(v)} for k, v in value.items()]
    if isinstance(value, list):
        return [{"name": str(p["name"]), "value": str(p.get("value", ""))} for p in value
                if isinstance(p, dict) and "name" in p]
    if value in (None, ""):
        return []
    raise RunnerError("config.invalid", f"`mcp-servers`: `{key}` must be an object or a list of name/value pairs")


def configured(raw: Any) -> list[dict[str, Any]]:
    """The owner's ``mcp-servers`` as ACP entries."""
    if raw in (None, "", {}, []):
        return []
    items: list[tuple[str, Any]]
    if isinstance(raw, dict):
        items = list(raw.items())
    elif isinstance(raw, list):
        items = [(str(e.get("name", "")) if isinstance(e, dict) else "", e) for e in raw]
    else:
        raise RunnerError("config.invalid", "`mcp-servers` must be a JSON object or list")
    out: list[dict[str, Any]] = []
    for name, spec in items:
        if not isinstance(spec, dict) or not name:
            raise RunnerError("config.invalid", "every `mcp-servers` entry needs a name and an object")
        kind = str(spec.get("type") or ("http" if spec.get("url") else "stdio"))
        if kind in ("http", "sse"):
            if not spec.get("url"):
                raise RunnerError("config.invalid", f"`mcp-servers` entry {name!r} needs a \"url\"")
            out.append({"type": kind, "name": name, "url": str(spec["url"]),
                        "headers": _pairs(spec.get("headers"), "headers")})
        else:
            if not spec.get("command"):
                raise RunnerError("config.invalid", f"`mcp-servers` entry {name!r} needs a \"command\"")
            args = spec.get("args") or []
            out.append({"name": name, "command": str(spec["command"]), "args": [str(a) for a in args],
                        "env": _pairs(spec.get("env"), "env")})
    return out


def offered(entries: list[dict[str, Any]], caps: Any) -> list[dict[str, Any]]:
    """The entries this agent can take (HTTP/SSE only if it advertises them)."""
    mcp = getattr(caps, "mcp_capabilities", None)
    ok = {"http": bool(getattr(mcp, "http", False)), "sse": bool(getattr(mcp, "sse", False))}
    keep = []
    for e in entries:
        kind = e.get("type")
        if kind in ok and not ok[kind]:
            log.info("ACP agent takes no %s MCP servers; skipped %r", kind, e.get("name"))
            continue
        keep.append(e)
    return keep


McpServer = HttpMcpServer | SseMcpServer | McpServerStdio


def as_model(entry: dict[str, Any]) -> McpServer:
    """One ``mcpServers`` entry as the library's model (what goes on the wire)."""
    kind = entry.get("type")
    if kind in ("http", "sse"):
        headers = [HttpHeader(name=h["name"], value=h["value"]) for h in entry.get("headers") or []]
        cls = HttpMcpServer if kind == "http" else SseMcpServer
        return cls(type=kind, name=entry["name"], url=entry["url"], headers=headers)
    env = [EnvVariable(name=e["name"], value=e["value"]) for e in entry.get("env") or []]
    return McpServerStdio(name=entry["name"], command=entry["command"], args=list(entry.get("args") or []), env=env)


def mcp_stdio_paths() -> list[Path]:
    """What an agent reads to start the SDK's stdio MCP proxy (``python -m
    langbot_plugin.api.agent_tools.mcp_stdio``) inside its sandbox: this Python and the folder the
    SDK is installed in (code only, no data)."""
    paths = [Path(sys.prefix), Path(sys.base_prefix)]
    with contextlib.suppress(ImportError):
        import langbot_plugin

        paths.append(Path(langbot_plugin.__file__).resolve().parent.parent)
    return paths


async def mcp_servers(env: Any, caps: Any, stack: AsyncExitStack, proxy: Any = None) -> list[McpServer]:
    """The bridge (kept open on ``stack`` until the run ends) plus the configured servers."""
    entries = configured(env.config.get("mcp-servers"))
    server = await stack.enter_async_context(langbot_mcp(env, bool(env.config.get("langbot-tools", True))))
    if server is not None and proxy is not None:
        server = mcp_behind(server, proxy)  # the agent gets a stand-in token and the proxy's URL
    if server is not None:
        http = bool(getattr(getattr(caps, "mcp_capabilities", None), "http", False))
        entries.insert(0, server.as_acp() if http else server.as_acp_stdio())
    return [as_model(e) for e in offered(entries, caps)]
