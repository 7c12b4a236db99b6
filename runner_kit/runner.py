"""The runner base every plugin subclasses, and the driver that turns an adapter's events into
RunnerResults.

Guarantees (the contract suite checks them for every plugin): exactly one terminal result and
nothing after it; no exception escapes ``run()``; cumulative deltas; one complete message on
success; a clean retryable ``upstream.timeout`` before the host deadline, and after ``idle-timeout``
seconds without a byte from the upstream; closing the generator (host cancel) stops the upstream
work and leaves no task or connection behind.

What the chat shows on failure (see :mod:`runner_kit.explain`): text already streamed is kept as the
final message with a note that it is incomplete; a failure before any answer is explained in one
plain message (``explain-failures``); code, ``retryable`` and partial usage still reach the run
ledger (in pipelines through ``run.completed``'s ``finish_reason`` and a ``processor.log`` line,
since a ``run.failed`` there would replace the text with the host's generic line). The upstream stop call on a deadline or cancel is made after the
failure has been handed to the host, so a slow stop endpoint cannot turn a clean timeout into the
host's generic one.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import traceback
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Callable, Mapping
from contextlib import aclosing, asynccontextmanager
from contextlib import suppress as _suppress_ctx
from dataclasses import replace
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar

import httpx
from langbot_plugin.api.definition.components.runner.runner import Runner
from langbot_plugin.api.entities.builtin.runner.context import RunnerContext
from langbot_plugin.api.entities.builtin.runner.result import RunnerResult

from . import agent_mcp, resets, routing, sessions, texts
from . import approvals as ap
from . import chat_commands as cc
from . import events as ev
from .channel import Channel
from .config import Config, ConfigSchema
from .errors import Redactor, RunnerError, SessionMissing, redact_value
from .explain import explanation, failure_log, incomplete_note
from .http import shared_client
from .identity import PER_PERSON, normalize_source, upstream_user
from .inputs import DEFAULT_MAX_BYTES, UserInput, collect_input
from .invoke import LEAN_SUPPORTED, lean_invoke, outlet
from .logs import bind_redactor, get_logger, unbind_redactor
from .results import ResultBuilder, StreamPolicy, progress_line
from .session import SessionHandle, session_key
from .steering import (
    POLL_INTERVAL,
    Steering,
    follow_up_input,
    follow_up_mode,
    quoted,
    text_of,
    unanswered_note,
)
from .usage import UsageTotals

DEFAULT_TIMEOUT = 300.0
NO_LIMIT = 24 * 3600.0  # "no deadline" (timeout 0 or blank and no host deadline), kept finite
CANCEL_GRACE = 3.0  # longest wait for the upstream's stop endpoint after a cancel or deadline
DEFAULT_SESSION_RESET_TEXT = "(The previous conversation could not be continued, so this reply starts a new one.)"
DEFAULT_SESSION_RESET_TEXT_ZH = "（之前的会话无法继续，这条回复开始了一段新的会话。）"


def reset_text(config: Mapping[str, Any]) -> str:
    """The new-conversation notice: the owner's ``session-reset-text``, or (blank, or the English
    default an earlier version stored) the built-in one in the run's language."""
    return texts.own_or_builtin(config.get("session-reset-text"), DEFAULT_SESSION_RESET_TEXT,
                                DEFAULT_SESSION_RESET_TEXT_ZH)


def _chat_language(ctx: RunnerContext, schema: ConfigSchema) -> str:
    """``chat-language`` as the config loader will read it (before it runs: a failing config is
    explained in the chosen language too): an advanced field keeps its default while the owner has
    advanced settings off, whatever value is stored."""
    raw = ctx.config if isinstance(getattr(ctx, "config", None), Mapping) else {}
    value = raw.get("chat-language")
    field = schema.fields.get("chat-language")
    if field is not None and field.advanced and "advanced-settings" in schema.fields:
        on = raw.get("advanced-settings")
        if not (on is True or str(on).strip().lower() in ("true", "1", "yes", "on", "y", "t")):
            value = field.default
    return str(value or "").strip()


def _language(ctx: RunnerContext, setting: str) -> str:
    """The run's chat language (:func:`runner_kit.texts.choose`): the owner's ``setting``, else the
    person's message, else what they last wrote in this conversation."""
    try:
        text = ctx.input.to_text() if getattr(ctx, "input", None) is not None else ""
    except Exception:  # noqa: BLE001 - an unreadable input is reported by load_input, not here
        text = ""
    if getattr(getattr(ctx, "input", None), "interaction", None) is not None:
        text = ""  # a click: LangBot's placeholder text says nothing of the person's language
    return texts.choose(setting, _words(text), _person(ctx))


def _person(ctx: Any) -> str | None:
    """Whose language: one sender in one conversation (a run context or a steering item's view),
    whichever plugin they write to."""
    conv = sessions.conversation_key(ctx, "")
    return f"{conv}|{ap.actor_of(ctx)[0] or ''}" if conv else None


_ANY_ANSWER = ap.Question(title="", kind="permission")


def _words(text: str) -> str:
    """``text`` as a sign of its writer's language: nothing when it is only an English answer word
    ("ok", "allow", "yes"), which people type whatever language they otherwise write in."""
    if not text or len(text) > 40 or texts.language_of(text) != texts.EN:
        return text  # "允许" or "好的" is a Chinese answer, and says so
    said = ap.parse_answer(text, _ANY_ANSWER)
    return "" if said is not None and not said.reason else text


def _heard(ctx: RunnerContext, item: Any) -> str | None:
    """Remember the language of a follow-up's sender; their person key."""
    person = _person(sessions.view(ctx, item))
    texts.remember(person, _words(text_of(item)))
    return person


def deadline_margin(limit: float) -> float:
    """How long before the host's deadline the runner gives up, to report a clean failure."""
    return min(2.0, max(0.25, 0.05 * limit))


class RunEnv:
    """Everything an adapter needs for one run."""

    def __init__(self, ctx: RunnerContext, config: Config, redact: Redactor, session_key_base: str | None):
        self.ctx = ctx
        self.config = config
        self.redact = redact
        self.log = get_logger("runner_kit.run")
        now = time.time()
        limits = []
        if ctx.runtime.deadline_at:
            limits.append(float(ctx.runtime.deadline_at) - now)
        timeout = config.get("timeout")
        if isinstance(timeout, (int, float)) and timeout > 0:
            limits.append(float(timeout))
        elif "timeout" in config and not ctx.runtime.deadline_at:
            limits.append(NO_LIMIT)  # timeout 0 or blank: the host sets no deadline either
        limit = min(limits) if limits else DEFAULT_TIMEOUT
        self.limit = limit
        self.deadline = time.monotonic() + limit - deadline_margin(max(limit, 0.0))
        idle = config.get("idle-timeout")
        self.idle_timeout = float(idle) if isinstance(idle, (int, float)) and idle > 0 else 0.0
        self.last_activity = time.monotonic()
        self.session = SessionHandle(ctx, session_key(session_key_base, config.get("user-id-source"), self.user))
        self.finish_reason: str | None = None  # from ev.Finish: why the upstream stopped
        self.input = UserInput(text="", files=[], params={})
        # questions to the chat (runner_kit.approvals): the pump's queue, the run's follow-ups,
        # who started the current turn, and the kinds of request allowed for the agent session
        self.asks: Channel[Any] | None = None
        self.steering: Steering | None = None
        self.turn_actor = ap.actor_of(ctx)
        base = session_key_base or "runner"
        # what was allowed "for this session" is kept beside the session's own id: per person where
        # each person has their own agent session, so one member's "always" never replaces another's
        memory_key = (self.session.key or base) + ap.MEMORY_SUFFIX
        self.memory = ap.Memory(memory_key, (ctx.state.conversation or {}).get(memory_key))
        # the question a parked agent of this session waits on (one per agent session, like its id)
        self.pending_key = (self.session.key or base) + ap.PENDING_SUFFIX
        legacy = base + ap.PENDING_SUFFIX  # where versions before per-session questions kept it
        if legacy != self.pending_key and self.pending_key not in (ctx.state.conversation or {}) \
                and legacy in (ctx.state.conversation or {}):
            self.pending_key = legacy  # said and cleared by the next run, whoever writes it
        # this session's owner in the plugin process (runner_kit.sessions): its lock, what it stored
        self.slot: sessions.Slot | None = None
        # the LangBot MCP bridges of the agent this run holds (runner_kit.agent_mcp): let go of
        # when the agent is parked, handed to the run that attaches to it
        self.mcp_bridges: list[Any] = []
        # what the agent must still be told after its turn, where its protocol had no place for it
        # (a denial's reason): sent as the next turn's text in the same session (:meth:`tell_agent`)
        self.agent_notes: list[str] = []
        # a single-turn platform's own message before kept ones were merged in (runner_kit.pending)
        self.pending_own_input: UserInput | None = None
        # the running turn's pump state (set by the turn loop; :meth:`follow_ups` clears its interrupt)
        self.turn_state: _Pump | None = None
        # told after each usage report of the running turn (the budgets: runner_kit.chat_commands)
        self.on_usage: Callable[[], None] | None = None

    def refresh(self) -> None:
        """Read the session's id and approvals again, after the state snapshot caught up with what
        the run before this one (of the same session) stored."""
        state = self.ctx.state.conversation or {}
        self.session = SessionHandle(self.ctx, self.session.key)
        self.memory = ap.Memory(self.memory.key, state.get(self.memory.key))

    def tell_agent(self, text: str) -> None:
        """Have ``text`` reach the agent as the next turn's input in this session (multi-turn
        adapters), for what its protocol cannot carry where it happened (a denial's reason)."""
        if text and text.strip():
            self.agent_notes.append(text.strip())

    async def ask(self, question: ap.Question) -> ap.Decision:
        """Ask the chat (``permission-mode: ask``) and wait for the answer; see
        :mod:`runner_kit.approvals`. Call it from the adapter while a turn runs."""
        queue = self.asks
        if queue is None:
            return ap.Decision(allow=False, reason="no turn is running to ask in")
        future: asyncio.Future[ap.Decision] = asyncio.get_running_loop().create_future()
        queue.put_nowait(_Ask(question, future))
        return await future

    async def follow_ups(self) -> UserInput | None:
        """For a multi-turn adapter whose turn is a loop of steps (a model call, a batch of tools, …):
        the follow-ups of this turn's session that arrived since the turn began, taken into the running
        turn, which then answers them in its one reply (none becomes a turn of its own, and an
        interrupt they caused is no longer noted as one). Call it between steps; in
        ``follow-up-mode: interrupt`` call it after ``interrupt()`` ended a step. None when there are
        none or when a question to the chat is open. Another member's session waiting meanwhile does
        not hold them back: they belong to the turn already running, which they lengthen, not outrun."""
        steer = self.steering
        if steer is None or not steer.enabled or steer.hold:
            return None
        await steer.pull()
        if not steer.pending:
            return None
        batch = steer.take_into_turn()
        if self.turn_state is not None:
            self.turn_state.interrupted = False
        return await follow_up_input(self.ctx, batch, max_bytes=self.max_bytes,
                                     names=routing.several(self.ctx, batch))

    def budget(self) -> float:
        """Seconds left for upstream work; raises upstream.timeout when none is left."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise RunnerError("upstream.timeout", "the run's time limit was reached before the upstream answered")
        return left

    def touch(self) -> None:
        """Something arrived from the upstream (keep-alives count): the run is alive."""
        self.last_activity = time.monotonic()

    def keep_alive(self) -> asyncio.Task[None] | None:
        """A task counting the run as alive for ``idle-timeout`` until it is cancelled (None when
        there is no idle limit): work of the run itself (fetching an answer's files, a platform
        parsing the files it was sent before it answers), not the platform's silence."""
        if self.idle_timeout <= 0:
            return None

        async def beat() -> None:
            while True:
                self.touch()
                await asyncio.sleep(max(self.idle_timeout / 4, 0.01))

        return asyncio.get_running_loop().create_task(beat())

    @asynccontextmanager
    async def busy(self) -> AsyncIterator[None]:
        """:meth:`keep_alive` for the time inside."""
        task = self.keep_alive()
        try:
            yield
        finally:
            if task is not None:
                task.cancel()
                self.touch()

    async def watch(self, chunks: AsyncIterable[bytes]) -> AsyncIterator[bytes]:
        """Pass a response body through, noting every chunk as life for ``idle-timeout``.

        The stream readers take ``touch`` instead (``iter_sse(resp.aiter_bytes(), touch=env.touch)``),
        which is one generator less for every chunk; this is for bodies read some other way."""
        async for chunk in chunks:
            self.last_activity = time.monotonic()
            yield chunk

    @cached_property
    def client(self) -> httpx.AsyncClient:
        return shared_client()

    @cached_property
    def user(self) -> str:
        return upstream_user(self.ctx, self.config.get("user-id-source"))

    @property
    def max_bytes(self) -> int:
        """The largest attachment this run accepts (``max-file-size-mb``)."""
        mb = self.config.get("max-file-size-mb")
        return int(float(mb) * 1024 * 1024) if isinstance(mb, (int, float)) and mb > 0 else DEFAULT_MAX_BYTES

    async def load_input(self) -> UserInput:
        self.input = await collect_input(self.ctx, max_bytes=self.max_bytes)
        for reason in self.input.skipped:
            self.log.info("skipped an attachment: %s", reason)
        return self.input


class Adapter:
    """One platform's mapping: build the request, translate wire events into kit events.

    Note every chunk of a response body as life, so keep-alives count for ``idle-timeout``:
    ``iter_sse(resp.aiter_bytes(), touch=self.env.touch)`` (or ``self.env.touch()`` per chunk, or
    ``self.env.watch(...)``).
    """

    platform: ClassVar[str] = "upstream"
    session_key: ClassVar[str | None] = None
    #: opt in to the steering turn loop: implement ``turn``/``interrupt``/``close`` instead of ``stream``
    multi_turn: ClassVar[bool] = False

    def __init__(self, env: RunEnv):
        self.env = env

    @classmethod
    def check_setup(cls, raw: Any, schema: ConfigSchema) -> None:
        """Called first in every run, with the run's config as LangBot sent it (``ctx.config``),
        before the config is loaded and before anything is written or started: raise
        ``config.missing`` (:func:`runner_kit.config.not_set_up` when its owner never set the
        binding up) for a binding that must not start anything."""

    def stream(self) -> AsyncIterator[ev.Event]:  # pragma: no cover - abstract
        raise NotImplementedError

    def turn(self, inp: UserInput, index: int) -> AsyncIterator[ev.Event]:  # pragma: no cover - abstract
        """One agent turn in the live session (``index`` 0 is the run's own message, then each
        batch of follow-ups). Raise :class:`SessionMissing` before any output when a stored
        session is rejected: the kit drops it and calls ``turn(inp, 0)`` again."""
        raise NotImplementedError

    async def interrupt(self) -> None:
        """Stop the running turn through the agent's own interrupt, keeping the session usable
        (``follow-up-mode: interrupt``); the turn's event stream should end soon after (or, for a
        loop that takes the follow-ups in with :meth:`RunEnv.follow_ups`, go on with them)."""

    #: the chat drives this agent with commands (runner_kit.chat_commands: /new, /stop, /mode …),
    #: keeps a per-session book of its turns and cost, and gets files its answers name
    commands: ClassVar[bool] = False

    def workspace_path(self) -> Path | None:
        """The agent's working directory for this run's session (coding agents: /diff, files its
        answers name); None when it has none."""
        return None

    def activity(self) -> str | None:
        """What the running turn waits on right now when it is not the platform itself ("the tool
        'search'"), so a time limit reached meanwhile names it; None names the platform."""
        return None

    async def cancel(self) -> None:
        """Best effort: tell the upstream to stop work for this run (host cancelled)."""

    async def close(self) -> None:
        """End the live session (multi-turn adapters): called once when the run ends, on every
        path, after ``cancel`` when a turn was still running."""

    async def end_conversation(self, upstream_id: Any) -> None:
        """End (or delete) the upstream conversation ``upstream_id`` (the value this plugin reported
        with :class:`~runner_kit.events.SessionId`) that a LangBot reset left behind. The kit calls it
        after a run that found the reset (:mod:`runner_kit.resets`), on an adapter of that run's
        session (its config, upstream user and client), after the run's results reached the host,
        within :data:`CANCEL_GRACE`; what it raises is logged, never shown. Default: nothing (the
        platform has no such API)."""


class KitRunner(Runner):  # type: ignore[misc]  # the SDK ships no type information
    """A LangBot Runner driven by an :class:`Adapter`; subclasses set ``adapter`` and ``schema``."""

    adapter: ClassVar[type[Adapter]]
    schema: ClassVar[ConfigSchema]

    def run(self, ctx: RunnerContext) -> AsyncGenerator[RunnerResult, None]:
        """The run's results: :func:`drive` itself, not a generator around it (one layer less for
        every result to pass, and fewer objects alive per run; see bench section 4)."""
        return drive(ctx, type(self).adapter, type(self).schema)

    def invoke(self, ctx: RunnerContext) -> AsyncGenerator[RunnerResult, None]:
        """The SDK's ``invoke`` with one loop hop per result (:mod:`runner_kit.invoke`) on the SDK
        versions that was checked against; the SDK's own everywhere else."""
        if LEAN_SUPPORTED:
            return lean_invoke(self, ctx)
        return super().invoke(ctx)  # type: ignore[no-any-return]


_DONE = object()
_TICK = object()
_TIMEOUT = object()
_IDLE = object()
_STEERED = object()
_STILL = object()
_QUEUED = object()
#: a turn that has shown nothing for this long gets a "still working" line, renewed as long after
STILL_WORKING_AFTER = 20.0
INTERRUPTED_NOTE = "(Stopped here to take your next message.)"
NO_REPLY_TEXT = "(The agent finished this request without a reply.)"
NO_REPLY_TEXT_ZH = "（智能体完成了这次请求，但没有回复。）"


def _waiting_line(steer: Steering) -> str:
    """The line under a running answer naming who waits for the turn to end (follow-up-mode
    next-turn): the agent never gets a message in the middle of a turn, it gets it after."""
    items = [*steer.pending, *(i for v in steer.others.values() for i in v), *(c[0] for c in steer.commands)]
    names = list(dict.fromkeys(sessions.labels([sessions.person(i) for i in items]).values()))
    if not names:
        return ""
    return texts.t("({who}: your message is handled after the current turn.)",
                   "（{who}：你的消息会在当前回合结束后处理。）", who=", ".join(names[:5]) + (" …" if len(names) > 5 else ""))


def stopped_note(who: str) -> str:
    return texts.t("(Stopped by {who}.)", "（已由 {who} 停止。）", who=who)


def _stopper(adapter: Adapter, stopped: list[str], env: RunEnv) -> Callable[[str], None]:
    """What a /stop calls for the turn ``adapter`` runs: note who (the line under the answer), deny
    the question the turn has open in the chat, and interrupt it through the agent's own interrupt
    (the session stays usable), once. ``by`` is a name, or a whole note in parentheses (a budget)."""

    def stop(by: str) -> None:
        if stopped:
            return
        stopped.append(by if by.startswith("(") else stopped_note(by))
        asking = env.turn_state.asking if env.turn_state is not None else None
        if asking is not None and not asking.done():
            asking.set_result(ap.Decision(allow=False, reason=f"stopped in the chat by {by}"))
        task = asyncio.get_running_loop().create_task(_interrupt(adapter))
        _CLEANUPS.add(task)
        task.add_done_callback(_CLEANUPS.discard)

    return stop


async def _interrupt(adapter: Adapter) -> None:
    try:
        await asyncio.wait_for(adapter.interrupt(), timeout=CANCEL_GRACE)
    except Exception as exc:  # noqa: BLE001 - the turn then simply runs to its end
        get_logger("runner_kit.run").info("%s: stopping the turn failed: %s", adapter.platform, type(exc).__name__)


def _budget_watch(env: RunEnv, platform: str, config: Config, before: dict[str, Any] | None, usage: UsageTotals,
                  stop: Callable[[str], None]) -> Callable[[], None] | None:
    """Stop the running turn once what it used so far reaches a budget (the agent reports usage
    while it works); None when no budget is set."""
    if not cc.has_budget(config):
        return None
    entry, day = _book_and_day(env, platform)

    def check() -> None:
        over = cc.over_budget_after(config, entry, day, cc.usage_delta(before, usage.as_dict()))
        if over is not None:
            stop(f"({over})")

    return check


def _not_started(items: list[Any]) -> str:
    """The line naming follow-ups a /stop came after (never given to the agent)."""
    return texts.t("(Not started after the stop: {what}. Send it again when you want it.)",
                   "（停止后未开始处理：{what}。需要时请重新发送。）", what=quoted([text_of(i) for i in items]))


def _conversation_state(ctx: Any) -> dict[str, Any]:
    state = getattr(ctx, "state", None)
    snapshot = getattr(state, "conversation", None)
    return snapshot if isinstance(snapshot, dict) else {}


def _book_and_day(env: RunEnv, platform: str) -> tuple[cc.Entry | None, dict[str, Any]]:
    """The current agent session's entry in its book and the day's totals (for the budgets)."""
    if env.session.key is None:
        return None, cc.Day(env.ctx, platform).totals
    book = cc.Book.load(_conversation_state(env.ctx), env.session.key)
    return book.find(env.session.current), cc.Day(env.ctx, platform).totals


def _chosen(env: RunEnv, adapter_cls: type[Adapter]) -> RunEnv:
    """``env`` with the mode and model the chat chose for its session (runner_kit.chat_commands)."""
    if adapter_cls.commands and env.session.key is not None:
        env.config = cc.effective(env.config, cc.Book.load(_conversation_state(env.ctx), env.session.key))
    return env


def _count_turn(env: RunEnv, platform: str, inp: UserInput | None, delta: dict[str, Any], began: float
                ) -> tuple[cc.Entry | None, list[tuple[str, Any, str]]]:
    """One finished turn in the session's book and the day's totals: the entry, and the state to write
    (also put into the run's snapshot, so a later turn or command of this run reads it)."""
    writes: list[tuple[str, Any, str]] = [(cc.DAY_KEY, cc.Day(env.ctx, platform).add(delta), "runner")]
    entry = None
    if env.session.key is not None and env.session.current:
        snapshot = _conversation_state(env.ctx)
        book = cc.Book.load(snapshot, env.session.key)
        entry = book.note_turn(env.session.current, inp.text if inp is not None else "", delta, began=began)
        value = book.value()
        writes.append((book.key, value, "conversation"))
        state = getattr(env.ctx, "state", None)
        if state is not None and getattr(state, "conversation", None) is None:
            with _suppress_ctx(Exception):
                state.conversation = snapshot
        snapshot[book.key] = value
    return entry, writes


async def _command(command: cc.Command, ctx: Any, env: RunEnv, config: Config, builder: ResultBuilder,
                   adapter_cls: type[Adapter], slot: sessions.Slot | None, conv_key: str | None,
                   switched: dict[str, Any] | None = None) -> AsyncGenerator[RunnerResult, None]:
    """Answer a chat command (runner_kit.chat_commands) sent by ``ctx``'s sender: one message, and
    what it changes in conversation state (``switched``: the agent session a /new or /resume chose,
    by session key, for a run that goes on in that session)."""
    if slot is not None and slot.catch_up(ctx):  # what runs of this session stored meanwhile
        env.refresh()
    adapter = adapter_cls(env)

    async def diff() -> cc.Said:
        from . import workspace_files  # noqa: PLC0415 - only /diff needs it

        workspace = adapter.workspace_path()
        if workspace is None:
            return cc.Said(texts.t("This agent has no workspace to compare.", "这个智能体没有可比较的工作目录。"))
        entry, _day = _book_and_day(env, adapter_cls.platform)
        found = await workspace_files.diff(workspace, since=entry.started if entry else None)
        return cc.Said(_diff_text(found.summary, found.patch))

    key = slot.key if slot is not None else sessions.key_of(ctx, adapter_cls.platform, adapter_cls.session_key,
                                                            config.get("user-id-source"))
    said = await cc.answer(command, ctx, config, session_key=env.session.key, current=env.session.current,
                           slot_key=key, conversation=conv_key, platform=adapter_cls.platform, diff=diff,
                           parked=key is not None and key in ap.PARKED)
    snapshot = _conversation_state(ctx)
    # remembered by the slot of the session the command is for (a later turn of it in this run catches
    # up from there), not by the one the run is answering now
    writer = slot.writer(ctx) if slot is not None else lambda *_: True
    for key_, value, scope in said.writes:
        answering, builder.on_state = builder.on_state, writer
        try:
            stored = builder.state(key_, value, scope)
        finally:
            builder.on_state = answering
        yield stored
        if switched is not None and key_ == env.session.key and scope == "conversation":
            switched[key_] = value
        if scope == "conversation":
            if value is None:
                snapshot.pop(key_, None)
            else:
                snapshot[key_] = value
    get_logger("runner_kit.run").info("chat command /%s answered", command.name if command.known else "?")
    yield builder.notice_message(said.text)


async def _named_files(adapter: Adapter | None, env: RunEnv, builder: ResultBuilder) -> str | None:
    """Files in the agent's workspace that its answer links to (a markdown image or link, a
    ``file://`` link) go with the answer, within the size limits; the line naming the ones left out."""
    text = builder.visible()
    if adapter is None or "](" not in text and "file://" not in text:
        return None
    try:
        workspace = adapter.workspace_path()
        if workspace is None:
            return None
        from . import outfiles, workspace_files  # noqa: PLC0415 - only answers that link to something

        found, left_out = await asyncio.to_thread(
            workspace_files.named_files, text, workspace, max_bytes=env.max_bytes,
            room=outfiles.room(len(text)), backticks=False)
    except Exception as exc:  # noqa: BLE001 - the answer stands without its files
        get_logger("runner_kit.run").info("files named in the answer were not attached: %s", type(exc).__name__)
        return None
    builder.attachments.extend(found)
    return outfiles.left_out_note(left_out).strip() if left_out else None


DIFF_INLINE_CHARS = 3000  # the patch shown under /diff's summary at most (the chat takes no file from a plugin)


def _diff_text(summary: str, patch: bytes | None) -> str:
    if not patch:
        return summary
    text = patch.decode("utf-8", "replace")
    if len(text) > DIFF_INLINE_CHARS:
        cut = text[:DIFF_INLINE_CHARS].rsplit("\n", 1)[0]
        more = texts.t("(… {n} more characters of the patch not shown)", "（……补丁还有 {n} 个字符未显示）",
                       n=len(text) - len(cut))
        return f"{summary}\n\n```diff\n{cut}\n```\n{more}"
    return f"{summary}\n\n```diff\n{text.rstrip()}\n```"


def interrupted_note() -> str:
    return texts.t(INTERRUPTED_NOTE, "（在此停下，以处理你的下一条消息。）")


def only_can_answer(who: str) -> str:
    return texts.t("(Only {who} can answer the question above.)", "（只有 {who} 能回答上面的问题。）", who=who)


def no_longer_waiting() -> str:
    return texts.t("(That question is no longer waiting.)", "（这个问题已不再等待回答。）")


class _Ask:
    __slots__ = ("future", "question")

    def __init__(self, question: ap.Question, future: asyncio.Future[ap.Decision]):
        self.question = question
        self.future = future


class _Raised:
    __slots__ = ("exc",)

    def __init__(self, exc: BaseException):
        self.exc = exc


class _Pump:
    """Whether the adapter's stream ended by itself (then no stop call is needed)."""

    __slots__ = ("asking", "ended", "interrupted", "parked")

    def __init__(self) -> None:
        self.asking: asyncio.Future[ap.Decision] | None = None  # the question to the chat open in this turn
        self.ended = False
        self.interrupted = False  # a follow-up interrupted this turn (follow-up-mode: interrupt)
        self.parked: ap.Parked | None = None  # the turn waits for an answer in a later run


def _flag(config: Config | None, key: str, default: bool) -> bool:
    if config is None:
        return default
    value = config.get(key, default)
    return default if value is None else bool(value)


def _builder(ctx: RunnerContext, config: Config | None, *, multi_turn: bool = False,
             slot: sessions.Slot | None = None) -> ResultBuilder:
    if config is None:
        return ResultBuilder(ctx.run_id)
    builder = ResultBuilder(
        ctx.run_id, remove_think=bool(config.get("remove-think", False)), policy=StreamPolicy.from_config(config)
    )
    builder.auto_progress = multi_turn
    builder.on_state = slot.writer(ctx) if slot is not None else None
    return builder


async def drive(
    ctx: RunnerContext, adapter_cls: type[Adapter], schema: ConfigSchema
) -> AsyncGenerator[RunnerResult, None]:
    """Run the run's turn(s) through ``adapter_cls`` and yield results; never raises (except
    cancellation).

    Single-turn adapters (``stream()``) answer the run's message. Multi-turn adapters
    (``multi_turn = True``) keep one live agent session for the run: after each turn, follow-ups
    the host claimed for the run (``steering_pull``) become the next turn, each answered with its
    own complete message; ``follow-up-mode: interrupt`` also polls during a turn and interrupts it.
    """
    builder = ResultBuilder(ctx.run_id)
    usage = UsageTotals()
    redact = Redactor()
    token = bind_redactor(redact)
    chosen = _chat_language(ctx, schema)
    spoken = texts.bind(_language(ctx, chosen), schema.labels(), fixed=chosen in texts.SETTINGS)
    env: RunEnv | None = None
    config: Config | None = None
    log = get_logger("runner_kit.run")
    platform = adapter_cls.platform
    to_stop: Adapter | None = None  # an adapter whose upstream work may still be running
    live: Adapter | None = None  # the multi-turn adapter to close at the end
    steer: Steering | None = None
    pump = _Pump()
    entered: list[sessions.Slot | None] = []  # the sessions this run counted itself in
    hold = routing.Hold()  # the session whose lock this run holds
    ending: tuple[Adapter, Any] | None = None  # the upstream conversation a LangBot reset left behind

    async def one_turn(
        make: Callable[[int], Adapter], turn_input: UserInput, index: int, watch: Steering | None,
        resume: ap.Parked | None = None,
    ) -> AsyncGenerator[RunnerResult, None]:
        """One turn (for single-turn adapters: the run), retried once on a fresh session; with
        ``resume``, the rest of a parked turn."""
        nonlocal pump, to_stop
        assert env is not None and config is not None
        for attempt in (0, 1):
            adapter = make(attempt)
            pump = _Pump()
            env.turn_state = pump
            to_stop = adapter
            try:
                source = None if resume is not None else (
                    adapter.turn(turn_input, index) if adapter.multi_turn else adapter.stream())
                async with aclosing(_pump(adapter, env, builder, usage, pump, source, watch, resume, index)) as results:
                    async for result in results:
                        yield result
                to_stop = None
                return
            except SessionMissing:
                to_stop = None
                if index == 0 and attempt == 0 and env.session.current and not builder.has_output:
                    log.info("%s: stored session is gone upstream; retrying on a fresh one", platform)
                    env.session.drop()
                    if _flag(config, "session-reset-notice", True):
                        builder.set_preamble(reset_text(config))
                    continue
                raise RunnerError("upstream.not_found", f"{platform} reports the conversation does not exist") from None

    try:
        try:
            adapter_cls.check_setup(ctx.config, schema)
            config = schema.load(ctx.config)
            for secret in config.secrets:
                redact.add(secret)
            builder = _builder(ctx, config, multi_turn=adapter_cls.multi_turn)
            env = RunEnv(ctx, config, redact, adapter_cls.session_key)
            env.budget()
            inp = await env.load_input()
            if inp.empty:
                why = "; ".join(inp.skipped)
                raise RunnerError(
                    "input.invalid", "the message has no text or files to send" + (f" ({why})" if why else "")
                )
            # whose session this is: a runner without user-id-source has one per conversation (LocalAgent
            # reads the group's own transcript: everyone in it is in one conversation with it)
            source = config.get("user-id-source") if "user-id-source" in config else "conversation"
            slot = sessions.enter(sessions.key_of(ctx, platform, adapter_cls.session_key, source))
            entered.append(slot)
            env.slot = slot
            conv_key, gen = sessions.conversation_key(ctx, platform), resets.generation(ctx)
            if resets.note(conv_key, gen, getattr(ctx.conversation, "conversation_id", None) if ctx.conversation else None):
                ap.reset(conv_key, gen)  # the questions asked before a LangBot reset

            def arrive() -> None:
                """Whether a LangBot reset left this session's upstream conversation behind: ended
                after the run, like a stop call (read once the session is the run's: what the run
                before stored is known then, and nothing is ended while that run still uses it)."""
                nonlocal ending
                assert env is not None
                abandoned = resets.arrive(slot.key if slot is not None else None, conv_key, gen, env.session.stored)
                if abandoned is not None and abandoned == env.session.stored:
                    env.session.set(None)  # stored again by a run from before the reset: a new one now
                if abandoned is not None and adapter_cls.end_conversation is not Adapter.end_conversation:
                    ending = (adapter_cls(env), abandoned)

            builder.on_state = slot.writer(ctx) if slot is not None else None
            if adapter_cls.commands:
                command = cc.command_of(inp, config)
                if command is not None:
                    async with aclosing(_command(command, ctx, env, config, builder, adapter_cls, slot,
                                                 conv_key)) as commanded:
                        async for r in commanded:
                            yield r
                    yield builder.completed(usage)
                    return
                inp = env.input = cc.unescaped(inp, config)
            if not adapter_cls.multi_turn:
                async with aclosing(routing.take(slot, env, builder, hold)) as waited:
                    async for r in waited:
                        yield r
                arrive()
                first_env = env
                async with aclosing(one_turn(lambda _: adapter_cls(first_env), inp, 0, None)) as turn:
                    async for result in turn:
                        yield result
                if env.session.dirty:
                    yield builder.state(env.session.key, env.session.current)  # type: ignore[arg-type]
                    env.session.mark_saved()
                final = builder.final_message()
                if final is None and not builder.no_reply:
                    raise RunnerError("upstream.empty_response", f"{platform} finished without any answer")
                if final is not None:
                    yield final
                yield builder.completed(usage, finish_reason=env.finish_reason or "stop")
                return
            arrive()
            steer = Steering.for_run(ctx)

            def route(item: Any) -> str | None:
                _heard(ctx, item)
                return routing.route(ctx, item, platform, adapter_cls.session_key, source)

            steer.route = route

            def own_key(item: Any) -> str | None:
                return sessions.key_of(sessions.view(ctx, item), platform, adapter_cls.session_key, source)

            steer.key = slot.key if slot is not None else None
            env.steering = steer
            if adapter_cls.commands:
                steer.command_config = config

                def on_stop(item: Any) -> bool:
                    """A /stop among the follow-ups: stops the sender's own session's turn (an
                    approver's: every turn running in the conversation) right away."""
                    actor, name = ap.actor_of(item)
                    keys = [k for k in (own_key(item),) if k]
                    if cc.is_approver(config, actor):
                        keys += cc.running_in(conv_key)
                    return cc.stop_in(dict.fromkeys(keys), name or actor or "someone") > 0

                steer.on_stop = on_stop
            watch = steer if follow_up_mode(config) == "interrupt" else None
            # what a typed wait leaves of the run (_typed_wait): with no more than about that left, this
            # run takes on no other session's work (a turn to answer, a question to resume)
            reserve = 1.5 * min(ASK_RESERVE, 0.2 * env.limit)
            index = 0
            turn_input: UserInput | None = inp
            resume: ap.Parked | None = None
            after: UserInput | None = None  # a new message that came instead of an answer: next turn
            after_by: tuple[str | None, str | None] = (None, None)  # who sent it
            # the agent this run answers in. None while it has none (it only answered a click or kept
            # a message, or its agent waits on a question): a message LangBot still claims for this
            # run then goes to its sender's session (answers its question, waits for it, or is answered)
            session_adapter: Adapter | None = None
            waiting = routing.find_parked(ctx, platform, slot, inp)
            if isinstance(waiting, str):  # a typed answer that fits several people's questions
                yield builder.notice_message(waiting)
                builder.next_message()
                waiting, turn_input = None, None
            elif waiting is None:
                gone = routing.gone_click(ctx, env)
                if gone is None:
                    async with aclosing(routing.take(slot, env, builder, hold)) as waited:
                        async for r in waited:
                            yield r
                    if hold.parked:  # the session's agent asked a question while this run waited for it
                        found = routing.find_parked(ctx, platform, slot, inp)
                        waiting = found if isinstance(found, ap.Parked) else None
                        if waiting is None:
                            gone = found if isinstance(found, str) else no_longer_waiting()
                if gone is not None:  # a click for a question nobody waits on: one line, nothing started
                    yield builder.notice_message(gone)
                    builder.next_message()
                    turn_input = None
                elif waiting is None:
                    stale = routing.stale_question(ctx, env, inp)
                    # messages kept for this session long ago and forgotten since (sessions.sweep): named
                    missed = sessions.missed(slot.key if slot is not None else None)
                    # what the session's agent did after its last question timed out, with no run to
                    # take it: this run shows it (after what is said about that question) and counts
                    # its usage
                    reacted = _reaction(ap.reaction(slot.key if slot is not None else None), ctx, config, env,
                                        usage, slot, "\n".join(x for x in (stale and stale[0], missed) if x))
                    for r in reacted:
                        yield r
                    if reacted and any(r.type == "message.completed" for r in reacted):
                        missed = None
                        if stale is not None:
                            stale = ("", stale[1])
                    if stale is not None:
                        yield builder.state(env.pending_key, None)
                        said = stale[0] if missed is None else f"{stale[0]}\n{missed}".strip()
                        if not said:
                            if stale[1] and not (slot is not None and slot.held):
                                turn_input = None
                        elif stale[1] and not (slot is not None and slot.held):
                            yield builder.notice_message(said)
                            builder.next_message()
                            turn_input = None
                        else:
                            builder.set_preamble(said)
                    elif missed is not None:
                        builder.set_preamble(missed)
                    if turn_input is not None:
                        if stale is not None and stale[1] and slot is not None:
                            # an answer to a question that is gone: what was kept for after that question
                            # (other members' messages) is what the agent gets now, never dropped with it
                            turn_input = routing.held_input(slot.take_held(), known=[ap.actor_of(ctx)])
                        else:
                            turn_input = routing.with_held(slot, inp, ap.actor_of(ctx))
                        live = session_adapter = adapter_cls(_chosen(env, adapter_cls))
            if waiting is not None:
                attach = _attach(waiting, ctx, env, inp)
                if attach.hold and waiting.slot is not None:  # kept for the session's next turn
                    if not waiting.slot.keep(sessions.Held(ap.actor_of(ctx)[1] or "someone", inp,
                                                           actor=ap.actor_of(ctx)[0])):
                        attach.notice = sessions.held_full(waiting.agent, waiting.gate.who())
                for r in attach.results(builder):
                    yield r
                if attach.resumed:
                    resume, index, after, after_by = waiting, waiting.index, attach.next_input, ap.actor_of(ctx)
                    live = session_adapter = waiting.adapter  # _attach gave it this run's env
                    hold.slot = waiting.slot  # the session was the parked turn's; it is this run's now
                    if hold.slot is not None:
                        builder.on_state = hold.slot.writer(ctx)
                        steer.key = hold.slot.key
                else:
                    turn_input = None
            if session_adapter is None:
                steer.key = None  # what LangBot claims for this run from here goes to its sender's session
            while True:
                if turn_input is not None and session_adapter is not None and adapter_cls.commands and resume is None:
                    over = cc.over_budget(config, *_book_and_day(env, platform))
                    if over is not None:  # a budget is used up: the agent does not start this turn
                        yield builder.notice_message(over)
                        builder.next_message()
                        turn_input = None
                if turn_input is not None and session_adapter is not None:
                    this_session = session_adapter
                    before, began = usage.as_dict(), time.time()
                    stopped: list[str] = []
                    running_key = hold.slot.key if hold.slot is not None and adapter_cls.commands else None
                    running = None
                    if running_key is not None:
                        running = cc.RUNNING[running_key] = cc.Running(running_key, _stopper(this_session, stopped, env))
                        env.on_usage = _budget_watch(env, platform, config, before, usage, running.stop)
                    try:
                        async with aclosing(one_turn(lambda _, a=this_session: a, turn_input, index, watch,  # type: ignore[misc]
                                                     resume)) as turn:
                            async for result in turn:
                                yield result
                    finally:
                        if running is not None and cc.RUNNING.get(running.key) is running:
                            del cc.RUNNING[running.key]
                    resume = None
                    if env.session.dirty:
                        yield builder.state(env.session.key, env.session.current)  # type: ignore[arg-type]
                        env.session.mark_saved()
                    if pump.parked is not None:  # the agent waits for an answer in a later run
                        parked_slot, hold.slot = hold.slot, None  # the parked turn keeps the session busy until it is settled
                        live = session_adapter = None
                        turn_input = None
                        env.finish_reason = None
                        steer.in_turn = []  # the parked turn answers them when it goes on
                        steer.key = None  # what comes for that session now answers its question or waits for it
                        await steer.pull()
                        # what this run took for that session and has not given it yet (a new message that
                        # came instead of an answer, follow-ups told they come next) goes to the agent
                        # right after the question, with the senders' names, like everything kept for it
                        due: list[tuple[tuple[str | None, str | None], UserInput]] = []
                        if after is not None:
                            due.append((after_by, after))
                            after = None
                        for item in steer.pending:
                            due.append((ap.actor_of(item), await follow_up_input(
                                sessions.view(ctx, item), [item], max_bytes=env.max_bytes)))
                        steer.pending = []
                        names: list[str] = []
                        left: list[str] = []
                        for (actor, name), kept_input in due:
                            shown = " ".join(str(name or "someone").split())[:64]
                            if parked_slot is not None and parked_slot.keep(sessions.Held(shown, kept_input, actor=actor)):
                                names += [] if shown in names else [shown]
                            else:
                                left.append(kept_input.text)
                        if names:
                            yield builder.notice_message(texts.t(
                                "({who}: your message is kept and goes to {agent} right after the question above.)",
                                "（{who}：你的消息已保留，会在上面的问题之后交给 {agent}。）",
                                who=", ".join(names), agent=pump.parked.agent))
                            builder.next_message()
                        if left:
                            yield builder.notice_message(unanswered_note(left))
                            builder.next_message()
                        if steer.others and env.deadline - time.monotonic() < reserve:
                            # a typed question parked as the run's time ran out: too little is left to
                            # answer anyone else here; a message sent again starts a run of its own
                            yield builder.notice_message(unanswered_note(
                                [text_of(i) for items in steer.others.values() for i in items]))
                            steer.others.clear()
                            break
                        continue
                    env.on_usage = None
                    notes = [stopped[0] if stopped else interrupted_note() if pump.interrupted else None]
                    if adapter_cls.commands:
                        entry, writes = _count_turn(env, platform, turn_input, cc.usage_delta(before, usage.as_dict()), began)
                        for key, value, scope in writes:
                            yield builder.state(key, value, scope)
                        notes.append(await _named_files(session_adapter, env, builder))
                        if _flag(config, "cost-footer", False):
                            notes.append(cc.footer(entry))
                    note = "\n".join(n for n in notes if n) or None
                    final = builder.final_message(note=note)
                    if final is None and (pump.interrupted or stopped):
                        final = builder.notice_message(note or interrupted_note())
                    if final is None and not builder.no_reply and not builder.messages_sent:
                        if index == 0 and env.ctx is ctx:  # the run's own message got nothing
                            raise RunnerError("upstream.empty_response", f"{platform} finished without any answer")
                        final = builder.notice_message(texts.t(NO_REPLY_TEXT, NO_REPLY_TEXT_ZH))
                    if final is not None:
                        yield final  # each turn is its own reply in the chat
                    if stopped:  # what the session sent before the /stop is not started either
                        await steer.pull()
                        if steer.unstarted:
                            builder.next_message()
                            yield builder.notice_message(_not_started(steer.unstarted))
                            steer.unstarted = []
                steer.turn_done()
                if session_adapter is not None and env.agent_notes:  # told before anything else the session hears next
                    told = "\n\n".join(env.agent_notes)
                    env.agent_notes = []
                    after = (UserInput(text=told, files=[], params=dict(env.input.params)) if after is None else
                             UserInput(text=f"{told}\n\n{after.text}".strip(), files=after.files,
                                       params=after.params, skipped=after.skipped))
                if after is None and hold.slot is not None and hold.slot.held:
                    after = routing.held_input(hold.slot.take_held(),  # kept while the question was open
                                        known=[ap.actor_of(env.ctx), env.turn_actor])
                if after is not None:
                    turn_input, after = after, None
                    index += 1
                    builder = _builder(ctx, config, multi_turn=True, slot=hold.slot)
                    continue
                await steer.pull()
                switched: dict[str, Any] = {}  # session key -> the agent session a /new or /resume chose
                while steer.commands:  # commands among the follow-ups: answered now, each in its sender's session
                    item, command, unstarted = steer.commands.pop(0)
                    vctx = sessions.view(ctx, item)
                    if unstarted:  # a /stop after the turn it meant ended: what came before it is not started
                        with texts.to(_words(text_of(item)), _person(vctx)):
                            yield builder.notice_message(_not_started(unstarted))
                        builder.next_message()
                        continue
                    item_env = RunEnv(vctx, config, redact, adapter_cls.session_key)
                    item_env.limit, item_env.deadline = env.limit, env.deadline
                    with texts.to(_words(text_of(item)), _person(vctx)):
                        async with aclosing(_command(command, vctx, item_env, config, builder, adapter_cls,
                                                     sessions.SLOTS.get(own_key(item) or ""), conv_key,
                                                     switched)) as commanded:
                            async for r in commanded:
                                yield r
                    builder.next_message()
                if session_adapter is not None and adapter_cls.commands and live is session_adapter:
                    chosen_config = cc.effective(config, cc.Book.load(_conversation_state(env.ctx), env.session.key or ""))
                    # a /new or /resume for this session: its next turn, in this run too, is in that one
                    chosen_session = switched.get(env.session.key or "", env.session.current) or None
                    if chosen_session != env.session.current or any(chosen_config.get(k) != env.config.get(k) for k in ("permission-mode", "model")):
                        # a /mode or /model for this session: the agent starts again with it for the
                        # next turn, in the same session (it resumes it)
                        with _suppress_ctx(Exception):
                            await asyncio.wait_for(session_adapter.close(), CLOSE_GRACE)
                        env.session.current = env.session.stored = chosen_session
                        env.config = chosen_config
                        live = session_adapter = adapter_cls(env)
                steer.defer()  # another member's session has waited long enough: it goes first
                if steer.pending and session_adapter is None:  # no agent here to give them to: their session's
                    if slot is not None:
                        steer.others.setdefault(slot.key, []).extend(steer.pending)
                    else:
                        yield builder.notice_message(unanswered_note([text_of(i) for i in steer.pending]))
                        builder.next_message()
                    steer.pending = []
                if not steer.pending:
                    if not steer.others:
                        break
                    # follow-ups of other people's sessions: each answered in its sender's own session
                    if live is not None:
                        closing, live = live, None
                        try:
                            await closing.close()
                        except Exception:  # noqa: BLE001 - the next session starts regardless
                            log.warning("%s: closing the agent session failed", platform)
                    sessions.release(hold.slot)
                    hold.slot = None
                    key, items = steer.next_session()
                    vctx = sessions.view(ctx, items[0])
                    texts.switch(texts.of(_person(vctx), _words(text_of(items[0]))))  # their turn, their words
                    run_limit, run_deadline = env.limit, env.deadline
                    env = RunEnv(vctx, config, redact, adapter_cls.session_key)
                    # the run's own limit and deadline, not what is left of them (a later session
                    # would keep a smaller margin before the host's deadline, and say "a limit of 0 s")
                    env.limit, env.deadline = run_limit, run_deadline
                    env.steering = steer
                    other = sessions.enter(key)
                    entered.append(other)
                    env.slot = other
                    who = ap.actor_of(items[0])[1] or "someone"
                    builder = _builder(ctx, config, multi_turn=True, slot=other)
                    session_adapter = None
                    turn_input = None
                    steer.pending.extend(items)  # named as unanswered should this run end before they are answered
                    async with aclosing(routing.take(other, env, builder, hold)) as waited:
                        async for r in waited:
                            yield r
                    if hold.parked:  # that session's agent waits on a question: answered here, or kept for after it
                        items, steer.pending = steer.pending, []
                        kept: list[bool] = []
                        kept_names: list[str] = []
                        first_kept: Any = None  # whose language the kept-note is in
                        asked_by = agent_name = ""
                        for n, item in enumerate(items):
                            item_ctx = sessions.view(ctx, item)
                            item_input = await follow_up_input(item_ctx, [item], max_bytes=env.max_bytes)
                            p = ap.PARKED.get(key)
                            if p is None:  # settled meanwhile: the rest are that session's ordinary messages
                                steer.others = {key: [*items[n:], *steer.others.pop(key, [])], **steer.others}
                                break
                            actor, name = ap.actor_of(item)
                            own = own_key(item)
                            q = p.question if own in (None, key) else dataclasses.replace(p.question, free_text=False)
                            if item_input.files or not p.gate.may_answer(actor) or ap.parse_answer(item_input.text, q) is None:
                                if own not in (None, key):  # an approver's reply that answers nothing here: theirs
                                    steer.others.setdefault(own, []).append(item)
                                    continue
                                shown = " ".join(str(name or "someone").split())[:64]
                                kept.append(p.slot is not None and p.slot.keep(sessions.Held(shown, item_input, actor=actor)))
                                first_kept = first_kept or item
                                kept_names += [] if shown in kept_names else [shown]
                                asked_by, agent_name = p.gate.who(), p.agent
                                continue
                            if env.deadline - time.monotonic() < reserve:  # too little left to go on with it here
                                yield builder.notice_message(unanswered_note([item_input.text]))
                                builder.next_message()
                                continue
                            # the answer: the parked turn goes on in this run, as for a reply of its own
                            attach = _attach(ap.claim(key) or p, item_ctx, env, item_input)
                            for r in attach.results(builder):
                                yield r
                            resume, index = p, p.index
                            after, after_by = attach.next_input, (actor, name)
                            live = session_adapter = p.adapter
                            hold.slot = p.slot
                            steer.key = key
                            steer.pending.extend(items[n + 1:])  # that session's too: answered after it
                            turn_input = item_input
                            break
                        if kept:
                            per_person = normalize_source(source) in PER_PERSON
                            with texts.to(_words(text_of(first_kept)), _person(sessions.view(ctx, first_kept))):
                                said = (
                                    sessions.held_full(agent_name, asked_by) if not all(kept) else
                                    texts.t("({who}'s own session is waiting for an answer to a question; the message is "
                                            "kept and goes to it right after.)",
                                            "（{who} 自己的会话正在等待一个问题的回答；这条消息已保留，之后马上交给它。）",
                                            who=", ".join(kept_names)) if per_person else
                                    texts.t("({who}: {agent} is waiting for {asked} to answer a question; your message is "
                                            "kept and goes to it right after.)",
                                            "（{who}：{agent} 正在等待 {asked} 回答一个问题；你的消息已保留，之后马上交给它。）",
                                            who=", ".join(kept_names), agent=agent_name, asked=asked_by))
                            yield builder.notice_message(said)
                            builder.next_message()
                        if session_adapter is None:
                            builder = _builder(ctx, config, multi_turn=True, slot=other)
                        continue  # on to the next session (or the resumed turn)
                    strays = [i for i in steer.pending if own_key(i) not in (None, key)]
                    for item in strays:  # an approver's reply for a question settled meanwhile: their own
                        steer.pending.remove(item)
                        steer.others.setdefault(own_key(item), []).append(item)  # type: ignore[arg-type]
                    if not steer.pending:
                        continue
                    who = ap.actor_of(steer.pending[0])[1] or texts.t("someone", "某位成员")
                    live = adapter_cls(_chosen(env, adapter_cls))
                    session_adapter = live
                    index = -1  # the batch below is this session's first turn (index 0)
                    if key != (slot.key if slot is not None else None):
                        missed = sessions.missed(key)
                        with texts.to(_words(text_of(steer.pending[0])), _person(sessions.view(ctx, steer.pending[0]))):
                            said = texts.t("({who}, your message is answered next, in your own session.)",
                                           "（{who}，接下来在你自己的会话中回答你的消息。）", who=who)
                        yield builder.notice_message(said + (f"\n{missed}" if missed else ""))
                    builder = _builder(ctx, config, multi_turn=True, slot=other)
                env.budget()
                batch = steer.take()
                if len({ap.actor_of(i)[0] for i in batch}) == 1:  # one person's turn: in their language
                    texts.switch(texts.of(_person(sessions.view(ctx, batch[0])),
                                          _words(" ".join(text_of(i) for i in batch))))
                # who may answer what the agent asks in this turn: the sender whose message opened it (a
                # one-word message someone else adds right after never makes the question theirs)
                env.turn_actor = ap.actor_of(batch[0]) if ap.actor_of(batch[0])[0] else env.turn_actor
                turn_input = await follow_up_input(env.ctx, batch, max_bytes=env.max_bytes,
                                                   names=routing.several(env.ctx, batch))
                if hold.slot is not None and hold.slot.held:
                    turn_input = routing.with_held(hold.slot, turn_input, None if routing.several(env.ctx, batch) else
                                            ap.actor_of(batch[-1]),
                                            known=[ap.actor_of(env.ctx), *(ap.actor_of(i) for i in batch)])
                index += 1
                if index > 0:
                    builder = _builder(ctx, config, multi_turn=True, slot=hold.slot)
                if turn_input.empty:
                    why = "; ".join(turn_input.skipped)
                    yield builder.notice_message(
                        texts.t("(That message had nothing the agent could read: {why}.)", "（这条消息里没有智能体能读取的内容：{why}。）",
                                why=why) if why else
                        texts.t("(That message had nothing the agent could read.)", "（这条消息里没有智能体能读取的内容。）"))
                    turn_input = None
            yield builder.completed(usage, finish_reason=env.finish_reason or "stop")
        except RunnerError as exc:
            if pump.ended:
                to_stop = None
            note = await _unanswered(steer)
            for r in _failure(exc.code, redact(exc.message), exc.retryable, env, config, builder, usage, platform, ctx,
                              note, chat=redact(chat) if (chat := getattr(exc, "chat", None)) else None):
                yield r
        except Exception as exc:  # noqa: BLE001 - nothing may escape run()
            log.error("internal error in %s: %s", adapter_cls.__name__, redact(repr(exc)))
            log.debug("%s", redact(traceback.format_exc()))
            message = redact(f"internal error: {type(exc).__name__}: {exc}")
            note = await _unanswered(steer)
            for r in _failure("runner.internal", message, False, env, config, builder, usage, platform, ctx, note):
                yield r
    finally:
        # after the terminal result reached the host (or the host closed us): stop upstream work
        if steer is not None and (left := steer.unanswered()):
            log.warning("%d follow-up message(s) of this run were not answered", len(left))
        try:
            # the run waits for that, but never past the host's own deadline: its last word (a partial answer
            # and its note) must stand, and an upstream whose stop call hangs (a stalled one often does) is
            # then stopped after the run has ended
            await _within(_after_run(to_stop if not pump.ended else None, live, hold.slot, entered, platform, ending),
                          _host_time_left(ctx) - FINAL_MARGIN)
        finally:
            unbind_redactor(token)
            texts.unbind(spoken)


#: the longest an agent session's close may take after its run (a hung one would keep its session locked)
CLOSE_GRACE = 10.0
#: how long before the host's deadline a run must have ended, so the host never cuts it off itself
FINAL_MARGIN = 0.1
_CLEANUPS: set[asyncio.Task[None]] = set()  # stop calls still running after their runs ended


def _host_time_left(ctx: RunnerContext) -> float:
    """Seconds until the host's deadline for this run (the SDK's and LangBot's); infinite without one."""
    at = getattr(getattr(ctx, "runtime", None), "deadline_at", None)
    return float(at) - time.time() if isinstance(at, (int, float)) and at else float("inf")


async def _after_run(to_stop: Adapter | None, live: Adapter | None, slot: sessions.Slot | None,
                     entered: list[sessions.Slot | None], platform: str,
                     ending: tuple[Adapter, Any] | None = None) -> None:
    """What a run leaves to do after its terminal result: tell the upstream to stop (within
    :data:`CANCEL_GRACE`), end the upstream conversation a LangBot reset left behind (as long),
    close the agent session, then let the session's next run go on."""
    log = get_logger("runner_kit.run")
    try:
        if to_stop is not None:
            try:
                await asyncio.wait_for(to_stop.cancel(), timeout=CANCEL_GRACE)
            except BaseException:  # noqa: BLE001 - best effort; a cancel of ours must not resurface
                log.info("%s: the upstream stop call did not finish", platform)
        if ending is not None:
            try:
                await asyncio.wait_for(ending[0].end_conversation(ending[1]), timeout=CANCEL_GRACE)
                log.info("%s: ended the conversation a LangBot reset left behind", platform)
            except BaseException as exc:  # noqa: BLE001 - best effort, like the stop call
                why = exc.code if isinstance(exc, RunnerError) else type(exc).__name__  # never its text: after
                log.info("%s: the conversation a LangBot reset left behind was not ended (%s)", platform, why)  # the run
        if live is not None:
            try:
                await asyncio.wait_for(live.close(), timeout=CLOSE_GRACE)  # cancelled: its processes are killed
            except BaseException:  # noqa: BLE001 - closing must not resurface either
                log.warning("%s: closing the agent session failed or took over %.0f s", platform, CLOSE_GRACE)
    finally:
        sessions.release(slot)  # the session's next run may go on
        for entered_slot in entered:
            sessions.leave(entered_slot)


async def _within(cleanup: Any, seconds: float) -> None:
    """Wait up to ``seconds`` for ``cleanup``; what is left of it goes on after (kept alive until done),
    also when this wait is cancelled."""
    task = asyncio.get_running_loop().create_task(cleanup)
    _CLEANUPS.add(task)
    task.add_done_callback(_CLEANUPS.discard)
    if seconds == float("inf"):
        await asyncio.shield(task)
    else:
        await asyncio.wait({task}, timeout=max(seconds, 0.0))


def _reaction(got: tuple[str, str, list[Any]] | None, ctx: RunnerContext, config: Config, env: RunEnv,
              usage: UsageTotals, slot: sessions.Slot | None, said: str = "") -> list[RunnerResult]:
    """The results of what an agent did after its question timed out in an earlier run's absence
    (:func:`runner_kit.approvals.reaction`): its own message, after ``said`` (what this run says of
    that question) or one line, and its usage."""
    if got is None:
        return []
    agent, title, events = got
    rb = _builder(ctx, config, multi_turn=True, slot=slot)
    head = said or texts.t("(Nobody answered “{title}” in time, so {agent} was told no.)",
                           "（无人及时回答“{title}”，因此已告知 {agent}：不允许。）",
                           title=" ".join(title.split())[:120], agent=agent)
    rb.set_preamble(head + "\n" + texts.t("(What {agent} did then:)", "（{agent} 随后的处理：）", agent=agent))
    out: list[RunnerResult] = []
    for item in events:
        out += _translate(item, env, rb, usage)
    if (final := rb.final_message()) is not None:
        out.append(final)
    return out


async def _unanswered(steer: Steering | None) -> str | None:
    """On a failed run: take what the host still holds and name every follow-up left unanswered."""
    if steer is None:
        return None
    await steer.pull()
    left = steer.unanswered()
    return unanswered_note(left) if left else None


def _failure(
    code: str,
    message: str,
    retryable: bool,
    env: RunEnv | None,
    config: Config | None,
    builder: ResultBuilder,
    usage: UsageTotals,
    platform: str,
    ctx: RunnerContext,
    note: str | None = None,
    *,
    chat: str | None = None,
) -> list[RunnerResult]:
    """The results that end a failed run: state, what the chat shows, and the terminal result.

    Pipelines (``delivery.automatic_reply``): LangBot 4.11.2 puts its own generic line in the chat
    whenever a run ends in ``run.failed`` (over the runner's message when streaming, instead of it
    otherwise), so when there is something to show the run ends in ``run.completed`` with the
    failure code as its ``finish_reason`` (the ledger's status reason), partial usage on it, and a
    ``processor.log`` line carrying code and ``retryable`` (see :mod:`runner_kit.explain`).
    Everywhere else, and when ``explain-failures`` is off, it ends in the one ``run.failed``.
    """
    log = get_logger("runner_kit.run")
    out: list[RunnerResult] = []
    if env is not None:
        if env.session.dropped and env.session.current is None:
            env.session.restore()  # the fresh session failed too: the old id was not the problem
        if env.session.dirty:
            out.append(builder.state(env.session.key, env.session.current))  # type: ignore[arg-type]
            env.session.mark_saved()
    explain = _flag(config, "explain-failures", True)
    shown: RunnerResult | None = None
    if builder.has_output:
        said = incomplete_note(platform, code, message, detailed=explain)
        shown = builder.final_message(note=f"{said}\n{note}" if note else said)
    elif explain:
        said = chat or explanation(platform, code, message)  # chat: a line the error brings for the chat
        shown = builder.notice_message(f"{said}\n\n{note}" if note else said)
    elif note:
        shown = builder.notice_message(note)
    log.warning("run failed: %s (%s)", message, code)
    pipeline = bool(getattr(ctx.delivery, "automatic_reply", False))
    if shown is not None and explain and pipeline:
        out.append(builder.log(failure_log(code, retryable, message), "error"))
        out.append(shown)
        out.append(builder.completed(usage, finish_reason=code))
        return out
    if shown is not None:
        out.append(shown)
    out.append(builder.failed(code, message, retryable, usage))
    return out


class _Sink:
    """Where the reading task translates the adapter's events: this run's builder and usage, the
    delta timer it starts and the idle timer. ``None`` on the queue (a question being asked, a
    parked turn) makes the task hand raw events over instead, for whichever run takes them.

    Methods and module functions rather than closures in :func:`_pump`: a closure's function,
    cells and tuple stay alive for the whole run, a thousand times over under load."""

    __slots__ = ("builder", "env", "idle_timer", "loop", "out", "queue", "tick", "usage")

    def __init__(self, env: RunEnv, builder: ResultBuilder, usage: UsageTotals, queue: _Events):
        self.env = env
        self.builder = builder
        self.usage = usage
        self.queue = queue
        self.out = outlet(env.ctx)  # the host's result queue, under the kit's lean invoke
        self.loop = asyncio.get_running_loop()
        self.tick: asyncio.TimerHandle | None = None
        self.idle_timer: asyncio.TimerHandle | None = None

    def translated(self, item: Any) -> list[RunnerResult]:
        self.env.touch()
        out = _translate(item, self.env, self.builder, self.usage)
        if self.tick is None and (due := self.builder.due_in()) is not None:
            self.tick = self.loop.call_later(due, self.queue.put_nowait, _TICK)
        return out

    def check_idle(self) -> None:
        """The idle timer: ``_IDLE`` once the upstream has been quiet for ``idle-timeout``."""
        idle = self.env.idle_timeout
        quiet = time.monotonic() - self.env.last_activity
        if quiet >= idle:
            self.idle_timer = None
            self.queue.put_nowait(_IDLE)
        else:
            self.idle_timer = self.loop.call_later(idle - quiet, self.check_idle)


class _Events(Channel[Any]):
    """The pump's queue: results the reading task translated, raw events, control items. While
    raw events wait in it (``raw``), later events stay raw too, so they are translated in order."""

    __slots__ = ("raw", "sink")

    def __init__(self) -> None:
        super().__init__()
        self.sink: _Sink | None = None
        self.raw = 0

    def behind(self) -> bool:
        """Whether results or raw events wait in the queue: a timer's flush (a tick, the "still
        working" line) goes after them, or its newer text would reach the host before theirs."""
        return bool(self.raw) or any(isinstance(item, RunnerResult) for item in self._items)


async def _produce(events: AsyncIterator[ev.Event], queue: _Events) -> None:
    """The reading task: the adapter's events, translated into the current run's results where
    one takes them (``queue.sink``), raw otherwise; then ``_DONE`` or what it raised.

    A result goes straight into the host's queue (``sink.out``, :func:`runner_kit.invoke.outlet`)
    when nothing is waiting in this queue ahead of it and the host's queue takes it without
    overtaking a waiting put: one loop hop to the host instead of two, and no pass through the
    generators between. Otherwise it goes through this queue and the pump, as under the SDK's
    own ``invoke``."""
    try:
        async for item in events:
            into = queue.sink
            if into is None or queue.raw:
                queue.raw += 1
                queue.put_nowait(item)
            else:
                out = into.out
                for r in into.translated(item):
                    # straight to the host when nothing sent before it is still in this queue
                    if out is None or queue.qsize() or not out.offer(r):
                        queue.put_nowait(r)
        queue.put_nowait(_DONE)
    except asyncio.CancelledError:
        raise
    except BaseException as exc:  # noqa: BLE001 - forwarded to the consumer
        queue.put_nowait(_Raised(exc))


async def _poll(steer: Steering, queue: _Events, interrupt: bool = True) -> None:
    """``follow-up-mode: interrupt``: ``_STEERED`` once a follow-up arrives (not while a question is open);
    again for later ones once the turn took those into itself (:meth:`RunEnv.follow_ups`). Without
    ``interrupt`` (a runner that takes chat commands, in ``next-turn`` mode) it only pulls, so a
    ``/stop`` reaches the running turn; the follow-ups wait for the turn's end as before."""
    while True:
        await asyncio.sleep(POLL_INTERVAL)
        if steer.hold:  # a question is open: its answer must not interrupt the turn
            continue
        before = len(steer.pending) + sum(map(len, steer.others.values()))
        commands = len(steer.commands)  # chat commands are answered after the turn, whatever the mode
        if await steer.pull() and interrupt:
            steer.taken.clear()
            queue.put_nowait(_STEERED)
            await steer.taken.wait()  # a turn that ends instead: this poller is cancelled with it
        elif len(steer.commands) > commands or (
                not interrupt and len(steer.pending) + sum(map(len, steer.others.values())) > before):
            queue.put_nowait(_QUEUED)  # say under the running answer that they come after it


async def _pump(
    adapter: Adapter,
    env: RunEnv,
    builder: ResultBuilder,
    usage: UsageTotals,
    state: _Pump,
    source: AsyncIterator[ev.Event] | None = None,
    watch: Steering | None = None,
    resume: ap.Parked | None = None,
    index: int = 0,
) -> AsyncGenerator[RunnerResult, None]:
    """Run the adapter's events (``source``, default ``adapter.stream()``) in a task that also
    translates them, so only results cross into this generator (most text events only grow the
    pending delta and cross nothing); under the kit's lean invoke the task hands them to the host's
    queue directly while that keeps their order (:func:`_produce`). Timers feed ticks into the same
    queue. With ``watch``,
    follow-ups are polled meanwhile and the first one interrupts the turn (``adapter.interrupt()``).
    A question the adapter asks (``env.ask``) comes through the same queue; when it is parked the
    pump ends and leaves the producer running, and ``resume`` picks that producer and queue up
    again in a later run."""
    loop = asyncio.get_running_loop()
    queue: _Events = resume.queue if resume is not None else _Events()  # type: ignore[assignment]
    sink = _Sink(env, builder, usage, queue)
    idle = env.idle_timeout
    env.touch()
    env.asks = queue
    queue.sink = sink
    if resume is not None:
        task = resume.task
    else:
        task = loop.create_task(_produce(source if source is not None else adapter.stream(), queue))
    poller = None
    if watch is not None and watch.enabled:
        poller = loop.create_task(_poll(watch, queue))
    elif (steer := env.steering) is not None and steer.enabled and steer.command_config is not None:
        poller = loop.create_task(_poll(steer, queue, interrupt=False))
    deadline_timer = loop.call_at(loop.time() + max(env.deadline - time.monotonic(), 0.0), queue.put_nowait, _TIMEOUT)
    if idle > 0:
        sink.idle_timer = loop.call_later(idle, sink.check_idle)
    since = loop.time()  # for the "still working" line: the turn's start, or the end of its last question
    still = loop.call_later(STILL_WORKING_AFTER, queue.put_nowait, _STILL)
    try:
        while True:
            item = await queue.get()
            if isinstance(item, RunnerResult):
                yield item
                continue
            if item is _DONE:
                state.ended = True
                return
            if (item is _STILL or item is _TICK or item is _QUEUED) and queue.behind():
                queue.put_nowait(item)  # after what is waiting: a flush now would overtake it
                continue
            if item is _STILL:
                waited = loop.time() - since
                if waited >= STILL_WORKING_AFTER * 0.99 and (r := builder.still_working(texts.t(
                        "{agent} is still working… ({seconds} s)", "{agent} 仍在处理中……（{seconds} 秒）",
                        agent=adapter.platform, seconds=f"{waited:.0f}"))) is not None:
                    yield r
                still = loop.call_later(STILL_WORKING_AFTER, queue.put_nowait, _STILL)
                continue
            if item is _QUEUED:
                if (steer := env.steering) is not None and (r := builder.set_waiting(_waiting_line(steer))) is not None:
                    yield r
                continue
            if item is _TICK:
                sink.tick = None
                if (r := builder.flush()) is not None:
                    yield r
                continue
            if item is _TIMEOUT:
                busy = adapter.activity()  # what the turn waits on, when not the platform ("the tool 'x'")
                raise RunnerError(
                    "upstream.timeout",
                    f"{busy or adapter.platform} did not finish within the run's time limit of {env.limit:.0f} s",
                )
            if item is _IDLE:
                raise RunnerError(
                    "upstream.timeout",
                    f"{adapter.platform} sent nothing for {idle:g} s (idle-timeout)",
                )
            if isinstance(item, _Raised):
                state.ended = True
                raise item.exc
            if isinstance(item, _Ask):
                queue.sink = None  # events during the question are taken in order after it
                async with aclosing(_asking(item, adapter, env, builder, state, queue, task, index)) as asked:
                    async for r in asked:
                        yield r
                if state.parked is not None:
                    return
                queue.sink = sink
                env.touch()
                since = loop.time()
                continue
            if item is _STEERED:
                if watch is not None and not watch.pending:
                    continue  # the turn already took that follow-up in (RunEnv.follow_ups): nothing to stop
                state.interrupted = True
                try:
                    await asyncio.wait_for(adapter.interrupt(), timeout=CANCEL_GRACE)
                except Exception as exc:  # noqa: BLE001 - the turn then simply runs to its end
                    get_logger("runner_kit.run").info("%s: interrupting the turn failed: %s", adapter.platform,
                                                      env.redact(repr(exc)))
                continue
            # a raw event: handed over while a question was open, or before this run took the turn
            queue.raw -= 1
            for r in sink.translated(item):
                yield r
    finally:
        if queue.sink is sink:
            queue.sink = None
        deadline_timer.cancel()
        still.cancel()
        if sink.idle_timer is not None:
            sink.idle_timer.cancel()
        if sink.tick is not None:
            sink.tick.cancel()
        if poller is not None and not poller.done():
            poller.cancel()
        if state.parked is None:
            env.asks = None
            if not task.done():
                task.cancel()
            try:
                await task
            except BaseException:  # noqa: BLE001 - the producer's own end is irrelevant here
                pass


class _Attach:
    """What a run does with the turn parked in its conversation (:func:`_attach`)."""

    def __init__(self, parked: ap.Parked, env: RunEnv):
        self.parked = parked
        self.env = env
        self.resumed = False
        self.decision: ap.Decision | None = None
        self.next_input: UserInput | None = None
        self.notice: str | None = None
        self.hold = False  # a message of another member of the session: kept for after the question

    def results(self, builder: ResultBuilder) -> list[RunnerResult]:
        out: list[RunnerResult] = []
        if self.decision is not None:
            out.append(builder.state(self.env.pending_key, None))
            out += _answered(self.env, builder, self.parked.agent, self.parked.question, self.decision)
        if self.notice:
            out.append(builder.notice_message(self.notice))
            builder.next_message()
        if self.decision is not None and not self.parked.future.done():
            self.parked.future.set_result(self.decision)  # the agent goes on; this run streams it
        return out


def _attach(p: ap.Parked, ctx: RunnerContext, env: RunEnv, inp: UserInput) -> _Attach:
    """Answer the parked turn with this run's input (a button, or a typed reply), or leave it
    waiting with a one-line reason; a new message that is no answer denies it and comes next."""
    a = _Attach(p, env)
    q = p.question
    submission = getattr(ctx.input, "interaction", None)
    actor, name = ap.actor_of(ctx)
    d: ap.Decision | None
    if submission is not None:
        if submission.interaction_id != q.id:
            ap.put_back(p)
            a.notice = no_longer_waiting()
            return a
        d = ap.from_submission(submission, q)
        if d is None:
            ap.put_back(p)
            a.notice = texts.t("(That answer could not be read; the question is still open.)",
                               "（无法识别这个回答；问题仍在等待回答。）")
            return a
    else:
        d = ap.parse_answer(inp.text, q) if not inp.files else None
    if not p.gate.may_answer(actor):
        ap.put_back(p)
        if submission is not None:
            a.notice = only_can_answer(p.gate.who())
            return a
        # someone else of a shared session: their message is theirs, not an answer; it is kept and
        # goes to the agent, with their name, once the question is settled
        a.hold = True
        a.notice = (texts.t("(Only {who} can answer the question above; your message is kept and goes to {agent} "
                            "right after it.)", "（只有 {who} 能回答上面的问题；你的消息已保留，之后马上交给 {agent}。）",
                            who=p.gate.who(), agent=p.agent) if d is not None else
                    texts.t("({agent} is waiting for {who} to answer a question; your message is kept and goes to it "
                            "right after.)", "（{agent} 正在等待 {who} 回答一个问题；你的消息已保留，之后马上交给它。）",
                            who=p.gate.who(), agent=p.agent))
        return a
    if d is None:
        d = ap.Decision(allow=False, reason="the user sent a new message instead of answering")
        a.next_input = inp
        a.notice = texts.t("(The question was not answered, so {agent} was told no; your new message comes next.)",
                           "（问题没有得到回答，因此已告知 {agent}：不允许；接下来处理你的新消息。）", agent=p.agent)
    d.by = name
    a.decision = d
    a.resumed = True
    # the agent is this run's from here on, before it hears the answer (results() gives it): what
    # it asks goes to this run, and its LangBot tool calls go out under this run's id and grants
    held = p.adapter.env
    agent_mcp.hand_over(held, env)
    if held is not env:  # what it was still to be told (a deny reason before it asked again) goes with it
        env.agent_notes[:0], held.agent_notes = held.agent_notes, []
    # the upstream session, and what is allowed for it, stay the asker's whoever answered (an
    # approver's own session is another one): its id and "always" are stored under the asker's keys
    env.session = held.session
    env.memory = ap.Memory(held.memory.key, (ctx.state.conversation or {}).get(held.memory.key))
    env.pending_key = held.pending_key
    env.slot = p.slot
    env.__dict__["user"] = held.user  # the upstream user stays the asker's too (a cached property)
    p.adapter.env = env
    env.turn_actor = (p.gate.asker, p.gate.asker_name) if p.gate.asker else env.turn_actor
    return a


ASK_RESERVE = 30.0  # what a typed wait leaves of the run for the agent to go on with the answer


def _agent_name(adapter: Adapter) -> str:
    return str(getattr(adapter, "agent_name", None) or adapter.platform)


def _answered(env: RunEnv, builder: ResultBuilder, agent: str, q: ap.Question, d: ap.Decision) -> list[RunnerResult]:
    """State and log lines for an answer; the chat line saying what was decided."""
    out: list[RunnerResult] = []
    who = d.by or "someone"
    ap.answered(q.id, None if d.timed_out else (d.by or ""))
    if d.timed_out:
        minutes = ap.approval_timeout(env.config) / 60
        said = texts.t("(No answer within {m} min: {agent} was told no to “{title}”.)",
                       "（{m} 分钟内没有回答：已告知 {agent} 不允许“{title}”。）", m=f"{minutes:g}", agent=agent, title=q.title)
        logged = f"question {q.id} ({q.title}) timed out: denied"
    elif q.kind == "question":
        said = ""
        logged = f"question {q.id} ({q.title}) answered by {who}"
    elif d.allow:
        said = ""
        logged = f"approval {q.id} ({q.title}) allowed {'for the session' if d.always else 'once'} by {who}"
        if d.always and (value := env.memory.remember(q, env.session.current)) is not None:
            out.append(builder.state(env.memory.key, value))
    else:
        said = ""  # the person who said no knows; the agent is told and answers
        logged = f"approval {q.id} ({q.title}) denied by {who}" + (f": {d.reason}" if d.reason else "")
    get_logger("runner_kit.approvals").info("%s: %s", agent, env.redact(logged))
    out.append(builder.log(env.redact(logged), "info"))
    if said:
        out.append(builder.notice_message(said))
        builder.next_message()
    return out


async def _asking(
    item: _Ask,
    adapter: Adapter,
    env: RunEnv,
    builder: ResultBuilder,
    state: _Pump,
    queue: Channel[Any],
    task: asyncio.Task[None],
    index: int,
) -> AsyncGenerator[RunnerResult, None]:
    """Put the adapter's question to the chat and resolve it: typed during the run, or parked
    for a button or a later message (see :mod:`runner_kit.approvals`)."""
    q, future = item.question, item.future
    agent = _agent_name(adapter)
    if future.done():
        return
    state.asking = future  # a /stop meanwhile denies it
    if q.kind == "permission" and env.memory.allows(q, env.session.current):
        future.set_result(ap.Decision(allow=True, always=True, remembered=True))
        yield builder.log(env.redact(f"approval {q.id} ({q.title}) allowed: {', '.join(q.asks())} "
                                     "is allowed for this session"))
        return
    key = env.slot.key if env.slot is not None else None
    if key is None:
        future.set_result(ap.Decision(allow=False, reason="there is no conversation to ask in"))
        yield builder.log(env.redact(f"approval {q.id} ({q.title}) denied: no conversation to ask in"), "warning")
        return
    asker, name = env.turn_actor
    gate = ap.Gate(asker, name, ap.approvers(env.config))
    expires = time.time() + ap.approval_timeout(env.config)
    caps = getattr(env.ctx.delivery, "interactions", None)
    steer = env.steering
    if (m := builder.final_message()) is not None:
        yield m  # what the agent said so far is its own message, before the question
    builder.next_message()
    yield builder.log(env.redact(f"asked {q.id}: {q.title}"))
    if caps is not None:
        yield RunnerResult.interaction_requested(env.ctx.run_id, ap.interaction_request(agent, q, expires, caps))
    else:
        yield builder.notice_message(ap.question_text(agent, q, who=gate.who() if gate.listed else None))
        builder.next_message()
    if caps is None and steer is not None and steer.enabled:
        steer.hold = True
        try:
            async with aclosing(_typed_wait(q, future, env, builder, agent, gate, steer, expires)) as waiting:
                async for r in waiting:
                    yield r
        finally:
            steer.hold = False
        if future.done():
            return
        if time.time() >= expires - 1.0:
            d = ap.Decision(allow=False, timed_out=True, reason="nobody answered in time")
            for r in _answered(env, builder, agent, q, d):
                yield r
            future.set_result(d)
            return
    # park: the run ends; the answer comes as a button (a new run) or a message in a later run
    parked = ap.Parked(key=key, question=q, future=future, adapter=adapter, task=task, queue=queue, gate=gate,
                       expires_at=expires, agent=agent, index=index, slot=env.slot,
                       generation=resets.generation(env.ctx))
    ap.park(parked)
    agent_mcp.release(adapter.env)  # this run is ending: LangBot forgets it, so nothing goes out under it
    state.parked = parked
    yield builder.state(env.pending_key, {"id": q.id, "title": q.title, "kind": q.kind, "agent": agent,
                                          "asked_at": int(time.time()), "expires_at": int(expires)})
    if caps is None and steer is not None and steer.enabled:
        yield builder.notice_message(texts.t("(The question stays open: answer it with your next message.)",
                                             "（问题仍在等待回答：请用你的下一条消息回答。）"))
        builder.next_message()


async def _typed_wait(
    q: ap.Question,
    future: asyncio.Future[ap.Decision],
    env: RunEnv,
    builder: ResultBuilder,
    agent: str,
    gate: ap.Gate,
    steer: Steering,
    expires: float,
) -> AsyncGenerator[RunnerResult, None]:
    """Take a typed answer from the run's follow-ups until it comes, ``expires``, or the run's
    deadline is near; other messages are kept as follow-ups."""
    until = min(expires, time.time() + (env.deadline - time.monotonic()) - min(ASK_RESERVE, 0.2 * env.limit))
    while not future.done() and (left := until - time.time()) > 0:
        await asyncio.sleep(min(POLL_INTERVAL, left))
        env.touch()
        for follow in await steer.pull_new():
            actor, actor_name = ap.actor_of(follow)
            d = ap.parse_answer(text_of(follow), q) if not future.done() else None
            if d is not None and actor != gate.asker and gate.may_answer(actor) and env.slot is not None:
                # an approver: from their own session only a reply naming a choice is an answer, and
                # not one that fits another session's open question too (which is meant?)
                if steer.session_of(follow) not in (None, env.slot.key):
                    d = ap.parse_answer(text_of(follow), replace(q, free_text=False))
                elsewhere = routing.answerable_elsewhere(sessions.conversation_of(env.slot.key), actor, text_of(follow),
                                                  but=env.slot.key) if d is not None else []
                if elsewhere:
                    yield builder.log(f"question {q.id}: a typed answer from {actor_name or 'someone'} fits "
                                      f"{len(elsewhere) + 1} open questions; not taken")
                    yield builder.notice_message(routing.which_question([gate, *(p.gate for p in elsewhere)]))
                    builder.next_message()
                    continue
            if d is None or not gate.may_answer(actor):
                mine = steer.keep(follow)  # an ordinary message: answered after this turn, in its own session
                if future.done():
                    continue
                if d is not None:
                    yield builder.log(f"question {q.id}: an answer from {actor_name or 'someone'} was refused")
                    with texts.to(_words(text_of(follow)), _person(sessions.view(env.ctx, follow))):
                        said = texts.t("(Only {who} can answer the question above; your message comes after it.)",
                                       "（只有 {who} 能回答上面的问题；你的消息会在它之后处理。）", who=gate.who())
                elif mine:
                    said = texts.t("(Still waiting for an answer to the question above; your message comes next.)",
                                   "（仍在等待上面问题的回答；接下来处理你的消息。）")
                else:
                    with texts.to(_words(text_of(follow)), _person(sessions.view(env.ctx, follow))):
                        said = (texts.t("({who}: your message is answered after this, in your own session.)",
                                        "（{who}：你的消息会在这之后，在你自己的会话中回答。）", who=actor_name)
                                if actor_name else texts.t("(That message is answered after this, in its sender's "
                                                           "own session.)", "（这条消息会在这之后，在发送者自己的会话中回答。）"))
                yield builder.notice_message(said)
                builder.next_message()
                continue
            d.by = actor_name
            for r in _answered(env, builder, agent, q, d):
                yield r
            future.set_result(d)  # later items of this pull stay follow-ups


def _translate(item: Any, env: RunEnv, builder: ResultBuilder, usage: UsageTotals) -> list[RunnerResult]:
    out: list[RunnerResult | None] = []
    match item:
        case ev.Text(text=t):
            out.append(builder.add_text(t))
        case ev.Think(text=t):
            out.append(builder.add_think(t))
        case ev.ReplaceText(text=t):
            out.append(builder.replace(t))
        case ev.FinalText(text=t):
            out.append(builder.final_text(t))
        case ev.ToolStarted():
            out.append(builder.flush())
            params = redact_value(item.parameters, env.redact)  # a tool's input and output reach LangBot's
            out.append(builder.tool_started(item.call_id, item.name, params))  # ledger: never a secret there
            if builder.auto_progress:
                out.append(builder.set_progress(progress_line(item.name, params)))
        case ev.Progress(text=t):
            out.append(builder.set_progress(env.redact(t)))
        case ev.Finish(reason=why):
            env.finish_reason = str(why or "").strip() or None
        case ev.ToolCompleted():
            out.append(builder.tool_completed(item.call_id, item.name, redact_value(item.result, env.redact),
                                              None if item.error is None else env.redact(item.error)))
        case ev.Attachment():
            builder.add_attachment(item)
        case ev.Usage():
            usage.add(item)
            if env.on_usage is not None:
                env.on_usage()
        case ev.SessionId(value=v):
            env.session.set(v)
            if env.session.dirty and env.session.current:
                out.append(builder.state(env.session.key, env.session.current))  # type: ignore[arg-type]
                env.session.mark_saved()
        case ev.Log(text=t, level=level):
            out.append(builder.log(env.redact(t), level))
        case ev.NoReply():
            builder.no_reply = True
        case ev.Interaction(request=request):
            if getattr(env.ctx.delivery, "interactions", None) is not None:
                out.append(RunnerResult.interaction_requested(env.ctx.run_id, request))
        case ev.Meta(key=k, value=v):
            builder.meta[k] = v
        case ev.State(key=k, value=v, scope=scope):
            out.append(builder.state(k, v, scope))
        case _:
            get_logger("runner_kit.run").debug("ignoring unknown adapter event %r", type(item))
    return [r for r in out if r is not None]
