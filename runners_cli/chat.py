"""``runners chat``: talk to one plugin's runner from the terminal through the local host.

The runner is loaded and bound the way the plugin runtime does it, each turn gets a context built
like LangBot's, and ``state.updated`` results are persisted to a SQLite file, so a second
invocation with the same state file and conversation id continues the upstream conversation.

stdout carries only the assistant's text (streamed); everything else goes to stderr.
"""

from __future__ import annotations

import ast
import asyncio
import json
import logging
import operator
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import yaml

from runner_kit.explain import parse_failure_log

from .host import Identity, LocalHost, StateStore
from .host_models import LocalTool, OpenAIChatModel
from .plugins import PluginInfo, load_runner_class

DEFAULT_STATE = Path(".runners") / "chat-state.sqlite"
DEFAULT_CONVERSATION = "cli"
DEFAULT_USER = "cli"
EXIT_COMMANDS = {"/exit", "/quit"}

_SECRET_KEY = re.compile(r"(secret|token|password|passwd|api[-_.]?key|credential|auth|cookie|private)", re.I)


class ChatError(Exception):
    """A problem with the command line itself (bad config file, bad --set)."""


# --- config ------------------------------------------------------------------------------------


def load_config_file(path: str | Path) -> dict[str, Any]:
    """A runner config from a YAML or JSON file (a JSON document is valid YAML)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ChatError(f"cannot read config file {p}: {exc.strerror or exc}") from None
    try:
        doc = json.loads(text) if p.suffix.lower() == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise ChatError(f"config file {p} is not valid {'JSON' if p.suffix.lower() == '.json' else 'YAML'}: "
                        f"{str(exc).splitlines()[0]}") from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise ChatError(f"config file {p} must hold a mapping of config keys")
    return doc


def apply_sets(config: dict[str, Any], sets: list[str]) -> dict[str, Any]:
    """``--set key=value`` overrides; values stay strings (the runner coerces, like with the host)."""
    out = dict(config)
    for item in sets:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ChatError(f"--set expects key=value, got {item!r}")
        out[key.strip()] = value
    return out


def secret_values(info: PluginInfo, config: dict[str, Any]) -> list[str]:
    """The config values declared secret (never shown)."""
    out = []
    for item in info.config_items:
        if item.get("type") in ("secret", "password"):
            value = config.get(str(item.get("name")))
            if isinstance(value, str) and value:
                out.append(value)
    return out


def looks_secret(key: str, value: Any, secrets: list[str]) -> bool:
    if _SECRET_KEY.search(key):
        return True
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return any(s and s in text for s in secrets)


# --- the local model and demo tools (runners chat local-agent) -------------------------------------

#: the plugin that runs on the host's own models and tools
LOCAL_AGENT = "local-agent"
#: the model id the local host registers the --llm-* endpoint under
LOCAL_MODEL_ID = "local-llm"


@dataclass
class LLMSettings:
    """The OpenAI-compatible endpoint the local host serves LangBot's model actions from."""

    base_url: str
    model: str
    api_key: str | None = None


def llm_settings(base_url: str | None, api_key: str | None, model: str | None,
                 env: dict[str, str] | None = None) -> LLMSettings:
    """The --llm-* flags, else OPENAI_BASE_URL / OPENAI_API_KEY / OPENAI_MODEL; a URL and a model
    name are required."""
    env = dict(os.environ) if env is None else env
    base_url = base_url or env.get("OPENAI_BASE_URL") or None
    api_key = api_key or env.get("OPENAI_API_KEY") or None
    model = model or env.get("OPENAI_MODEL") or None
    missing = [flag for flag, value in (("--llm-base-url (or OPENAI_BASE_URL)", base_url),
                                        ("--llm-model (or OPENAI_MODEL)", model)) if not value]
    if missing:
        raise ChatError(f"{LOCAL_AGENT} answers with an OpenAI-compatible model: give {' and '.join(missing)}"
                        " (and --llm-api-key or OPENAI_API_KEY when the endpoint needs a key)")
    assert base_url is not None and model is not None
    return LLMSettings(base_url=base_url, model=model, api_key=api_key)


def local_agent_config(config: dict[str, Any]) -> dict[str, Any]:
    """The runner config ``runners chat local-agent`` uses: the local model and every host tool,
    unless the user set them."""
    out = dict(config)
    out.setdefault("model", {"primary": LOCAL_MODEL_ID, "fallbacks": []})
    out.setdefault("enable-all-tools", True)
    return out


_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}
MAX_EXPRESSION = 200


def calculate(expression: str) -> float | int:
    """Arithmetic (numbers, + - * / // % **, parentheses) parsed with ``ast`` — nothing is executed.
    Raises ValueError for anything else, and for results too large to be useful."""
    if not isinstance(expression, str) or not expression.strip():
        raise ValueError("give an arithmetic expression, e.g. 2 * (3 + 4)")
    if len(expression) > MAX_EXPRESSION:
        raise ValueError(f"the expression is longer than {MAX_EXPRESSION} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError:
        raise ValueError(f"not an arithmetic expression: {expression!r}") from None

    def value(node: ast.AST) -> float | int:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) \
                and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            return _UNARY[type(node.op)](value(node.operand))  # type: ignore[no-any-return]
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            left, right = value(node.left), value(node.right)
            if isinstance(node.op, ast.Pow) and (abs(right) > 64 or abs(left) > 1e6):
                raise ValueError("the power is too large")
            result = _BINARY[type(node.op)](left, right)
            if abs(result) > 1e100:
                raise ValueError("the result is too large")
            return result  # type: ignore[no-any-return]
        raise ValueError(f"only numbers and + - * / // % ** ( ) are allowed, not {type(node).__name__}")

    try:
        return value(tree.body)
    except ZeroDivisionError:
        raise ValueError("division by zero") from None


def _calculate_tool(params: dict[str, Any]) -> dict[str, Any]:
    expression = str(params.get("expression") or "")
    return {"expression": expression, "result": calculate(expression)}


def _current_time_tool(params: dict[str, Any]) -> dict[str, Any]:
    now = time.time()
    return {"utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
            "local": time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(now)), "unix": int(now)}


def demo_tools() -> list[LocalTool]:
    """The tools ``runners chat local-agent`` offers: safe, no file or network access."""
    return [
        LocalTool("current_time", "The current date and time (UTC and this computer's local time).",
                  {"type": "object", "properties": {}}, _current_time_tool),
        LocalTool("calculate", "Evaluate an arithmetic expression: numbers, + - * / // % ** and parentheses.",
                  {"type": "object", "properties": {"expression": {"type": "string",
                                                                   "description": "e.g. (17 + 4) * 3"}},
                   "required": ["expression"]}, _calculate_tool),
    ]


# --- terminal output ---------------------------------------------------------------------------


def _wants_color(stream: TextIO) -> bool:
    if os.environ.get("NO_COLOR"):
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def message_parts(message: dict[str, Any] | None) -> tuple[str, list[str]]:
    """(text, attachment lines) of a completed assistant message."""
    if not message:
        return "", []
    content = message.get("content")
    if content is None:
        return "", []
    if isinstance(content, str):
        return content, []
    texts, extras = [], []
    for el in content if isinstance(content, list) else []:
        if not isinstance(el, dict):
            continue
        kind = el.get("type")
        if kind == "text":
            texts.append(el.get("text") or "")
        elif kind == "image_url":
            url = (el.get("image_url") or {}).get("url") if isinstance(el.get("image_url"), dict) else el.get("image_url")
            extras.append(f"[image] {url}")
        elif kind == "file_url":
            name = el.get("file_name")
            extras.append(f"[file] {el.get('file_url')}" + (f" ({name})" if name else ""))
        elif kind == "image_base64":
            extras.append("[image] (inline base64)")
        elif kind == "file_base64":
            extras.append(f"[file] {el.get('file_name') or '(inline base64)'}")
    return "".join(texts), extras


class Printer:
    """Streams cumulative deltas to stdout as suffixes; notes go to stderr."""

    def __init__(self, out: TextIO, err: TextIO, redact: Callable[[str], str] = lambda text: text):
        self.out = out
        self.err = err
        self.redact = redact
        self.color = _wants_color(err)
        self.printed = ""  # the current message's text already on stdout
        self.mid_line = False  # stdout's last character is not a newline

    def _write(self, text: str) -> None:
        if not text:
            return
        self.out.write(text)
        self.out.flush()
        self.mid_line = not text.endswith("\n")

    def _show(self, text: str) -> None:
        """Bring stdout to ``text``: print the new suffix, or start over on a new line."""
        if text.startswith(self.printed):
            self._write(text[len(self.printed):])
        else:
            if self.mid_line:
                self._write("\n")
            self._write(text)
        self.printed = text

    def delta(self, chunk: dict[str, Any]) -> None:
        text = chunk.get("all_content")
        if text is None:  # not cumulative; fall back to appending the piece
            piece = chunk.get("content")
            text = self.printed + (piece if isinstance(piece, str) else "")
        self._show(text)

    def completed(self, data: dict[str, Any]) -> None:
        text, extras = message_parts(data.get("message"))
        if text:
            self._show(text)
        if self.mid_line:
            self._write("\n")
        for line in extras:
            self._write(line + "\n")
        for fid in data.get("file_ids") or []:
            self._write(f"[file id] {fid}\n")
        self.printed = ""

    def end_line(self) -> None:
        if self.mid_line:
            self._write("\n")
        self.printed = ""

    def note(self, text: str, *, dim: bool = True) -> None:
        text = self.redact(text)
        if self.mid_line:  # keep the note off the half-written answer line on a terminal
            self.err.write("\n")
        if dim and self.color:
            text = f"\x1b[2m{text}\x1b[0m"
        self.err.write(text + "\n")
        self.err.flush()


def _short(value: Any, limit: int = 120) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def format_usage(usage: Any) -> str:
    if usage is None:
        return "usage: unknown"
    data = usage if isinstance(usage, dict) else usage.model_dump(exclude_none=True)
    data = {k: v for k, v in data.items() if v is not None}
    if not data:
        return "usage: unknown"
    names = [("prompt_tokens", "prompt"), ("completion_tokens", "completion"), ("total_tokens", "total")]
    parts = [f"{label} {data.pop(key)}" for key, label in names if key in data]
    parts += [f"{k} {_short(v, 60)}" for k, v in sorted(data.items())]
    return "usage: " + ", ".join(parts)


# --- one session -------------------------------------------------------------------------------


@dataclass
class TurnOutcome:
    failed: dict[str, Any] | None = None
    usage: Any = None
    state: list[tuple[str, str, Any]] = field(default_factory=list)


@dataclass
class ChatSession:
    info: PluginInfo
    config: dict[str, Any]
    state_path: Path
    conversation: str = DEFAULT_CONVERSATION
    user: str | None = None
    out: TextIO = field(default_factory=lambda: sys.stdout)
    err: TextIO = field(default_factory=lambda: sys.stderr)
    llm: LLMSettings | None = None  # the local host's model (local-agent)

    def __post_init__(self) -> None:
        self.secrets = secret_values(self.info, self.config)
        if self.llm is not None and self.llm.api_key:
            self.secrets.append(self.llm.api_key)
        self.printer = Printer(self.out, self.err, self.redact)
        actor = self.user or DEFAULT_USER
        self.identity = Identity(conversation_id=self.conversation, actor_id=actor, actor_name=actor)
        self.host: LocalHost | None = None
        self.runner: Any = None
        self.current: Any = None  # the running turn's context (for follow-ups)

    async def start(self) -> None:
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        self.host = LocalHost(store=StateStore(self.state_path), runner_id=self.info.runner_id)
        if self.llm is not None:
            self.host.add_model(OpenAIChatModel(LOCAL_MODEL_ID, base_url=self.llm.base_url, api_key=self.llm.api_key,
                                                model_name=self.llm.model))
            for tool in demo_tools():
                self.host.add_tool(tool)
        runner_cls = load_runner_class(self.info)
        self.runner = runner_cls()
        self.runner.bind_runtime(plugin_runtime_handler=self.host, plugin_identity=f"{self.info.author}/{self.info.name}")
        await self.runner.initialize()

    async def close(self) -> None:
        from runner_kit.http import close_shared_client

        try:
            await close_shared_client()
        finally:
            if self.host is not None:
                self.host.store.close()

    @property
    def steering(self) -> bool:
        """The runner takes follow-ups during a run (LangBot claims them for it)."""
        return bool(self.info.capabilities.get("steering"))

    async def turn(self, text: str, follow_ups: list[str] | None = None) -> TurnOutcome:
        """One run; ``follow_ups`` are handed to it as messages sent while it runs."""
        assert self.host is not None and self.runner is not None
        outcome = TurnOutcome()
        ctx = self.host.make_context(text, config=dict(self.config), identity=self.identity,
                                     steering=self.steering)
        self.current = ctx
        if self.steering:
            # claimed for this run before it starts, as LangBot claims a message sent while a run is
            # active: the runner takes them at its first turn boundary, however fast that turn is
            for follow in follow_ups or []:
                self.follow_up(follow)
        if follow_ups and not self.steering:
            self.printer.note(f"{self.info.runner_id} does not take follow-ups during a run; --follow-up ignored",
                              dim=False)
        p = self.printer
        try:
            await self._consume(ctx, outcome)
        except Exception as exc:  # noqa: BLE001 - a runner bug; report it like a failure
            outcome.failed = {
                "code": "runner.exception",
                "retryable": False,
                "error": self.redact(f"the runner raised {type(exc).__name__}: {exc}"),
            }
        finally:
            self.current = None
        p.end_line()
        return outcome

    def follow_up(self, text: str) -> bool:
        """Hand a message typed during a run to that run (as LangBot's steering does)."""
        if self.current is None or not self.steering or self.host is None:
            return False
        self.host.queue_steering(self.current, text)
        self.printer.note(f"(follow-up queued for the running turn: {_short(text, 60)})")
        return True

    def redact(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, "***")
        return text

    async def _consume(self, ctx: Any, outcome: TurnOutcome) -> None:
        assert self.host is not None
        p = self.printer
        calls: dict[str, Any] = {}  # tool calls started, by call id: their parameters
        async for result in self.runner.invoke(ctx):
            self.host.apply_result(ctx.run_id, result)
            rtype = getattr(result.type, "value", result.type)
            data = result.data or {}
            if rtype == "message.delta":
                p.delta(data.get("chunk") or {})
            elif rtype == "message.completed":
                p.completed(data)
            elif rtype == "tool.call.started":  # the runner's own progress line shows it running
                calls[str(data.get("tool_call_id") or data.get("tool_name"))] = data.get("parameters") or {}
            elif rtype == "tool.call.completed":  # one line per tool call, when it is done
                params = calls.pop(str(data.get("tool_call_id") or data.get("tool_name")), None) or {}
                status = f"error: {_short(data.get('error'))}" if data.get("error") else "done"
                p.note(f"[tool] {data.get('tool_name')}" + (f" {_short(params)}" if params else "") + f": {status}")
            elif rtype == "state.updated":
                outcome.state.append((str(data.get("scope")), str(data.get("key")), data.get("value")))
            elif rtype == "processor.log":
                logged = parse_failure_log(data.get("text"))
                if logged is not None:  # a failure the chat was shown in words (runner_kit.explain)
                    code, retryable, message = logged
                    outcome.failed = {"code": code, "retryable": retryable, "error": message}
                else:
                    p.note(f"[log {data.get('level', 'info')}] {_short(data.get('text'), 500)}")
            elif rtype == "run.completed":
                outcome.usage = result.usage
            elif rtype == "run.failed":
                outcome.usage = result.usage
                outcome.failed = data

    def report(self, outcome: TurnOutcome) -> None:
        p = self.printer
        if outcome.failed is not None:
            f = outcome.failed
            retry = "retryable" if f.get("retryable") else "not retryable"
            p.note(f"error [{f.get('code')}] ({retry}): {f.get('error')}", dim=False)
        p.note(format_usage(outcome.usage))
        for scope, key, value in outcome.state:
            if looks_secret(key, value, self.secrets):
                p.note(f"state: {scope}.{key} updated (value hidden)")
            else:
                p.note(f"state: {scope}.{key} = {_short(value)}")


def _read_line(stdin: TextIO) -> str:
    """Read one line; the first Ctrl-C ends the wait at once.

    While a coroutine blocks in ``readline`` asyncio's own SIGINT handler only schedules a cancel
    for the next await, and the interrupted read restarts, so the first Ctrl-C seemed swallowed."""
    try:
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    except ValueError:  # not the main thread: no signal handling to borrow
        return stdin.readline()
    try:
        return stdin.readline()
    finally:
        signal.signal(signal.SIGINT, previous)


def _command(session: ChatSession, line: str) -> str | None:
    """What a typed line asks for besides a turn: ``exit`` (end of input, /exit), ``done`` (a
    command that was handled, or a blank line), or None for a message to send."""
    text = line.strip()
    if not line or text in EXIT_COMMANDS:
        return "exit"
    if text == "/reset":
        assert session.host is not None
        session.host.reset_conversation(session.identity)
        session.printer.note("conversation state cleared")
        return "done"
    return None if text else "done"


async def _lines_in_background(stdin: TextIO) -> asyncio.Queue[str]:
    """stdin lines read by a daemon thread (so a person can type while a turn is running); an
    empty string marks the end of input."""
    loop = asyncio.get_running_loop()
    lines: asyncio.Queue[str] = asyncio.Queue()

    def read() -> None:
        while True:
            try:
                line = stdin.readline()
            except (OSError, ValueError):
                line = ""
            try:
                loop.call_soon_threadsafe(lines.put_nowait, line)
            except RuntimeError:  # the chat ended (its loop closed) while this line was being typed
                return
            if not line:
                return

    threading.Thread(target=read, name="runners-chat-stdin", daemon=True).start()
    return lines


async def _steering_repl(session: ChatSession, stdin: TextIO) -> int:
    """The REPL for runners that take follow-ups: a line typed while a turn runs goes to that turn
    (LangBot claims such messages for the active run), otherwise it starts the next turn."""
    lines = await _lines_in_background(stdin)
    failed = False
    session.printer.note("type while the agent works to send a follow-up to the running turn")
    while True:
        session.err.write("> ")
        session.err.flush()
        line = await lines.get()
        text = line.rstrip("\r\n")
        command = _command(session, line)
        if command == "exit":
            break
        if command == "done":
            continue
        turn = asyncio.ensure_future(session.turn(text))
        ended = False
        while not turn.done():
            getter = asyncio.ensure_future(lines.get())
            done, _ = await asyncio.wait({turn, getter}, return_when=asyncio.FIRST_COMPLETED)
            if getter not in done:
                getter.cancel()
                break
            typed = getter.result()
            if not typed:
                ended = True
                continue
            if typed.strip() and not session.follow_up(typed.rstrip("\r\n")):
                session.printer.note("(the turn had ended; send it again)")
        outcome = await turn
        session.report(outcome)
        failed = failed or outcome.failed is not None
        if ended:
            break
    return 1 if failed else 0


async def run_session(session: ChatSession, message: str | None, stdin: TextIO,
                      follow_ups: list[str] | None = None) -> int:
    """One event loop for the whole session: a single turn (-m) or a REPL until EOF or /exit."""
    failed = False
    try:
        try:
            await session.start()
        except Exception as exc:  # noqa: BLE001 - import or init failure of the plugin
            session.printer.note(
                f"runners chat: cannot load {session.info.dirname}: {type(exc).__name__}: {session.redact(str(exc))}",
                dim=False,
            )
            return 1
        if message is not None:
            outcome = await session.turn(message, follow_ups)
            session.report(outcome)
            return 1 if outcome.failed is not None else 0
        interactive = bool(getattr(stdin, "isatty", lambda: False)())
        if interactive:
            session.printer.note(
                f"chatting with {session.info.runner_id} (conversation {session.conversation!r}); "
                "/exit to quit, /reset to forget the conversation"
            )
            if session.steering:
                return await _steering_repl(session, stdin)
        while True:
            if interactive:
                session.err.write("> ")
                session.err.flush()
            try:
                line = _read_line(stdin)  # between turns the loop has nothing else to do
            except KeyboardInterrupt:
                if interactive:
                    session.err.write("\n")
                return 130
            text = line.rstrip("\r\n")
            command = _command(session, line)
            if command == "exit":
                break
            if command == "done":
                continue
            outcome = await session.turn(text)
            session.report(outcome)
            failed = failed or outcome.failed is not None
        return 1 if failed else 0
    finally:
        await session.close()


def chat(
    info: PluginInfo,
    *,
    config: dict[str, Any],
    message: str | None,
    state_path: Path,
    conversation: str = DEFAULT_CONVERSATION,
    user: str | None = None,
    stdin: TextIO | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
    verbose: bool = False,
    follow_ups: list[str] | None = None,
    llm: LLMSettings | None = None,
) -> int:
    logging.basicConfig(
        level=logging.INFO if verbose else logging.ERROR,
        stream=err or sys.stderr,
        format="%(levelname)s %(name)s: %(message)s",
    )
    session = ChatSession(
        info,
        config,
        Path(state_path),
        conversation=conversation,
        user=user,
        out=out or sys.stdout,
        err=err or sys.stderr,
        llm=llm,
    )
    return asyncio.run(run_session(session, message, stdin or sys.stdin, follow_ups))
