"""Who uses one conversation session, and when: the owner of a session in this plugin process.

A *session* is what ``user-id-source`` makes of a LangBot conversation (:mod:`runner_kit.identity`):
one per person in it (``actor``, ``hashed``) or one for everyone in it (``conversation``,
``legacy-*``). Its :class:`Slot`, keyed by plugin, bot, conversation, thread and the session's state
key, holds everything a run of that session must share with the others:

- the lock that serialises its runs: a second run of the same session waits for the first (it says
  so in one line when it has to wait), so two quick messages never start two upstream sessions;
- what runs of the session wrote to conversation state: a run that waited sees the upstream session
  id (and the approvals, the open question) the run before it stored, not the snapshot it started
  with;
- a question the session's agent waits on (a parked turn, :mod:`runner_kit.approvals`): while it is
  open the session is not free; the asker's (or an approver's) reply answers it, and a message from
  another member of a shared session is kept (:attr:`Slot.held`) and goes to the agent right after
  the question is settled, with its sender's name.

Follow-ups LangBot claims for a running run (steering) are routed by the same key: a message from
someone whose session is another one is never a turn of this session; the run answers it afterwards,
in the sender's own session (:func:`key_of`, :func:`view`).
"""

from __future__ import annotations

import asyncio
import copy
import time
from dataclasses import dataclass, field
from typing import Any

from .identity import PER_PERSON, normalize_source, upstream_user
from .inputs import UserInput
from .logs import get_logger
from .session import session_key

log = get_logger("runner_kit.sessions")
HELD_FULL = "({agent} is waiting for {who} to answer a question, and {n} messages already wait for it; please send this again after.)"


@dataclass(slots=True)
class Held:
    """A message kept for a session while its agent waited on someone else's question."""

    name: str
    input: UserInput
    at: float = field(default_factory=time.time)


@dataclass(eq=False)
class Slot:
    key: str
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    parked: Any = None  # the approvals.Parked turn of this session, while its question is open
    held: list[Held] = field(default_factory=list)
    written: dict[str, tuple[float, Any]] = field(default_factory=dict)  # state key -> (when, value)
    users: int = 0  # runs that entered and have not left
    closing: asyncio.Task[None] | None = None  # an expired question's agent, given a moment to take the denial

    def wrote(self, key: str, value: Any, scope: str = "conversation") -> None:
        """A run of this session stored ``value`` under ``key`` (conversation scope only)."""
        if scope == "conversation":
            self.written[key] = (time.time(), value)

    def catch_up(self, ctx: Any) -> bool:
        """Put into ``ctx``'s state snapshot what runs of this session stored while it was in use
        (the host may have taken the snapshot before they did; only this process writes these
        keys, and the slot lives only while runs use it); True when anything was written."""
        newer = {k: v for k, (_t, v) in self.written.items()}
        if not newer:
            return False
        state = getattr(ctx, "state", None)
        if state is None:
            return False
        snapshot = getattr(state, "conversation", None)
        if snapshot is None:
            snapshot = {}
            try:
                state.conversation = snapshot
            except Exception:  # noqa: BLE001 - a frozen snapshot: nothing to catch up on
                return False
        for k, v in newer.items():
            if v is None:
                snapshot.pop(k, None)
            else:
                snapshot[k] = v
        return True

    def keep(self, held: Held) -> bool:
        """Keep a message for after the open question; False when :data:`HELD_MAX` already wait
        (a flood while a question is open must not grow without bound or become one huge turn)."""
        if len(self.held) >= HELD_MAX:
            return False
        self.held.append(held)
        return True

    def take_held(self) -> list[Held]:
        held, self.held = self.held, []
        return held


SLOTS: dict[str, Slot] = {}
HELD_MAX = 20  # messages kept for one session while its question is open


def conversation_key(ctx: Any, platform: str) -> str | None:
    """The plugin, bot, conversation and thread of a run or a steering item; None without a
    conversation id (nothing is shared then)."""
    conv = getattr(ctx, "conversation", None)
    cid = getattr(conv, "conversation_id", None) if conv is not None else None
    if not cid:
        return None
    return "|".join(str(x or "") for x in (platform, getattr(conv, "bot_id", None), cid,
                                            getattr(conv, "thread_id", None)))


def key_of(ctx: Any, platform: str, base: str | None, source: str | None) -> str | None:
    """The session a run or a steering item (seen through :func:`view`) belongs to."""
    conv = conversation_key(ctx, platform)
    if conv is None:
        return None
    state_key = base or "runner"
    if normalize_source(source) in PER_PERSON:
        state_key = session_key(state_key, source, upstream_user(ctx, source)) or state_key
    return f"{conv}|{state_key}"


def enter(key: str | None) -> Slot | None:
    """The slot of ``key``, counted as used by one more run until :func:`leave`."""
    if key is None:
        return None
    slot = SLOTS.get(key)
    if slot is None:
        slot = SLOTS[key] = Slot(key)
    slot.users += 1
    return slot


def leave(slot: Slot | None) -> None:
    if slot is None:
        return
    slot.users -= 1
    if slot.users <= 0 and not slot.lock.locked() and slot.parked is None and not slot.held:
        if SLOTS.get(slot.key) is slot:
            del SLOTS[slot.key]


def release(slot: Slot | None) -> None:
    """The session is free again (its run ended, its parked question is settled)."""
    if slot is None or not slot.lock.locked():
        return
    slot.lock.release()
    if slot.users <= 0 and slot.parked is None and not slot.held and SLOTS.get(slot.key) is slot:
        del SLOTS[slot.key]


def in_conversation(conv: str | None) -> list[Slot]:
    """The slots of one conversation (its sessions), oldest first."""
    if conv is None:
        return []
    prefix = conv + "|"
    return [s for k, s in SLOTS.items() if k.startswith(prefix)]


def view(ctx: Any, item: Any) -> Any:
    """``ctx`` as the sender of a steering ``item`` would have started it: their actor, their
    conversation details and their input; the host API and everything else are the run's."""
    update = {"actor": getattr(item, "actor", None) or getattr(ctx, "actor", None),
              "conversation": getattr(item, "conversation", None) or getattr(ctx, "conversation", None)}
    source = getattr(item, "input", None)
    if source is not None:
        update["input"] = source
    copier = getattr(ctx, "model_copy", None)
    if callable(copier):
        try:
            return copier(update=update)
        except Exception:  # noqa: BLE001 - fall back to a plain copy
            pass
    out = copy.copy(ctx)
    for k, v in update.items():
        try:
            setattr(out, k, v)
        except Exception:  # noqa: BLE001
            pass
    return out


def named(name: str | None, text: str) -> str:
    """A message's text with its sender's name, for a turn that carries several people's words."""
    text = text.strip()
    who = " ".join(str(name or "").split())[:64] or "someone"
    return f"{who}: {text}" if text else f"{who}: (sent files)"
