"""runner_kit.channel: the kit's per-run queue keeps asyncio.Queue's order, bound and cancellation
rules, with far fewer objects per queue (what a thousand runs in flight pay in memory)."""

from __future__ import annotations

import asyncio
import gc

import pytest

from runner_kit.channel import Channel


async def test_items_come_out_in_order_and_empty_raises() -> None:
    ch: Channel[int] = Channel()
    for i in range(5):
        ch.put_nowait(i)
    assert ch.qsize() == 5 and not ch.empty() and not ch.full()
    assert [await ch.get() for _ in range(3)] + [ch.get_nowait(), ch.get_nowait()] == [0, 1, 2, 3, 4]
    with pytest.raises(asyncio.QueueEmpty):
        ch.get_nowait()


async def test_get_waits_for_a_put_and_the_waiter_is_woken_once() -> None:
    ch: Channel[str] = Channel()
    getter = asyncio.ensure_future(ch.get())
    await asyncio.sleep(0)
    assert not getter.done() and ch.waiter is not None
    ch.put_nowait("a")
    assert await getter == "a"
    assert ch.waiter is None


async def test_a_second_concurrent_get_is_refused() -> None:
    ch: Channel[int] = Channel()
    first = asyncio.ensure_future(ch.get())
    await asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="one consumer"):
        await ch.get()
    ch.put_nowait(1)
    assert await first == 1


async def test_a_cancelled_get_takes_nothing() -> None:
    ch: Channel[int] = Channel()
    getter = asyncio.ensure_future(ch.get())
    await asyncio.sleep(0)
    getter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await getter
    ch.put_nowait(7)
    assert ch.get_nowait() == 7


async def test_a_full_channel_refuses_put_nowait_and_holds_put_back_in_arrival_order() -> None:
    ch: Channel[int] = Channel(maxsize=2)
    ch.put_nowait(1)
    ch.put_nowait(2)
    assert ch.full()
    with pytest.raises(asyncio.QueueFull):
        ch.put_nowait(3)
    p3 = asyncio.ensure_future(ch.put(3))
    p4 = asyncio.ensure_future(ch.put(4))
    await asyncio.sleep(0)
    assert not p3.done() and not p4.done() and ch.qsize() == 2
    out = [await ch.get() for _ in range(4)]
    await asyncio.gather(p3, p4)
    assert out == [1, 2, 3, 4]


async def test_a_cancelled_put_puts_nothing_and_passes_its_turn_on() -> None:
    ch: Channel[int] = Channel(maxsize=1)
    ch.put_nowait(1)
    p2 = asyncio.ensure_future(ch.put(2))
    p3 = asyncio.ensure_future(ch.put(3))
    await asyncio.sleep(0)
    assert ch.get_nowait() == 1  # admits p2 ...
    p2.cancel()  # ... which is cancelled before it runs: p3 gets the room
    with pytest.raises(asyncio.CancelledError):
        await p2
    await asyncio.wait_for(p3, 1)
    assert ch.get_nowait() == 3 and ch.empty()


async def test_wake_resolves_the_waiter_without_an_item() -> None:
    ch: Channel[int] = Channel()
    ch.waiter = asyncio.get_running_loop().create_future()
    waiter = ch.waiter
    ch.wake()
    assert waiter.done() and ch.waiter is None and ch.empty()


def test_a_channel_holds_far_fewer_objects_than_an_asyncio_queue() -> None:
    """What each run in flight pays twice: the collector walks every one of these objects."""

    def new_objects(make: object) -> int:
        gc.collect()
        before = len(gc.get_objects())
        keep = [make() for _ in range(200)]  # type: ignore[operator]
        after = len(gc.get_objects())
        del keep
        return (after - before) // 200

    queue_objects = new_objects(asyncio.Queue)
    channel_objects = new_objects(Channel)
    assert channel_objects <= 2 < queue_objects
