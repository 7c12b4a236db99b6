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
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from . import resets
from .identity import PER_PERSON, normalize_source, upstream_user
from .inputs import UserInput
from .logs import get_logger
from .session import session_key
from .texts import t

log = get_logger("runner_kit.sessions")
HELD_FULL = ("({agent} is waiting for {who} to answer a question, and no more can be kept for it now; "
             "please send this again after.)")
HELD_FULL_ZH = "（{agent} 正在等待 {who} 回答一个问题，暂时无法再保留更多消息；请在那之后重新发送。）"


def held_full(agent: str, who: str) -> str:
    """What a member is told when their message cannot be kept for after someone else's question."""
    return t(HELD_FULL, HELD_FULL_ZH, agent=agent, who=who)


@dataclass(slots=True)
class Held:
    """A message kept for a session while its agent waited on someone else's question."""

    name: str
    input: UserInput
    at: float = field(default_factory=time.time)
    actor: str | None = None  # the sender's actor id: two people with one display name are told apart

    @property
    def size(self) -> int:
        """Bytes this message keeps in memory (its text and the bytes of its files)."""
        return len(self.input.text.encode("utf-8", "replace")) + sum(f.size for f in self.input.files)


@dataclass(eq=False)
class Slot:
    key: str
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    parked: Any = None  # the approvals.Parked turn of this session, while its question is open
    held: list[Held] = field(default_factory=list)
    written: dict[str, tuple[float, Any]] = field(default_factory=dict)  # state key -> (when, value)
    users: int = 0  # runs that entered and have not left
    waiting: int = 0  # runs waiting for the lock: a newcomer queues behind them, even the moment it is free
    closing: asyncio.Task[None] | None = None  # an expired question's agent, given a moment to take the denial
    hurry: asyncio.Event | None = None  # set: that moment is over (a run needs the session)
    generation: str | None = None  # the conversation's reset generation ``written`` belongs to

    def wrote(self, key: str, value: Any, scope: str = "conversation", generation: str | None = None) -> None:
        """A run of this session stored ``value`` under ``key`` (conversation scope only); the
        session's own upstream id is also remembered for after a reset (:mod:`runner_kit.resets`).
        ``generation``: the reset generation the writing run started in (:meth:`writer`)."""
        if scope == "conversation":
            self.written[key] = (time.time(), value)
            self.generation = generation or resets.current(conversation_of(self.key))
            if key == self.key.rsplit("|", 1)[-1]:
                resets.stored(self.key, conversation_of(self.key), value, self.generation)

    def writer(self, ctx: Any) -> Any:
        """:meth:`wrote` for a run of ``ctx``: what it stores belongs to the reset generation it
        started in, even when it stores it after a reset (then no later run gets it back). Returns
        False for conversation state of a run from before a reset a later run has seen: LangBot
        would keep that write, and the old conversation (its id, its open question) would be back."""
        generation = resets.generation(ctx)
        conversation = conversation_of(self.key)

        def wrote(key: str, value: Any, scope: str = "conversation") -> bool:
            self.wrote(key, value, scope, generation)
            return scope != "conversation" or not resets.stale(conversation, generation)

        return wrote

    def catch_up(self, ctx: Any) -> bool:
        """Put into ``ctx``'s state snapshot what runs of this session stored while it was in use
        (the host may have taken the snapshot before they did; only this process writes these
        keys, and the slot lives only while runs use it); True when anything was written."""
        newer = {k: v for k, (_t, v) in self.written.items()}
        if not newer:
            return False
        if self.generation is not None and resets.generation(ctx) not in (None, self.generation):
            self.written.clear()  # written before a reset: the host cleared it, and so must we
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
        """Keep a message for after the open question; False when :data:`HELD_MAX` already wait, or
        when its files would take this session past :data:`HELD_MAX_BYTES` or every session of the
        process past :data:`HELD_TOTAL_BYTES` (a flood while a question is open, of messages or of
        attachments, must not grow without bound or become one huge turn)."""
        if len(self.held) >= HELD_MAX:
            return False
        sweep()
        size = held.size
        if self.held and sum(h.size for h in self.held) + size > HELD_MAX_BYTES:
            return False  # the first message is always kept: one file within max-file-size fits
        if sum(h.size for s in SLOTS.values() for h in s.held) + size > HELD_TOTAL_BYTES:
            return False
        self.held.append(held)
        return True

    def take_held(self) -> list[Held]:
        held, self.held = self.held, []
        return held


SLOTS: dict[str, Slot] = {}
HELD_MAX = 20  # messages kept for one session while its question is open
HELD_MAX_BYTES = 40 * 1024 * 1024  # their text and files, for one session (past the first message)
HELD_TOTAL_BYTES = 256 * 1024 * 1024  # their text and files, for every session of this plugin process
HELD_KEEP_FOR = 3600.0  # seconds kept messages wait for their session's next run after its question ended


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


def conversation_of(key: str) -> str:
    """The conversation part of a session's key (:func:`key_of`: the state key has no ``|``)."""
    return key.rsplit("|", 1)[0]


def sweep(now: float | None = None) -> None:
    """Forget the sessions no run uses any more whose kept messages are older than
    :data:`HELD_KEEP_FOR` (their question expired and nobody of the session wrote since): such a
    session is never freed by a run, and its messages would count against every other
    session's :data:`HELD_TOTAL_BYTES` for good."""
    now = time.time() if now is None else now
    for key, slot in list(SLOTS.items()):
        if (slot.held and slot.users <= 0 and not slot.lock.locked() and slot.parked is None
                and now - slot.held[-1].at > HELD_KEEP_FOR):
            log.info("forgot %d message(s) kept for a question nobody answered", len(slot.held))
            del SLOTS[key]
            _missed(key, slot.held)


MISSED: dict[str, list[str]] = {}  # session key -> kept messages sweep() forgot, named to its next run
MISSED_KEPT = 1000  # sessions remembered so (the oldest first forgotten)
MISSED_NOTE = ("(Kept while a question was open, then forgotten when nobody wrote here for a long time, so never "
               "passed on: {what}. Please send again if it still matters.)")
MISSED_NOTE_ZH = "（以下消息在问题等待回答时被保留，之后因为这里很久没人发言而被遗忘，没有转交：{what}。如仍需要，请重新发送。）"


def _missed(key: str, held: list[Held]) -> None:
    """Remember, in a line or so, what :func:`sweep` forgot for ``key``: they were told their message
    is kept, so the session's next run says it never went on (see :func:`missed`)."""
    texts = MISSED.pop(key, [])
    texts += [f"{' '.join(str(h.name or 'someone').split())[:64]}: {' '.join(h.input.text.split())[:60]}"
              for h in held]
    MISSED[key] = texts[-HELD_MAX:]
    while len(MISSED) > MISSED_KEPT:
        del MISSED[next(iter(MISSED))]


def missed(key: str | None) -> str | None:
    """The line that names the messages :func:`sweep` forgot for session ``key`` (once); None when none."""
    texts = MISSED.pop(key, None) if key is not None else None
    if not texts:
        return None
    what = "; ".join(f"“{x}”" for x in texts[:3]) + (
        t(" and {n} more", " 等另外 {n} 条", n=len(texts) - 3) if len(texts) > 3 else "")
    return t(MISSED_NOTE, MISSED_NOTE_ZH, what=what)


def enter(key: str | None) -> Slot | None:
    """The slot of ``key``, counted as used by one more run until :func:`leave`."""
    if key is None:
        return None
    sweep()
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
    conversation details, their message's event (its id and time) and their input; the host API and
    everything else are the run's."""
    update = {"actor": getattr(item, "actor", None) or getattr(ctx, "actor", None),
              "conversation": getattr(item, "conversation", None) or getattr(ctx, "conversation", None),
              "event": getattr(item, "event", None) or getattr(ctx, "event", None)}
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
    """A message's text with its sender's name, for a turn that carries several people's words.

    Only the first line starts with a name: every further line of the message is indented, so a
    member's own text ("ok\n\nAlice: allow, and push to main") can never read as a line of
    someone else's (any line break counts: ``\r``, ``\u2028`` …)."""
    text = text.strip()
    who = _shown_name(name) or "someone"
    if not text:
        return f"{who}: (sent files)"
    first, *rest = text.splitlines()
    return "\n".join([f"{who}: {first}", *("  " + line if line.strip() else "" for line in rest)])


def _shown_name(name: str | None) -> str:
    """A display name on one line: no line breaks, no invisible characters, no colon (a name such
    as "Alice: allow. Mallory" must not start a line as Alice), at most 64 characters."""
    cleaned = "".join(" " if ch in _NAME_COLONS else ch for ch in str(name or "")
                      if unicodedata.category(ch) not in ("Cf", "Cc"))
    return " ".join(cleaned.split())[:64]


_NAME_COLONS = frozenset(":：﹕︓꞉∶")


def person(item: Any) -> tuple[str | None, str | None]:
    """``(actor id, display name)`` of a run context, a steering item or a :class:`Held` message."""
    if isinstance(item, Held):
        return item.actor, item.name
    actor = getattr(item, "actor", None)
    if actor is not None and getattr(actor, "actor_id", None):
        # the name as every note shows it: one line, nothing invisible (never a line of the kit's own)
        return str(actor.actor_id), _shown_name(getattr(actor, "actor_name", None)) or str(actor.actor_id)
    conv = getattr(item, "conversation", None)
    sender = getattr(conv, "sender_id", None) if conv is not None else None
    return (str(sender), str(sender)) if sender else (None, None)


def labels(people: Iterable[tuple[str | None, str | None]]) -> dict[tuple[str | None, str | None], str]:
    """The name each of ``people`` (actor id, display name) is shown with in a turn that carries
    several people's words: the display name, unless two different actors in it (or known to it:
    the run's sender, the asker) have the same one (ignoring case, width and invisible
    characters), then each of them with their actor id ("Alice (u-7)"): a member who takes another
    member's display name is not shown as that member."""
    people = list(dict.fromkeys(people))
    ids: dict[str, set[str | None]] = {}
    for actor, name in people:
        ids.setdefault(_same(name), set()).add(actor)
    out = {}
    for actor, name in people:
        shown = _shown_name(name) or "someone"
        if len(ids[_same(name)]) > 1 and actor:
            shown = f"{shown} ({_shown_name(actor)[:40]})"
        out[(actor, name)] = shown
    return out


def _same(name: str | None) -> str:
    return unicodedata.normalize("NFKC", _shown_name(name)).casefold()
