"""The runner base every plugin subclasses, and the driver that turns an adapter's events into
RunnerResults.

Guarantees (the contract suite checks them for every plugin): exactly one terminal result and
nothing after it; no exception escapes ``run()``; cumulative deltas; one complete message on
success; a clean retryable ``upstream.timeout`` before the host deadline; closing the generator
(host cancel) stops the upstream work and leaves no task or connection behind.
"""

from __future__ import annotations

import asyncio
import time
import traceback
from collections.abc import AsyncGenerator, AsyncIterator
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
from .http import shared_client
from .identity import upstream_user
from .inputs import DEFAULT_MAX_BYTES, UserInput, collect_input
from .logs import LOG_REDACTOR, get_logger
from .results import ResultBuilder, StreamPolicy
from .session import SessionHandle
from .usage import UsageTotals

DEFAULT_TIMEOUT = 300.0


def deadline_margin(limit: float) -> float:
    """How long before the host's deadline the runner gives up, to report a clean failure."""
    return min(2.0, max(0.25, 0.05 * limit))


class RunEnv:
    """Everything an adapter needs for one run."""

    def __init__(self, ctx: RunnerContext, config: Config, redact: Redactor, session_key: str | None):
        self.ctx = ctx
        self.config = config
        self.redact = redact
        self.session = SessionHandle(ctx, session_key)
        self.log = get_logger("runner_kit.run")
        now = time.time()
        limits = []
        if ctx.runtime.deadline_at:
            limits.append(float(ctx.runtime.deadline_at) - now)
        timeout = config.get("timeout")
        if isinstance(timeout, (int, float)) and timeout > 0:
            limits.append(float(timeout))
        limit = min(limits) if limits else DEFAULT_TIMEOUT
        self.deadline = time.monotonic() + limit - deadline_margin(max(limit, 0.0))

    def budget(self) -> float:
        """Seconds left for upstream work; raises upstream.timeout when none is left."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise RunnerError("upstream.timeout", "the run's time limit was reached before the upstream answered")
        return left

    @cached_property
    def client(self) -> httpx.AsyncClient:
        return shared_client()

    @cached_property
    def user(self) -> str:
        return upstream_user(self.ctx, self.config.get("user-id-source"))

    @cached_property
    def input(self) -> UserInput:
        mb = self.config.get("max-file-size-mb")
        limit = int(float(mb) * 1024 * 1024) if isinstance(mb, (int, float)) and mb > 0 else DEFAULT_MAX_BYTES
        return collect_input(self.ctx, max_bytes=limit)


class Adapter:
    """One platform's mapping: build the request, translate wire events into kit events."""

    platform: ClassVar[str] = "upstream"
    session_key: ClassVar[str | None] = None

    def __init__(self, env: RunEnv):
        self.env = env

    def stream(self) -> AsyncIterator[ev.Event]:  # pragma: no cover - abstract
        raise NotImplementedError

    async def cancel(self) -> None:
        """Best effort: tell the upstream to stop work for this run (host cancelled)."""


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


class _Raised:
    __slots__ = ("exc",)

    def __init__(self, exc: BaseException):
        self.exc = exc


async def drive(
    ctx: RunnerContext, adapter_cls: type[Adapter], schema: ConfigSchema
) -> AsyncGenerator[RunnerResult, None]:
    """Run one turn through ``adapter_cls`` and yield results; never raises (except cancellation)."""
    builder = ResultBuilder(ctx.run_id)
    usage = UsageTotals()
    redact = Redactor()
    env: RunEnv | None = None
    log = get_logger("runner_kit.run")
    try:
        config = schema.load(ctx.config)
        for secret in config.secrets:
            redact.add(secret)
            LOG_REDACTOR.add(secret)
        builder = ResultBuilder(
            ctx.run_id, remove_think=bool(config.get("remove-think", False)), policy=StreamPolicy.from_config(config)
        )
        env = RunEnv(ctx, config, redact, adapter_cls.session_key)
        env.budget()
        for attempt in (0, 1):
            adapter = adapter_cls(env)
            try:
                async with aclosing(_pump(adapter, env, builder, usage)) as results:
                    async for result in results:
                        yield result
                break
            except SessionMissing:
                if attempt == 0 and env.session.current and not builder.has_output:
                    log.info("%s: stored session is gone upstream; retrying on a fresh one", adapter.platform)
                    env.session.drop()
                    continue
                raise RunnerError(
                    "upstream.not_found", f"{adapter_cls.platform} reports the conversation does not exist"
                ) from None
        if env.session.dirty:
            yield builder.state(env.session.key, env.session.current)  # type: ignore[arg-type]
            env.session.mark_saved()
        final = builder.final_message()
        if final is None:
            raise RunnerError("upstream.empty_response", f"{adapter_cls.platform} finished without any answer")
        yield final
        yield builder.completed(usage)
    except RunnerError as exc:
        if env is not None and env.session.dirty:
            # a new id is kept for the next turn; a stale one that was dropped is cleared
            yield builder.state(env.session.key, env.session.current)  # type: ignore[arg-type]
        log.warning("run failed: %s (%s)", redact(exc.message), exc.code)
        yield builder.failed(exc.code, redact(exc.message), exc.retryable, usage)
    except Exception as exc:  # noqa: BLE001 - nothing may escape run()
        log.error("internal error in %s: %s", adapter_cls.__name__, redact(repr(exc)))
        log.debug("%s", redact(traceback.format_exc()))
        yield builder.failed("runner.internal", redact(f"internal error: {type(exc).__name__}: {exc}"), False, usage)


async def _pump(
    adapter: Adapter, env: RunEnv, builder: ResultBuilder, usage: UsageTotals
) -> AsyncGenerator[RunnerResult, None]:
    """Run the adapter in a task and translate its events; timers feed ticks into the same queue."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[Any] = asyncio.Queue()
    finished = False

    async def produce() -> None:
        try:
            async for item in adapter.stream():
                queue.put_nowait(item)
            queue.put_nowait(_DONE)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001 - forwarded to the consumer
            queue.put_nowait(_Raised(exc))

    task = loop.create_task(produce())
    deadline_timer = loop.call_at(loop.time() + max(env.deadline - time.monotonic(), 0.0), queue.put_nowait, _TIMEOUT)
    tick: asyncio.TimerHandle | None = None
    try:
        while True:
            item = await queue.get()
            if item is _DONE:
                finished = True
                return
            if item is _TICK:
                tick = None
                if (r := builder.flush()) is not None:
                    yield r
                continue
            if item is _TIMEOUT:
                raise RunnerError(
                    "upstream.timeout", f"{adapter.platform} did not finish before the run's time limit"
                )
            if isinstance(item, _Raised):
                finished = True
                raise item.exc
            for r in _translate(item, env, builder, usage):
                yield r
            if tick is None and (due := builder.due_in()) is not None:
                tick = loop.call_later(due, queue.put_nowait, _TICK)
    finally:
        deadline_timer.cancel()
        if tick is not None:
            tick.cancel()
        if not task.done():
            task.cancel()
        try:
            await task
        except BaseException:  # noqa: BLE001 - the producer's own end is irrelevant here
            pass
        if not finished:
            try:
                await asyncio.wait_for(adapter.cancel(), timeout=3.0)
            except BaseException:  # noqa: BLE001 - best effort
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
        case _:
            get_logger("runner_kit.run").debug("ignoring unknown adapter event %r", type(item))
    return [r for r in out if r is not None]
