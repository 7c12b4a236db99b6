"""What a LangBot reset leaves behind upstream, so the plugin can end it.

A member's reset (LangBot's ``!reset``) deletes the conversation-scope state of every runner bound
to the conversation and seeds ``external.conversation_id`` with a new *reset generation*
(LangBot 4.11.2 ``agent/runner/context_reset.py`` and ``persistent_state_store.py``). The plugin's
stored upstream id goes with it, so the next message starts a new upstream conversation, but the
old one lives on at the platform (its history, its memory, its storage) and nobody is told.

This module remembers, in the plugin process, the upstream id each session stored and the
generation it was stored under. A run that finds its session's id gone *and* the generation
changed knows a reset happened, and gets the old id back once (:func:`arrive`), for the adapter's
:meth:`~runner_kit.runner.Adapter.end_conversation`. What a plugin restart forgets stays upstream
(there is nowhere outside the conversation scope to keep it that the reset would not also be
blind to); the memory is bounded (:data:`KEEP` sessions, least recently used go first).

A run that started before a reset may still be going after it, and LangBot stores what it writes
then. So what a run writes belongs to the generation it started in (:meth:`Slot.writer
<runner_kit.sessions.Slot.writer>`): once a later run came in at a new generation (:func:`note`),
its conversation state is not sent to the host at all, a queued run never catches up on it, and an
id it stored anyway (nobody came in meanwhile) is known as the old one when it comes back
(:func:`arrive`); its open questions are dropped (``approvals.reset``, ``pending``'s generation).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

KEEP = 10_000
_SEEN: OrderedDict[str, tuple[str, Any]] = OrderedDict()  # session key -> (generation, upstream id)
_GENERATION: OrderedDict[str, str] = OrderedDict()  # conversation key -> its current generation
_PAST: OrderedDict[tuple[str, str], None] = OrderedDict()  # (conversation key, a generation a reset replaced)


def generation(ctx: Any) -> str | None:
    """The conversation's reset generation as the host seeded it (its own conversation id until
    the first reset, a fresh id after each), or None where the host keeps no conversation state."""
    snapshot = getattr(getattr(ctx, "state", None), "conversation", None)
    value = snapshot.get("external.conversation_id") if isinstance(snapshot, dict) else None
    return str(value) if value not in (None, "") else None


def _trim(table: OrderedDict[Any, Any]) -> None:
    while len(table) > KEEP:
        table.popitem(last=False)


def arrive(session: str | None, conversation: str | None, gen: str | None, stored: Any) -> Any | None:
    """A run of ``session`` (in ``conversation``, at generation ``gen``) starts with ``stored`` as its
    upstream id: remember it, and return the id a reset left behind (once), or None."""
    if session is None or conversation is None or gen is None:
        return None
    if _GENERATION.get(conversation) is None:
        note(conversation, gen)
    elif _GENERATION[conversation] != gen:
        return None  # a run from before a reset a later run saw (:func:`note`): nothing to learn from it
    seen = _SEEN.get(session)
    left = None
    if seen is not None and seen[0] != gen and stored in (None, seen[1]):
        # the host cleared the id and started a new generation: a reset. The same id back under the
        # new generation was stored after the reset by a run from before it (LangBot keeps that
        # write): still the conversation the reset left, so the caller starts a new one instead
        left = seen[1]
        stored = None
    if stored is not None:
        _SEEN[session] = (gen, stored)
        _SEEN.move_to_end(session)
        _trim(_SEEN)
    elif seen is not None and seen[0] != gen:
        del _SEEN[session]
    return left


def note(conversation: str | None, gen: str | None, own: str | None = None) -> bool:
    """A run of ``conversation`` came in at generation ``gen`` (before it waits for its session:
    a run from before a reset that is still going then knows its state is the reset's to drop).
    False for a generation a reset already replaced (a run whose snapshot was taken just before it
    came in late): it is not the conversation's generation again. ``own``: the conversation's own id,
    its generation until the first reset (so never newer than another)."""
    if conversation is None or gen is None:
        return False
    old = _GENERATION.get(conversation)
    if (conversation, gen) in _PAST or (old is not None and old != gen and gen == own):
        return False
    if old is not None and old != gen:
        _PAST[(conversation, old)] = None
        _trim(_PAST)
    _GENERATION[conversation] = gen
    _GENERATION.move_to_end(conversation)
    _trim(_GENERATION)
    return True


def stale(conversation: str, gen: str | None) -> bool:
    """Whether a run that started at generation ``gen`` is from before a reset a later run saw."""
    latest = _GENERATION.get(conversation)
    return gen is not None and latest is not None and latest != gen


def stored(session: str, conversation: str, value: Any, gen: str | None = None) -> None:
    """A run of ``session`` stored ``value`` as its upstream id (None or "": it dropped it); ``gen``:
    the generation that run started in (a run from before a reset may store after it)."""
    gen = gen if gen is not None else _GENERATION.get(conversation)
    if gen is None:
        return
    if value in (None, ""):
        _SEEN.pop(session, None)
        return
    _SEEN[session] = (gen, value)
    _SEEN.move_to_end(session)
    _trim(_SEEN)


def current(conversation: str) -> str | None:
    """The generation the latest run of ``conversation`` saw."""
    return _GENERATION.get(conversation)


def forget() -> None:
    """Drop everything (tests)."""
    _SEEN.clear()
    _GENERATION.clear()
    _PAST.clear()
