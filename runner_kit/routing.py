"""Which session a run or a follow-up belongs to, and when it may use it (issue 31): the group
rules of the turn loop (:func:`runner_kit.runner.drive`), kept here so the driver stays a driver.

- :func:`take` waits until a run's session (:mod:`runner_kit.sessions`) is the run's: runs of one
  session go one after another, in the order they came; a run that waits says so in one line after
  :data:`BUSY_NOTICE_AFTER`; it never waits out a question the session's agent asks (``Hold.parked``:
  the caller answers or keeps the message instead);
- :func:`find_parked` finds the parked turn a run is about (a click's question, its own session's,
  or another session's that an approver's typed choice answers); :func:`route` does the same for a
  follow-up LangBot claimed for a running run;
- :func:`held_input` / :func:`with_held` put messages kept while a question was open before a
  session's next turn, each with its sender's name (:func:`runner_kit.sessions.named`);
- :func:`gone_click` / :func:`stale_question` answer clicks and replies for questions nobody waits
  on any more.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from langbot_plugin.api.entities.builtin.runner.result import RunnerResult

from . import approvals as ap
from . import sessions
from .errors import RunnerError
from .inputs import UserInput
from .steering import text_of
from .texts import join, t

if TYPE_CHECKING:
    from langbot_plugin.api.entities.builtin.runner.context import RunnerContext

    from .results import ResultBuilder
    from .runner import RunEnv


BUSY_NOTICE_AFTER = 1.0  # seconds a run waits for its session before it says so in the chat
BUSY_NOTE = "(An earlier message of this conversation is still being answered; yours comes right after.)"
BUSY_NOTE_ZH = "（这个对话里之前的一条消息还在回答中；你的消息紧随其后。）"
PARKED_CHECK = 0.25  # seconds between looks, while a run waits for its session, at whether its agent asks


class Hold:
    """The session whose lock a run holds (set the moment it is acquired, so a cancel right after
    cannot leave it locked)."""

    __slots__ = ("parked", "slot")

    def __init__(self) -> None:
        self.slot: sessions.Slot | None = None
        self.parked = False  # take found the session's agent waiting on a question: not taken


async def take(slot: sessions.Slot | None, env: RunEnv, builder: ResultBuilder, hold: Hold) -> AsyncGenerator[RunnerResult, None]:
    """Wait until the session is this run's (runs of one session go one after another, in the
    order they came), saying so in one line when that takes a moment; then read what the run
    before stored. When the session's agent is (or, while this run waits, comes to be) waiting on
    a question, the session is not taken and ``hold.parked`` says so: the caller answers the
    question with the message or keeps the message for after it, instead of waiting it out."""
    hold.parked = False
    if slot is None:
        return
    if slot.closing is not None and not slot.closing.done() and slot.hurry is not None:
        # the agent whose question expired is stopped now: this run needs the session (the task
        # is told, never cancelled: cancelled before its first step it would never run, so never
        # stop the agent nor free the session)
        slot.hurry.set()
    if slot.parked is not None:
        hold.parked = True
        return
    if not slot.lock.locked() and not slot.waiting:
        await slot.lock.acquire()  # free, and nobody waits for it: taken at once, without waiting
    else:
        env.budget()
        notice_at = time.monotonic() + BUSY_NOTICE_AFTER
        noticed = False
        slot.waiting += 1
        task = asyncio.ensure_future(slot.lock.acquire())  # one place in the queue for the whole wait
        taken = False
        try:
            while not task.done():
                now = time.monotonic()
                if (left := env.deadline - now) <= 0:
                    raise RunnerError("upstream.timeout", "the run's time limit was reached while an earlier message "
                                      "of this conversation was still being answered")
                step = min(PARKED_CHECK, left) if noticed else min(PARKED_CHECK, left, max(notice_at - now, 0.0))
                await asyncio.wait({task}, timeout=step)
                if task.done():
                    break
                if slot.parked is not None:
                    hold.parked = True
                    return
                if not noticed and time.monotonic() >= notice_at:
                    noticed = True
                    yield builder.notice_message(t(BUSY_NOTE, BUSY_NOTE_ZH))
                    builder.next_message()
            task.result()
            taken = True
        finally:
            slot.waiting -= 1
            if not taken:  # the question came first, the time ran out, or the run was cancelled
                if not task.done():
                    task.cancel()  # a lock granted to it meanwhile is passed on by Lock.acquire itself
                elif not task.cancelled() and task.exception() is None:
                    slot.lock.release()  # granted just now, but nobody will hold it
    hold.slot = slot
    if slot.catch_up(env.ctx):
        env.refresh()


def several(ctx: Any, batch: list[Any]) -> bool:
    """Whether a turn's messages come from more than one person (their names are kept then)."""
    people = {ap.actor_of(ctx)[0]} | {ap.actor_of(item)[0] for item in batch}
    return len(people) > 1


def held_input(held: list[sessions.Held], inp: UserInput | None = None,
                who: tuple[str | None, str | None] | None = None,
                known: list[tuple[str | None, str | None]] | tuple[()] = ()) -> UserInput:
    """One turn's input from messages kept while the session's question was open, each with its
    sender's name, and then this run's own message ``inp`` (from ``who``, its sender's actor id and
    name; unnamed without a name). Two people with one display name, among them and ``known`` (the
    others this turn is about: the run's sender, the asker), are told apart by their actor ids."""
    mine = who if who is not None and who[1] else None
    shown = sessions.labels([*known, *(sessions.person(h) for h in held), *([mine] if mine else [])])
    texts = [sessions.named(shown[sessions.person(h)], h.input.text) for h in held]
    files = [f for h in held for f in h.input.files]
    skipped = [x for h in held for x in h.input.skipped]
    params: dict[str, Any] = dict(held[-1].input.params) if held else {}
    if inp is not None:
        if inp.text.strip() or inp.files:
            texts.append(sessions.named(shown[mine], inp.text) if mine else inp.text.strip())
        files += inp.files
        skipped += inp.skipped
        params = inp.params
    return UserInput(text="\n\n".join(t for t in texts if t), files=files, params=params, skipped=skipped)


def with_held(slot: sessions.Slot | None, inp: UserInput, who: tuple[str | None, str | None] | None,
               known: list[tuple[str | None, str | None]] | tuple[()] = ()) -> UserInput:
    """``inp``, after whatever was kept for this session while its question was open."""
    if slot is None or not slot.held:
        return inp
    return held_input(slot.take_held(), inp, who, known)


def find_parked(ctx: RunnerContext, platform: str, slot: sessions.Slot | None,
                 inp: UserInput) -> ap.Parked | str | None:
    """The parked turn this run is about: the one a click names (in any session of the
    conversation), the run's own session's, or one whose ``approvers`` include this sender and
    whose question this typed reply answers; a line to say instead when that reply would answer
    the questions of several sessions (which one is meant cannot be told)."""
    conv = sessions.conversation_key(ctx, platform)
    submission = getattr(ctx.input, "interaction", None)
    if submission is not None:
        wanted = getattr(submission, "interaction_id", None)
        for p in ap.waiting_in(conv):
            if p.question.id == wanted:
                return ap.claim(p.key)
        return None
    own = ap.claim(slot.key) if slot is not None else None
    if own is not None:
        return own
    actor = ap.actor_of(ctx)[0]
    if actor and inp.text and not inp.files:
        found = answerable_elsewhere(conv, actor, inp.text)
        if len(found) > 1:
            return which_question([p.gate for p in found])
        if found:
            return ap.claim(found[0].key)
    return None


def answerable_elsewhere(conv: str | None, actor: str | None, text: str, but: str | None = None) -> list[ap.Parked]:
    """The open questions of other sessions of ``conv`` (not ``but``) that ``actor``, one of their
    ``approvers``, answers with ``text`` typed from their own session: only a reply that names a
    choice, never free text (their own message to their own session is no answer to someone
    else's question)."""
    if not actor or not text:
        return []
    return [p for p in ap.waiting_in(conv) if p.key != but and actor in p.gate.listed
            and ap.parse_answer(text, replace(p.question, free_text=False)) is not None]


def already_answered(by: str | None) -> str:
    """A click or typed answer for a question someone (``by``, when known) already answered."""
    if by:
        return t("(That question was already answered by {by}.)", "（这个问题已经由 {by} 回答了。）", by=by)
    return t("(That question was already answered.)", "（这个问题已经回答过了。）")


def not_waiting() -> str:
    """A click for a question no agent waits on any more."""
    return t("(That question is no longer waiting: the agent was restarted or it expired. Send your request again.)",
             "（这个问题已不再等待回答：智能体已重启或问题已过期。请重新发送你的请求。）")


def which_question(gates: list[ap.Gate]) -> str:
    """What an approver is told when a typed answer fits the open questions of several people: an
    "allow" must never go to whichever of them was asked first (another member could have asked
    that one, just before, to catch it)."""
    askers = list(dict.fromkeys(g.asker_name or g.asker or "someone" for g in gates))
    return t("(Questions of {who} are waiting, so which one that answers cannot be told: answer with the "
             "question's buttons, or let the person who asked answer.)",
             "（{who} 的问题都在等待回答，无法判断你回答的是哪一个：请用问题的按钮回答，或让提问的人回答。）",
             who=join(askers))


def route(ctx: Any, item: Any, platform: str, base: str | None, source: str | None) -> str | None:
    """The session a follow-up LangBot claimed for this run goes to: its sender's; or, for a typed
    reply of one of ``approvers`` that answers another session's open question, that session's
    (as for a message of their own, :func:`find_parked`)."""
    item_ctx = sessions.view(ctx, item)
    key = sessions.key_of(item_ctx, platform, base, source)
    if key is None or key in ap.PARKED:
        return key
    found = answerable_elsewhere(sessions.conversation_key(item_ctx, platform), ap.actor_of(item)[0],
                                  text_of(item), but=key)
    return found[0].key if len(found) == 1 else key  # several: which one cannot be told, so none


def gone_click(ctx: RunnerContext, env: RunEnv) -> str | None:
    """A click on a question no agent waits on, other than the one recorded for this session (that
    one is :func:`stale_question`'s): what to say. None when this run is no such click."""
    submission = getattr(ctx.input, "interaction", None)
    if submission is None:
        return None
    clicked = str(getattr(submission, "interaction_id", "") or "")
    record = (ctx.state.conversation or {}).get(env.pending_key)
    if isinstance(record, dict) and str(record.get("id") or "") == clicked and (
            env.slot is None or env.slot.parked is None):
        return None  # the recorded question, whose agent is gone: stale_question says so and clears it
    by = ap.ANSWERED.get(clicked)
    if by is not None:
        return already_answered(by)
    return not_waiting()


def stale_question(ctx: RunnerContext, env: RunEnv, inp: UserInput) -> tuple[str, bool] | None:
    """A question recorded in state whose agent is gone (expired, or the plugin restarted):
    ``(what to say, whether this run ends there)``; None when there is none."""
    record = (ctx.state.conversation or {}).get(env.pending_key)
    submission = getattr(ctx.input, "interaction", None)
    if record is None:
        if submission is not None:
            by = ap.ANSWERED.get(str(getattr(submission, "interaction_id", "")))
            if by is not None:
                return already_answered(by), True
            return not_waiting(), True
        return None
    if not isinstance(record, dict):
        record = {}  # stored in another shape (another version): still a question nobody can answer now
    title = " ".join(str(record.get("title") or t("the agent's question", "智能体的问题")).split())[:300]
    try:
        expired = time.time() >= float(record.get("expires_at") or 0)
    except (TypeError, ValueError, OverflowError):
        expired = True
    why = t("nobody answered in time", "无人及时回答") if expired else t("the agent was restarted since", "智能体此后已重启")
    q = ap.Question(title=title, kind=str(record.get("kind") or "permission"), free_text=False)
    is_answer = submission is not None or ap.parse_answer(inp.text, q) is not None
    if is_answer:
        return t("(“{title}” is no longer waiting and was denied: {why}. Send your request again.)",
                 "（“{title}”已不再等待回答，并已被拒绝：{why}。请重新发送你的请求。）", title=title, why=why), True
    return t("(“{title}” is no longer waiting and was denied: {why}.)", "（“{title}”已不再等待回答，并已被拒绝：{why}。）",
             title=title, why=why), False
