"""A FIFO queue for one consumer task, with the parts of ``asyncio.Queue`` the kit uses.

Every run in flight holds two queues: the pump's (reading task → run) and, under the kit's lean
invoke, the host's (run → plugin runtime). An ``asyncio.Queue`` builds four deques and an
``asyncio.Event`` up front (items, waiting getters, waiting putters, the ``join()`` event and its
waiters), about 3 KB and six objects for the cycle collector to walk, per queue; at a thousand
runs that is several MB of peak RSS and a slower full collection (bench section 4). A channel
holds one deque and one future for its single consumer; waiting putters (only a bounded channel
has them, only when full) get a deque of their own when the first one waits.

Semantics kept from ``asyncio.Queue``: FIFO order; ``put_nowait`` raises ``asyncio.QueueFull`` and
``get_nowait`` ``asyncio.QueueEmpty``; ``put`` waits while the channel is full, a ``get`` lets
the longest-waiting putter in, and a cancelled putter puts nothing; ``get`` waits for an item
and a cancelled ``get`` takes none. Added: :meth:`offer`, a put that never overtakes a waiting
one. Not kept: ``join``/``task_done``, and more than one task waiting in ``get`` at a time
(a second concurrent ``get`` raises ``RuntimeError``; no queue of the kit has two consumers)."""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Generic, TypeVar

T = TypeVar("T")


class Channel(Generic[T]):
    __slots__ = ("_items", "_putters", "holding", "maxsize", "waiter")

    def __init__(self, maxsize: int = 0) -> None:
        self._items: deque[T] = deque()
        self._putters: deque[asyncio.Future[None]] | None = None
        self.maxsize = maxsize
        self.holding = 0  # puts waiting for room (also one let in that has not put yet)
        #: the consumer's wake-up, resolved by the next put (or by :meth:`wake`)
        self.waiter: asyncio.Future[None] | None = None

    def qsize(self) -> int:
        return len(self._items)

    def empty(self) -> bool:
        return not self._items

    def full(self) -> bool:
        return 0 < self.maxsize <= len(self._items)

    def wake(self, _task: object = None) -> None:
        """Resolve the consumer's waiter (usable as a done callback)."""
        waiter = self.waiter
        if waiter is not None:
            self.waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def put_nowait(self, item: T) -> None:
        if self.full():
            raise asyncio.QueueFull
        self._items.append(item)
        self.wake()

    async def put(self, item: T) -> None:
        if self.full():
            self.holding += 1
            try:
                await self._room()
            finally:
                self.holding -= 1
        self.put_nowait(item)

    async def _room(self) -> None:
        while self.full():
            putters = self._putters
            if putters is None:
                putters = self._putters = deque()
            room = asyncio.get_running_loop().create_future()
            putters.append(room)
            try:
                await room
            except BaseException:
                room.cancel()
                if room in putters:
                    putters.remove(room)
                if not self.full() and not room.cancelled():
                    self._admit()  # it was this putter's turn: pass it on
                raise

    def offer(self, item: T) -> bool:
        """Put ``item`` now if that overtakes nothing (no ``put`` is waiting for room, and there is
        room); False when it must go another way."""
        if self.holding or self.full():
            return False
        self.put_nowait(item)
        return True

    def _admit(self) -> None:
        """Let the first waiting putter in (there is room)."""
        putters = self._putters
        while putters:
            room = putters.popleft()
            if not room.done():
                room.set_result(None)
                return

    def get_nowait(self) -> T:
        if not self._items:
            raise asyncio.QueueEmpty
        item = self._items.popleft()
        if self._putters:
            self._admit()
        return item

    async def get(self) -> T:
        while not self._items:
            if self.waiter is not None and not self.waiter.done():
                raise RuntimeError("Channel has one consumer; another task is already waiting in get()")
            waiter = self.waiter = asyncio.get_running_loop().create_future()
            try:
                await waiter
            finally:
                if self.waiter is waiter:
                    self.waiter = None
        return self.get_nowait()
