"""A question a single-turn platform leaves open for a later run: Dify's Human Input form, Coze's
``requires_action``.

An HTTP platform that pauses for a person ends its stream; what resuming needs (a form token, the
chat and tool-call ids) is all the adapter has to keep. So the run that asks ends, with the question
in the chat and a record in conversation state; a later run answers it: a click comes back as an
``interaction.submitted`` run (``ctx.input.interaction``), a typed reply as the next message.
:class:`PendingAction` is that flow once, for every such adapter:

- :meth:`PendingAction.ask` keeps the record under the adapter's state key and asks the chat: one
  interaction where the host renders them (buttons or one field, built by the adapter), the
  question as text otherwise;
- :meth:`PendingAction.resolve`, at the start of the next run, decides what this run is:

  ============================================  ===============================================
  this run                                      outcome
  ============================================  ===============================================
  a click for no pending question (restart,     one line, the run ends
  answered, another question)
  no question pending                           ``go_on``: the message is sent as usual
  the question expired                          dropped; a click gets one line, a message is
                                                sent as usual after a one-line note
  a click or an answer by someone who may not   one-line refusal, the question stays open
  answer (only the asker and ``approvers``)
  a message from someone else that is no        ``go_on``; the question stays open for its asker
  answer
  an unreadable click                           one line, the question stays open
  a typed answer that is incomplete             one line naming what is missing, stays open
  (:class:`Incomplete`)
  a message that is no answer                   dropped with a one-line note, message sent
  an answer                                     ``answer``: the adapter submits it and emits
                                                :meth:`PendingAction.done` once the platform
                                                took it (so a failed submit can be retried), or
                                                before, where a retry cannot succeed
  ============================================  ===============================================

Every outcome is logged (``processor.log``) naming who answered.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import events as ev
from .approvals import Gate, actor_of, approvers
from .logs import get_logger
from .wire import as_float

log = get_logger("runner_kit.pending")

HOST_MAX_EXPIRY = 24 * 3600 - 120  # LangBot refuses an interaction that expires more than 24 h ahead
MIN_SHOWN_EXPIRY = 5  # an expiry closer than this is not shown on the buttons


@dataclass(frozen=True, slots=True)
class Incomplete:
    """A typed reply that is meant as an answer but cannot be submitted: ``reason`` says what is
    missing (the question stays open)."""

    reason: str


@dataclass(slots=True)
class Resolution:
    """What this run is with respect to the pending question (see the module's table)."""

    events: list[ev.Event] = field(default_factory=list)  # to emit first
    go_on: bool = False  # the run's own message goes to the platform as usual
    answer: Any = None  # set: submit it (the record is :attr:`record`)
    record: dict[str, Any] | None = None


# read_click(submission) / read_typed(text): the answer, an Incomplete, or None (not an answer)
Reader = Callable[[Any], Any]


class PendingAction:
    """The pending question of one adapter, kept in conversation state under ``key``: one per
    LangBot conversation, also when each person has their own upstream conversation, so that the
    asker's question is not answered by someone else's message (they get the one-line refusal).

    ``noun`` names it in the chat ("Dify form", "Coze bot's question"); the record's ``title``
    completes it ("the Dify form “Approve the draft”")."""

    def __init__(self, env: Any, key: str, noun: str):
        self.env = env
        self.key = key
        self.noun = noun

    # --- the record ----------------------------------------------------------------------------

    def record(self) -> dict[str, Any] | None:
        rec = (self.env.ctx.state.conversation or {}).get(self.key)
        return rec if isinstance(rec, dict) and rec.get("id") else None

    def done(self) -> ev.State:
        """The event that drops the record (the platform took the answer, or the question is gone)."""
        return ev.State(self.key, None)

    def _what(self, rec: dict[str, Any]) -> str:
        title = str(rec.get("title") or "").strip()
        return f"the {self.noun} “{title[:120]}”" if title else f"the {self.noun}"

    # --- asking ----------------------------------------------------------------------------------

    def ask(self, record: dict[str, Any], *, text: str, expires_at: float | None,
            request: Callable[[Any, int | None], dict[str, Any] | None] | None = None) -> list[ev.Event]:
        """Keep ``record`` (with the asker and the expiry added) and ask the chat.

        ``request(caps, expires_at)`` builds the ``InteractionRequest`` (its ``interaction_id`` must
        be ``record["id"]``) or returns None when the question can only be typed; it is called only
        where the host renders interactions. ``text`` is the question in words otherwise."""
        actor, actor_name = actor_of(self.env.ctx)
        rec = {"id": f"ask-{uuid.uuid4().hex[:16]}", **record, "actor": actor, "actor_name": actor_name,
               "expires_at": expires_at}
        out: list[ev.Event] = [ev.State(self.key, rec)]
        caps = getattr(self.env.ctx.delivery, "interactions", None)
        req = None
        if caps is not None and request is not None:
            now = time.time()
            shown = min(expires_at, now + HOST_MAX_EXPIRY) if expires_at is not None else None
            req = request(caps, int(shown) if shown is not None and shown > now + MIN_SHOWN_EXPIRY else None)
        if req is not None:
            req["interaction_id"] = rec["id"]
            out.append(ev.Interaction(req))
            out.append(ev.NoReply())  # the request is the message when nothing streamed before it
        else:
            out.append(ev.Text(text))
        log.info("%s: asked the chat %s as %s (%s)", self.noun, self._what(rec), rec["id"],
                 "buttons or a field" if req is not None else "text")
        return out

    # --- the next run ----------------------------------------------------------------------------

    def resolve(self, read_click: Reader, read_typed: Reader) -> Resolution:
        ctx = self.env.ctx
        submission = getattr(ctx.input, "interaction", None)
        rec = self.record()
        if submission is not None and (rec is None or getattr(submission, "interaction_id", None) != rec["id"]):
            log.info("%s: a click for %s, which is not waiting", self.noun, getattr(submission, "interaction_id", "?"))
            return Resolution([ev.Text(f"(That {self.noun} is no longer waiting for an answer. "
                                       "Send your message again.)")])
        if rec is None:
            return Resolution(go_on=True)
        what = self._what(rec)
        What = what[:1].upper() + what[1:]
        actor, actor_name = actor_of(ctx)
        who = actor_name or actor or "someone"
        expires = as_float(rec.get("expires_at"))
        if expires is not None and time.time() >= expires:
            log.info("%s: %s expired without an answer", self.noun, rec["id"])
            if submission is not None:
                return Resolution([self.done(), ev.Text(f"({What} expired before it was answered.)")])
            return Resolution([self.done(), ev.Text(f"({What} expired before it was answered; your message "
                                                    "was sent as a new one.)\n\n")], go_on=True)
        if submission is not None:
            answer = read_click(submission)
            if answer is None:
                return Resolution([ev.Text(f"(That answer could not be read; {what} is still open.)")])
        else:
            inp = self.env.input
            answer = read_typed(inp.text) if inp.text and not inp.files else None
        gate = Gate(_str(rec.get("actor")), _str(rec.get("actor_name")), approvers(self.env.config))
        if not gate.may_answer(actor):
            if answer is None:
                return Resolution(go_on=True)  # someone else's message: the question stays open for its asker
            log.info("%s: %s tried to answer %s; only %s may", self.noun, who, rec["id"], gate.who())
            return Resolution([ev.Text(f"(Only {gate.who()} can answer {what}.)")])
        if answer is None:
            log.info("%s: %s left unanswered by a new message from %s", self.noun, rec["id"], who)
            return Resolution([self.done(), ev.Text(f"({What} was left unanswered; your new message "
                                                    "comes next.)\n\n")], go_on=True)
        if isinstance(answer, Incomplete):
            return Resolution([ev.Text(f"({What} is still open: {answer.reason}.)")])
        log.info("%s: %s answered by %s (%s)", self.noun, rec["id"], who,
                 "a click" if submission is not None else "a typed reply")
        return Resolution(answer=answer, record=rec)


def _str(value: Any) -> str | None:
    return str(value) if value not in (None, "") else None
