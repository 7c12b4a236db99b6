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
import time
import traceback
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Callable
from contextlib import aclosing
from functools import cached_property
from typing import Any, ClassVar

import httpx
from langbot_plugin.api.definition.components.runner.runner import Runner
from langbot_plugin.api.entities.builtin.runner.context import RunnerContext
from langbot_plugin.api.entities.builtin.runner.result import RunnerResult

from . import events as ev
from .config import Config, ConfigSchema
from .errors import Redactor, RunnerError, SessionMissing
from .explain import explanation, failure_log, incomplete_note
from .http import shared_client
from .identity import upstream_user
from .inputs import DEFAULT_MAX_BYTES, UserInput, collect_input
from .logs import bind_redactor, get_logger, unbind_redactor
from .results import ResultBuilder, StreamPolicy, progress_line
from .session import SessionHandle, session_key
from .steering import POLL_INTERVAL, Steering, follow_up_input, follow_up_mode, unanswered_note
from .usage import UsageTotals

DEFAULT_TIMEOUT = 300.0
NO_LIMIT = 24 * 3600.0  # "no deadline" (timeout 0 or blank and no host deadline), kept finite
CANCEL_GRACE = 3.0  # longest wait for the upstream's stop endpoint after a cancel or deadline
DEFAULT_SESSION_RESET_TEXT = "(The previous conversation could not be continued, so this reply starts a new one.)"


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

    def budget(self) -> float:
        """Seconds left for upstream work; raises upstream.timeout when none is left."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise RunnerError("upstream.timeout", "the run's time limit was reached before the upstream answered")
        return left

    def touch(self) -> None:
        """Something arrived from the upstream (keep-alives count): the run is alive."""
        self.last_activity = time.monotonic()

    async def watch(self, chunks: AsyncIterable[bytes]) -> AsyncIterator[bytes]:
        """Pass a response body through, noting every chunk as life for ``idle-timeout``.

        Adapters read streams as ``iter_sse(env.watch(resp.aiter_bytes()))``."""
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

    Read response bodies through ``self.env.watch(...)`` so keep-alives count for ``idle-timeout``.
    """

    platform: ClassVar[str] = "upstream"
    session_key: ClassVar[str | None] = None
    #: opt in to the steering turn loop: implement ``turn``/``interrupt``/``close`` instead of ``stream``
    multi_turn: ClassVar[bool] = False

    def __init__(self, env: RunEnv):
        self.env = env

    def stream(self) -> AsyncIterator[ev.Event]:  # pragma: no cover - abstract
        raise NotImplementedError

    def turn(self, inp: UserInput, index: int) -> AsyncIterator[ev.Event]:  # pragma: no cover - abstract
        """One agent turn in the live session (``index`` 0 is the run's own message, then each
        batch of follow-ups). Raise :class:`SessionMissing` before any output when a stored
        session is rejected: the kit drops it and calls ``turn(inp, 0)`` again."""
        raise NotImplementedError

    async def interrupt(self) -> None:
        """Stop the running turn through the agent's own interrupt, keeping the session usable
        (``follow-up-mode: interrupt``); the turn's event stream should end soon after."""

    async def cancel(self) -> None:
        """Best effort: tell the upstream to stop work for this run (host cancelled)."""

    async def close(self) -> None:
        """End the live session (multi-turn adapters): called once when the run ends, on every
        path, after ``cancel`` when a turn was still running."""


class KitRunner(Runner):  # type: ignore[misc]  # the SDK ships no type information
    """A LangBot Runner driven by an :class:`Adapter`; subclasses set ``adapter`` and ``schema``."""

    adapter: ClassVar[type[Adapter]]
    schema: ClassVar[ConfigSchema]

    async def run(self, ctx: RunnerContext) -> AsyncGenerator[RunnerResult, None]:
        async with aclosing(drive(ctx, type(self).adapter, type(self).schema)) as results:
            async for result in results:
                yield result


_DONE = object()
_TICK = object()
_TIMEOUT = object()
_IDLE = object()
_STEERED = object()
INTERRUPTED_NOTE = "(Stopped here to take your next message.)"
NO_REPLY_TEXT = "(The agent finished this request without a reply.)"


class _Raised:
    __slots__ = ("exc",)

    def __init__(self, exc: BaseException):
        self.exc = exc


class _Pump:
    """Whether the adapter's stream ended by itself (then no stop call is needed)."""

    __slots__ = ("ended", "interrupted")

    def __init__(self) -> None:
        self.ended = False
        self.interrupted = False  # a follow-up interrupted this turn (follow-up-mode: interrupt)


def _flag(config: Config | None, key: str, default: bool) -> bool:
    if config is None:
        return default
    value = config.get(key, default)
    return default if value is None else bool(value)


def _builder(ctx: RunnerContext, config: Config | None, *, multi_turn: bool = False) -> ResultBuilder:
    if config is None:
        return ResultBuilder(ctx.run_id)
    builder = ResultBuilder(
        ctx.run_id, remove_think=bool(config.get("remove-think", False)), policy=StreamPolicy.from_config(config)
    )
    builder.auto_progress = multi_turn
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
    env: RunEnv | None = None
    config: Config | None = None
    log = get_logger("runner_kit.run")
    platform = adapter_cls.platform
    to_stop: Adapter | None = None  # an adapter whose upstream work may still be running
    live: Adapter | None = None  # the multi-turn adapter to close at the end
    steer: Steering | None = None
    pump = _Pump()

    async def one_turn(
        make: Callable[[int], Adapter], turn_input: UserInput, index: int, watch: Steering | None
    ) -> AsyncGenerator[RunnerResult, None]:
        """One turn (for single-turn adapters: the run), retried once on a fresh session."""
        nonlocal pump, to_stop
        assert env is not None and config is not None
        for attempt in (0, 1):
            adapter = make(attempt)
            pump = _Pump()
            to_stop = adapter
            try:
                source = adapter.turn(turn_input, index) if adapter.multi_turn else adapter.stream()
                async with aclosing(_pump(adapter, env, builder, usage, pump, source, watch)) as results:
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
                        builder.set_preamble(str(config.get("session-reset-text") or DEFAULT_SESSION_RESET_TEXT))
                    continue
                raise RunnerError("upstream.not_found", f"{platform} reports the conversation does not exist") from None

    try:
        try:
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
            if not adapter_cls.multi_turn:
                async with aclosing(one_turn(lambda _: adapter_cls(env), inp, 0, None)) as turn:
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
            live = adapter_cls(env)
            steer = Steering.for_run(ctx)
            watch = steer if follow_up_mode(config) == "interrupt" else None
            index = 0
            turn_input: UserInput | None = inp
            while True:
                if turn_input is not None:
                    async with aclosing(one_turn(lambda _: live, turn_input, index, watch)) as turn:
                        async for result in turn:
                            yield result
                    if env.session.dirty:
                        yield builder.state(env.session.key, env.session.current)  # type: ignore[arg-type]
                        env.session.mark_saved()
                    final = builder.final_message(note=INTERRUPTED_NOTE if pump.interrupted else None)
                    if final is None and not builder.no_reply:
                        if index == 0 and not pump.interrupted:
                            raise RunnerError("upstream.empty_response", f"{platform} finished without any answer")
                        final = builder.notice_message(NO_REPLY_TEXT)
                    if final is not None:
                        yield final  # each turn is its own reply in the chat
                steer.turn_done()
                await steer.pull()
                if not steer.pending:
                    break
                env.budget()
                turn_input = await follow_up_input(ctx, steer.take(), max_bytes=env.max_bytes)
                index += 1
                builder = _builder(ctx, config, multi_turn=True)
                if turn_input.empty:
                    why = "; ".join(turn_input.skipped)
                    yield builder.notice_message(
                        "(That message had nothing the agent could read" + (f": {why}" if why else "") + ".)"
                    )
                    turn_input = None
            yield builder.completed(usage, finish_reason=env.finish_reason or "stop")
        except RunnerError as exc:
            if pump.ended:
                to_stop = None
            note = await _unanswered(steer)
            for r in _failure(exc.code, redact(exc.message), exc.retryable, env, config, builder, usage, platform, ctx,
                              note):
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
        if to_stop is not None and not pump.ended:
            try:
                await asyncio.wait_for(to_stop.cancel(), timeout=CANCEL_GRACE)
            except BaseException:  # noqa: BLE001 - best effort; a cancel of ours must not resurface
                log.info("%s: the upstream stop call did not finish", platform)
        if live is not None:
            try:
                await live.close()
            except BaseException:  # noqa: BLE001 - closing must not resurface either
                log.warning("%s: closing the agent session failed", platform)
        if steer is not None and (left := steer.unanswered()):
            log.warning("%d follow-up message(s) of this run were not answered", len(left))
        unbind_redactor(token)


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
        said = explanation(platform, code, message)
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


async def _pump(
    adapter: Adapter,
    env: RunEnv,
    builder: ResultBuilder,
    usage: UsageTotals,
    state: _Pump,
    source: AsyncIterator[ev.Event] | None = None,
    watch: Steering | None = None,
) -> AsyncGenerator[RunnerResult, None]:
    """Run the adapter's events (``source``, default ``adapter.stream()``) in a task and translate
    them; timers feed ticks into the same queue. With ``watch``, follow-ups are polled meanwhile
    and the first one interrupts the turn (``adapter.interrupt()``)."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[Any] = asyncio.Queue()
    events = source if source is not None else adapter.stream()

    async def produce() -> None:
        try:
            async for item in events:
                queue.put_nowait(item)
            queue.put_nowait(_DONE)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001 - forwarded to the consumer
            queue.put_nowait(_Raised(exc))

    idle = env.idle_timeout
    idle_timer: asyncio.TimerHandle | None = None

    def check_idle() -> None:
        nonlocal idle_timer
        quiet = time.monotonic() - env.last_activity
        if quiet >= idle:
            idle_timer = None
            queue.put_nowait(_IDLE)
        else:
            idle_timer = loop.call_later(idle - quiet, check_idle)

    async def poll(steer: Steering) -> None:
        while True:
            await asyncio.sleep(POLL_INTERVAL)
            if await steer.pull():
                queue.put_nowait(_STEERED)
                return

    env.touch()
    task = loop.create_task(produce())
    poller = loop.create_task(poll(watch)) if watch is not None and watch.enabled else None
    deadline_timer = loop.call_at(loop.time() + max(env.deadline - time.monotonic(), 0.0), queue.put_nowait, _TIMEOUT)
    if idle > 0:
        idle_timer = loop.call_later(idle, check_idle)
    tick: asyncio.TimerHandle | None = None
    try:
        while True:
            item = await queue.get()
            if item is _DONE:
                state.ended = True
                return
            if item is _TICK:
                tick = None
                if (r := builder.flush()) is not None:
                    yield r
                continue
            if item is _TIMEOUT:
                raise RunnerError(
                    "upstream.timeout",
                    f"{adapter.platform} did not finish within the run's time limit of {env.limit:.0f} s",
                )
            if item is _IDLE:
                raise RunnerError(
                    "upstream.timeout",
                    f"{adapter.platform} sent nothing for {idle:g} s (idle-timeout)",
                )
            if isinstance(item, _Raised):
                state.ended = True
                raise item.exc
            if item is _STEERED:
                state.interrupted = True
                try:
                    await asyncio.wait_for(adapter.interrupt(), timeout=CANCEL_GRACE)
                except Exception as exc:  # noqa: BLE001 - the turn then simply runs to its end
                    get_logger("runner_kit.run").info("%s: interrupting the turn failed: %s", adapter.platform,
                                                      env.redact(repr(exc)))
                continue
            env.touch()
            for r in _translate(item, env, builder, usage):
                yield r
            if tick is None and (due := builder.due_in()) is not None:
                tick = loop.call_later(due, queue.put_nowait, _TICK)
    finally:
        deadline_timer.cancel()
        if idle_timer is not None:
            idle_timer.cancel()
        if tick is not None:
            tick.cancel()
        if poller is not None and not poller.done():
            poller.cancel()
        if not task.done():
            task.cancel()
        try:
            await task
        except BaseException:  # noqa: BLE001 - the producer's own end is irrelevant here
            pass


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
            out.append(builder.tool_started(item.call_id, item.name, item.parameters))
            if builder.auto_progress:
                out.append(builder.set_progress(progress_line(item.name, item.parameters)))
        case ev.Progress(text=t):
            out.append(builder.set_progress(t))
        case ev.Finish(reason=why):
            env.finish_reason = str(why or "").strip() or None
        case ev.ToolCompleted():
            out.append(builder.tool_completed(item.call_id, item.name, item.result, item.error))
        case ev.Attachment():
            builder.add_attachment(item)
        case ev.Usage():
            usage.add(item)
        case ev.SessionId(value=v):
            env.session.set(v)
            if env.session.dirty and env.session.current:
                out.append(builder.state(env.session.key, env.session.current))  # type: ignore[arg-type]
                env.session.mark_saved()
        case ev.Log(text=t, level=level):
            out.append(builder.log(env.redact(t), level))
        case ev.NoReply():
            builder.no_reply = True
        case ev.Meta(key=k, value=v):
            builder.meta[k] = v
        case ev.State(key=k, value=v, scope=scope):
            out.append(builder.state(k, v, scope))
        case _:
            get_logger("runner_kit.run").debug("ignoring unknown adapter event %r", type(item))
    return [r for r in out if r is not None]
