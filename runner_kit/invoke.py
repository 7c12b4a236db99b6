"""A leaner ``Runner.invoke`` with the SDK's guarantees, for the SDK versions it was checked against.

The plugin runtime iterates ``runner.invoke(ctx)``. The SDK's own ``invoke`` (langbot-plugin
0.7.16/0.7.18, ``api/definition/components/runner/runner.py``) runs ``run`` in a task and, for
every result, creates a second task for ``queue.get()`` and waits on both with ``asyncio.wait``:
three event-loop hops and two task objects per result. At a thousand concurrent chats that wrapper
is most of the delay between an upstream token and the host seeing it.

:func:`lean_invoke` keeps what that wrapper guarantees and changes only how the consumer waits:

* a context already active is refused; ``ctx._api`` is the SDK's tracing wrapper around a new
  ``get_run_api(ctx)`` and ``ctx._results`` the same bounded queue (256), both cleared on exit;
* ``run`` executes in one task holding the SDK's task-local invocation binding (API, plugin config,
  installation binding), so background work it starts inherits it and the caller's context does
  not;
* traced ``tool.call.*`` results (and ``ctx.log`` lines) go into the same queue as yielded results,
  so they interleave in the order they were put; a full queue holds ``run`` back as before;
* a yielded object that is not a ``RunnerResult``, or one for another run id, raises the SDK's
  ``TypeError`` / ``ValueError``; iteration stops after the first ``run.completed`` or
  ``run.failed``; a ``run`` that ends without one gets ``run_completed(run_id)`` appended; a
  coroutine ``run`` must return None;
* closing the generator (host cancel, deadline) cancels the task, which closes ``run``'s generator,
  and waits for it; an exception from ``run`` reaches the caller after the results queued before it.

The only differences: the consumer waits on one future that the queue resolves when an item is put
(or the task resolves when it ends), so a result costs one hop, and several queued results are
handed over without waiting at all; and the kit's reading task (``runner_kit.runner._produce``)
may put a result into the queue itself (:func:`outlet`, :meth:`_Results.offer`) instead of passing
it up through ``run``'s generators, which saves the run's task a wake-up per result. It does so
only when nothing it sent earlier is still on its way and no put waits for room, so the order
the host sees is the order the results were made.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncGenerator
from contextlib import suppress
from importlib import metadata
from typing import Any

from langbot_plugin.api.entities.builtin.runner.context import RunnerContext
from langbot_plugin.api.entities.builtin.runner.result import RunnerResult
from langbot_plugin.api.proxies.invocation import bind_invocation, current_binding, current_config
from langbot_plugin.api.proxies.runner.tracing import _TracedRunAPI

from .channel import Channel

#: SDK versions whose ``Runner.invoke`` this reproduces. 0.7.18 is installed and compared result for
#: result in tests/kit/test_invoke.py; 0.7.16 (the version LangBot 4.11.2 pins) ships byte-identical
#: runner.py, tracing.py, invocation.py, runner context and API proxy modules (checked against the
#: PyPI wheels). Any other version gets the SDK's own ``invoke``.
TESTED_SDK_VERSIONS = frozenset({"0.7.16", "0.7.18"})
TERMINAL = frozenset({"run.completed", "run.failed"})
QUEUE_SIZE = 256  # the SDK's bound


def outlet(ctx: RunnerContext) -> _Results[RunnerResult] | None:
    """The result queue of a :func:`lean_invoke` running ``ctx``, which the kit's reading task may
    hand results to directly (:meth:`_Results.offer`); None under the SDK's own ``invoke`` or when
    ``run`` is iterated directly."""
    results = getattr(ctx, "_results", None)
    return results if isinstance(results, _Results) else None


def sdk_version() -> str | None:
    try:
        return metadata.version("langbot-plugin")
    except metadata.PackageNotFoundError:
        return None


LEAN_SUPPORTED = sdk_version() in TESTED_SDK_VERSIONS


#: the SDK's bounded result queue; the consumer's ``waiter`` is resolved on every put, and the
#: reading task may :meth:`~runner_kit.channel.Channel.offer` a result straight into it
_Results = Channel


async def _execute(runner: Any, ctx: RunnerContext, results: _Results[RunnerResult]) -> None:
    """Run ``runner.run(ctx)`` into ``results`` inside the SDK's invocation binding (one coroutine
    per run, not a closure and a coroutine per step: fewer objects alive at a thousand runs)."""
    handler = runner._plugin_runtime_handler
    scoped = current_config(handler)
    with bind_invocation(
        handler,
        ctx.api,
        config=runner._plugin_config if scoped is None else scoped,
        binding=current_binding(handler),
    ):
        terminal = False
        execution = runner.run(ctx)
        if hasattr(execution, "__aiter__"):
            try:
                async for result in execution:
                    if not isinstance(result, RunnerResult):
                        raise TypeError("Runner must yield RunnerResult objects")
                    if result.run_id != ctx.run_id:
                        raise ValueError("Runner result belongs to a different invocation")
                    await results.put(result)
                    if result.type in TERMINAL:
                        terminal = True
                        break
            finally:
                close = getattr(execution, "aclose", None)
                if close is not None:
                    await close()
        elif inspect.isawaitable(execution):
            if await execution is not None:
                raise TypeError("Coroutine Runner.run must return None")
        else:
            raise TypeError("Runner.run must be async")
        if not terminal:
            await results.put(RunnerResult.run_completed(ctx.run_id))


async def lean_invoke(runner: Any, ctx: RunnerContext) -> AsyncGenerator[RunnerResult, None]:
    """``runner.invoke(ctx)`` as the SDK defines it, with one loop hop per result."""
    if ctx._api is not None:
        raise RuntimeError("Runner context is already active")
    results: _Results[RunnerResult] = _Results(maxsize=QUEUE_SIZE)
    ctx._api = _TracedRunAPI(runner.get_run_api(ctx), ctx.run_id, results)
    ctx._results = results
    loop = asyncio.get_running_loop()
    task = loop.create_task(_execute(runner, ctx, results))
    task.add_done_callback(results.wake)
    try:
        while True:
            if not results.empty():
                yield results.get_nowait()
                continue
            if task.done():
                break
            results.waiter = loop.create_future()
            await results.waiter
        await task  # the run's own exception, after everything it queued
    finally:
        results.waiter = None
        if not task.done():
            task.cancel()
        with suppress(asyncio.CancelledError, Exception):
            await task
        ctx._api = None
        ctx._results = None
