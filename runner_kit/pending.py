"""A question a single-turn platform leaves open for a later run: Dify's Human Input form, Coze's
``requires_action``, a LangGraph (DeerFlow) interrupt.

An HTTP platform that pauses for a person ends its stream; what resuming needs (a form token, the
chat and tool-call ids) is all the adapter has to keep. So the run that asks ends, with the question
in the chat and a record in conversation state; a later run answers it: a click comes back as an
``interaction.submitted`` run (``ctx.input.interaction``), a typed reply as the next message.
:class:`PendingAction` is that flow once, for every such adapter.

The record is kept per session, under the adapter's key made exactly as the upstream conversation
id's key is (:func:`runner_kit.session.session_key`): with ``user-id-source`` ``actor`` or
``hashed`` each person has their own upstream conversation and their own open question, so
another member's message goes on in their own conversation (only an ``approvers`` member's reply
that reads as the answer to it, their own session having no question open, answers it). In a shared
session (``conversation``, ``legacy-*``) everyone meets the one question; a message from someone
who may not answer it (not the asker, not in ``approvers``) is never read as an answer: it is kept
in the record (so a restart does not lose it) and sent, with its sender's name where several people
wrote, right after the question is settled. None of these platforms is known to take a new
message in that upstream conversation before then without harm: a Coze conversation has one chat at a time and a
workflow's question node takes the next chat as its answer (Coze's error codes and workflow chat
docs); a new LangGraph run with input on an interrupted thread drops the interrupt (seen on
``langgraph dev``); Dify documents nothing either way.

- :meth:`PendingAction.ask` keeps the record and asks the chat: one interaction where the host
  renders them (buttons or one field, built by the adapter), the question as text otherwise;
- :meth:`PendingAction.resolve`, at the start of the next run, decides what this run is:

  ============================================  ===============================================
  this run                                      outcome
  ============================================  ===============================================
  a click for a question answered before        one line saying so (and who answered), run ends
  a click for no pending question (restart,     one line, the run ends
  another question)
  no question pending                           ``go_on``: the message is sent as usual (with
                                                what was kept and not yet sent, if anything)
  no question pending, an approver's reply      ``answer`` for that question (oldest first;
  that answers another member's (own sessions)  :attr:`PendingAction.foreign`)
  the question expired                          dropped; a click gets one line, a message is
                                                sent as usual after a one-line note; kept
                                                messages go with it
  a click by someone who may not answer         one-line refusal, the question stays open
  a message by someone who may not answer       kept for after the question, said in one line
  (shared session)
  an unreadable click                           one line, the question stays open
  a typed answer that is incomplete             one line naming what is missing, stays open
  (:class:`Incomplete`)
  a message that is no answer                   dropped with a one-line note, message sent
                                                (with the kept ones)
  an answer                                     ``answer``: the adapter submits it and emits
                                                :meth:`PendingAction.done` once the platform
                                                took it (so a failed submit can be retried), or
                                                before, where a retry cannot succeed; then it
                                                sends :attr:`Resolution.kept` as one ordinary
                                                message (:meth:`PendingAction.kept_input`)
                                                unless the platform asked again
  ============================================  ===============================================

Every outcome is logged (``processor.log``) naming who answered.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from . import events as ev
from . import resets, sessions
from .approvals import Gate, actor_of, approvers
from .identity import PER_PERSON, normalize_source
from .inputs import UserInput
from .logs import get_logger
from .session import session_key
from .texts import ZH, current, t
from .wire import as_float

log = get_logger("runner_kit.pending")

HOST_MAX_EXPIRY = 24 * 3600 - 120  # LangBot refuses an interaction that expires more than 24 h ahead
MIN_SHOWN_EXPIRY = 5  # an expiry closer than this is not shown on the buttons
MAX_KEPT = 10  # messages a shared session keeps while its question is open
MAX_KEPT_CHARS = 8000  # their text together (the record is one conversation state value)
MAX_ANSWERED = 10  # answered question ids remembered, so that a replayed click is told so


def unreadable(what: str) -> str:
    return t("(That answer could not be read; {what} is still open.)", "（无法识别这个回答；{what}仍在等待回答。）", what=what)


def only_who(who: str, what: str) -> str:
    return t("(Only {who} can answer {what}.)", "（只有 {who} 能回答{what}。）", who=who, what=what)


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
    # with an answer: what others wrote while the question was open, to send once the platform's
    # reply to the answer is over (:meth:`PendingAction.kept_input`), unless it asked again
    kept: list[dict[str, Any]] = field(default_factory=list)


# read_click(submission) / read_typed(text): the answer, an Incomplete, or None (not an answer)
Reader = Callable[[Any], Any]


class PendingAction:
    """The pending question of one adapter in this run's session, kept in conversation state under
    ``key`` made per session (see the module).

    ``noun`` names it in the chat ("Dify form", "Coze bot's question"); the record's ``title``
    completes it ("the Dify form “Approve the draft”")."""

    def __init__(self, env: Any, key: str, noun: str):
        self.env = env
        source = env.config.get("user-id-source")
        self.shared = normalize_source(source) not in PER_PERSON
        self.base = key
        self.key = session_key(key, source, env.user) or key
        self.noun = noun
        # this run answers another member's question (an approver, each person in their own
        # session): the platform's reply belongs to that session, so the adapter keeps none of its
        # upstream ids for this run's own session
        self.foreign = False
        self._value: Any = None  # what this run stored last (once it stored anything)
        self._stored = False
        self._answering: dict[str, Any] | None = None  # the question this run answers
        # who asked, when the platform asks about kept messages sent on someone else's run: the
        # last of their senders (None: this run's own sender)
        self._asker: tuple[str | None, str | None] | None = None
        self._rec_asker: tuple[str | None, str | None] | None = None  # who asked the open question

    # --- the record ----------------------------------------------------------------------------

    def _current(self) -> dict[str, Any]:
        value = self._value if self._stored else (self.env.ctx.state.conversation or {}).get(self.key)
        if not isinstance(value, dict):
            return {}
        made, now = value.get("generation"), resets.generation(self.env.ctx)
        if not self._stored and made is not None and now is not None and made != now:
            # a LangBot reset deleted the record: this one was stored after it by a run from before it
            return {}
        return value

    def record(self) -> dict[str, Any] | None:
        """The open question, or None."""
        rec = self._current()
        return rec if rec.get("id") else None

    def kept(self) -> list[dict[str, Any]]:
        """Messages others wrote while the question was open, not yet sent (oldest first)."""
        return [k for k in self._current().get("kept") or []
                if isinstance(k, dict) and isinstance(k.get("text"), str)]

    def _answered(self) -> list[dict[str, Any]]:
        return [a for a in self._current().get("answered") or [] if isinstance(a, dict) and a.get("id")]

    def _put(self, value: Any) -> ev.State:
        if isinstance(value, dict) and (gen := resets.generation(self.env.ctx)) is not None:
            value = {**value, "generation": gen}  # whose conversation it is (:meth:`_current`)
        self._value, self._stored = value, True
        return ev.State(self.key, value)

    def _settled(self, kept: list[dict[str, Any]]) -> ev.State:
        """No question open any more: what stays is the ids answered lately and ``kept``."""
        answered = self._answered()
        if self._answering is not None:
            answered = [a for a in answered if a.get("id") != self._answering["id"]] + [self._answering]
        value: dict[str, Any] = {}
        if answered:
            value["answered"] = answered[-MAX_ANSWERED:]
        if kept:
            value["kept"] = kept
        return self._put(value or None)

    def done(self) -> ev.State:
        """The event that drops the record (the platform took the answer, or the question is gone).
        Messages kept meanwhile stay until :meth:`kept_sent`."""
        return self._settled(self.kept())

    def gone(self) -> ev.State:
        """Like :meth:`done`, for a question that went away without this run's answer (expired or
        answered elsewhere upstream): a later click on it is not told it was answered here."""
        self._answering = None
        return self.done()

    def adopt(self, record: dict[str, Any]) -> None:
        """Take ``record`` as the open question of this run's session (one an older version kept
        elsewhere); it is stored under :attr:`key` with the next change."""
        self._value, self._stored = {"id": f"ask-{uuid.uuid4().hex[:16]}", **record}, True

    def kept_sent(self) -> ev.State:
        """The event that drops the kept messages: emit it as they are sent."""
        return self._settled([])

    def what(self, rec: dict[str, Any]) -> str:
        """The question in words: 'the Dify form “Approve the draft”'."""
        title = str(rec.get("title") or "").strip()
        if current() == ZH:
            return f"问题“{title[:120]}”" if title else "这个问题"
        return f"the {self.noun} “{title[:120]}”" if title else f"the {self.noun}"

    # --- asking ----------------------------------------------------------------------------------

    def ask(self, record: dict[str, Any], *, text: str, expires_at: float | None,
            request: Callable[[Any, int | None], dict[str, Any] | None] | None = None) -> list[ev.Event]:
        """Keep ``record`` (with the asker and the expiry added) and ask the chat.

        ``request(caps, expires_at)`` builds the ``InteractionRequest`` (its ``interaction_id`` must
        be ``record["id"]``) or returns None when the question can only be typed; it is called only
        where the host renders interactions. ``text`` is the question in words otherwise. Messages
        still kept (the platform asked again right after an answer) stay kept for this question."""
        actor, actor_name = self._asker or actor_of(self.env.ctx)
        kept, answered = self.kept(), self._answered()
        if self._answering is not None:
            answered = [a for a in answered if a.get("id") != self._answering["id"]] + [self._answering]
        rec = {"id": f"ask-{uuid.uuid4().hex[:16]}", **record, "actor": actor, "actor_name": actor_name,
               "expires_at": expires_at, "asked_at": int(time.time())}
        if answered:
            rec["answered"] = answered[-MAX_ANSWERED:]
        if kept:
            rec["kept"] = kept
        out: list[ev.Event] = [self._put(rec)]
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
        log.info("%s: asked the chat %s as %s (%s)", self.noun, self.what(rec), rec["id"],
                 "buttons or a field" if req is not None else "text")
        return out

    # --- the next run ----------------------------------------------------------------------------

    def resolve(self, read_click: Reader, read_typed: Reader) -> Resolution:
        ctx = self.env.ctx
        submission = getattr(ctx.input, "interaction", None)
        rec = self.record()
        if rec is not None:  # whose question it is, for telling the kept messages' senders apart from them
            self._rec_asker = (_str(rec.get("actor")), _str(rec.get("actor_name")))
        if submission is not None and (rec is None or getattr(submission, "interaction_id", None) != rec["id"]):
            clicked = str(getattr(submission, "interaction_id", "") or "")
            if (other := self._foreign_click(clicked, read_click)) is not None:
                return other
            return self._stale_click(clicked)
        if rec is None:
            if submission is None and (other := self._approver_answer(read_typed)) is not None:
                return other
            return self._go_on([], self.kept())
        what = self.what(rec)
        What = what[:1].upper() + what[1:]
        actor, actor_name = actor_of(ctx)
        who = actor_name or actor or "someone"
        kept = self.kept()
        expires = as_float(rec.get("expires_at"))
        if expires is not None and time.time() >= expires:
            expired = t("({What} expired before it was answered.)", "（{What}在回答前已过期。）", What=What)
            log.info("%s: %s expired without an answer", self.noun, rec["id"])
            if submission is not None and not kept:
                return Resolution([self.done(), ev.Text(expired)])
            if submission is not None:  # nothing of this run's own to send: what was kept goes now
                return self._go_on([ev.Text(expired + "\n\n")], kept, own=False)
            return self._go_on([ev.Text(t("({What} expired before it was answered; your message was sent as a "
                                          "new one.)", "（{What}在回答前已过期；你的消息已作为新消息发送。）",
                                          What=What) + "\n\n")], kept)
        if submission is not None:
            answer = read_click(submission)
            if answer is None:
                return Resolution([ev.Text(unreadable(what))])
        else:
            inp = self.env.input
            answer = read_typed(inp.text) if inp.text and not inp.files else None
        gate = Gate(_str(rec.get("actor")), _str(rec.get("actor_name")), approvers(self.env.config))
        if not gate.may_answer(actor):
            if submission is not None:
                log.info("%s: %s tried to answer %s; only %s may", self.noun, who, rec["id"], gate.who())
                return Resolution([ev.Text(only_who(gate.who(), what))])
            if not self.shared:
                return Resolution(go_on=True)  # another person's own session: the question is not theirs
            return self._keep(rec, gate, what, kept)
        if answer is None:
            log.info("%s: %s left unanswered by a new message from %s", self.noun, rec["id"], who)
            return self._go_on([ev.Text(t("({What} was left unanswered; your new message comes next.)",
                                          "（{What}没有得到回答；接下来处理你的新消息。）", What=What) + "\n\n")], kept)
        if isinstance(answer, Incomplete):
            return Resolution([ev.Text(t("({What} is still open: {why}.)", "（{What}仍在等待回答：{why}。）",
                                         What=What, why=answer.reason))])
        log.info("%s: %s answered by %s (%s)", self.noun, rec["id"], who,
                 "a click" if submission is not None else "a typed reply")
        self._answering = {"id": rec["id"], "title": str(rec.get("title") or "")[:120], "by": who}
        return Resolution(answer=answer, record=rec, kept=kept)

    def _foreign_click(self, clicked: str, read_click: Reader) -> Resolution | None:
        """Each person in their own session: a click on another member's open question (its buttons
        are in the chat for everyone). Only the asker or an ``approvers`` member answers it; None when
        no other session of this conversation waits on that question."""
        if self.shared or not clicked:
            return None
        own, prefix = self.key, self.base + ".u"
        snapshot = self.env.ctx.state.conversation or {}
        key = next((k for k, v in snapshot.items() if k.startswith(prefix) and k != own and isinstance(v, dict)
                    and str(v.get("id") or "") == clicked), None)
        if key is None:
            return None
        self.key = key
        rec = self.record()
        if rec is None:
            self.key = own
            return None
        what = self.what(rec)
        actor, actor_name = actor_of(self.env.ctx)
        gate = Gate(_str(rec.get("actor")), _str(rec.get("actor_name")), approvers(self.env.config))
        expires = as_float(rec.get("expires_at"))
        if not gate.may_answer(actor) or (expires is not None and time.time() >= expires):
            self.key = own
            if not gate.may_answer(actor):
                return Resolution([ev.Text(only_who(gate.who(), what))])
            return None
        submission = getattr(self.env.ctx.input, "interaction", None)
        answer = read_click(submission)
        if answer is None:
            self.key = own
            return Resolution([ev.Text(unreadable(what))])
        self.foreign = True
        self._asker = (_str(rec.get("actor")), _str(rec.get("actor_name")))
        who = actor_name or actor or "someone"
        log.info("%s: %s answered by %s with a click, from their own session", self.noun, rec["id"], who)
        self._answering = {"id": rec["id"], "title": str(rec.get("title") or "")[:120], "by": who}
        return Resolution(answer=answer, record=rec, kept=self.kept())

    def _approver_answer(self, read_typed: Reader) -> Resolution | None:
        """Each person in their own session: an ``approvers`` member's typed reply that answers
        another member's open question (their own session has none) answers it, oldest question
        first; anything else of theirs goes on in their own session."""
        actor, actor_name = actor_of(self.env.ctx)
        inp = self.env.input
        if self.shared or not actor or actor not in approvers(self.env.config) or not inp.text or inp.files:
            return None
        own, prefix = self.key, self.base + ".u"
        snapshot = self.env.ctx.state.conversation or {}
        now = time.time()
        waiting = sorted((as_float(v.get("asked_at")) or 0.0, k) for k, v in snapshot.items()
                         if k.startswith(prefix) and k != own and isinstance(v, dict) and v.get("id")
                         and not ((e := as_float(v.get("expires_at"))) is not None and now >= e))
        fits: list[tuple[str, dict[str, Any], Any]] = []
        for _, key in waiting:
            self.key = key  # the readers read the record in question
            rec = self.record()
            answer = read_typed(inp.text) if rec is not None and not _takes_any_text(read_typed) else None
            if rec is not None and answer is not None and not isinstance(answer, Incomplete):
                fits.append((key, rec, answer))
        if len(fits) > 1:  # it would answer several people's questions: it answers none of them
            self.key = own
            names = ", ".join(dict.fromkeys(str(r.get("actor_name") or r.get("actor") or "someone") for _, r, _ in fits))
            log.info("%s: %s's typed reply fits the questions of %s: not taken as an answer", self.noun,
                     actor_name or actor, names)
            return Resolution([ev.Text(t("(That reply fits the open questions of {names}; answer the one you mean "
                                         "with its button.)", "（这个回复适用于 {names} 的多个待回答问题；请用对应问题的"
                                         "按钮回答你要回答的那个。）", names=names))])
        if not fits:
            self.key = own
            return None
        (self.key, rec, answer), = fits
        self.foreign = True
        self._asker = (_str(rec.get("actor")), _str(rec.get("actor_name")))  # asked again: still theirs
        log.info("%s: %s answered by %s, an approver, from their own session", self.noun, rec["id"],
                 actor_name or actor)
        self._answering = {"id": rec["id"], "title": str(rec.get("title") or "")[:120], "by": actor_name or actor}
        return Resolution(answer=answer, record=rec, kept=self.kept())

    def _stale_click(self, interaction_id: str) -> Resolution:
        """A click for a question that is not open: answered before (say by whom), or gone."""
        done = next((a for a in reversed(self._answered()) if a.get("id") == interaction_id), None)
        if done is not None:
            what = self.what(done)
            by = f" by {done['by']}" if done.get("by") else ""
            log.info("%s: a click for %s, which was already answered%s", self.noun, interaction_id, by)
            if current() == ZH:
                return Resolution([ev.Text(f"（{what}已经" + (f"由 {done['by']} " if done.get("by") else "") + "回答了。）")])
            return Resolution([ev.Text(f"({what[:1].upper() + what[1:]} was already answered{by}.)")])
        log.info("%s: a click for %s, which is not waiting", self.noun, interaction_id or "?")
        return Resolution([ev.Text(t("(That {noun} is no longer waiting for an answer. Send your message again.)",
                                     "（这个问题已不再等待回答。请重新发送你的消息。）", noun=self.noun))])

    def _keep(self, rec: dict[str, Any], gate: Gate, what: str, kept: list[dict[str, Any]]) -> Resolution:
        """A shared session's member who may not answer wrote while the question is open: never an
        answer; the message is kept in the record and sent right after the question is settled."""
        inp = self.env.input
        text = (inp.text or "").strip()
        actor, actor_name = actor_of(self.env.ctx)
        who = gate.who()
        who = t("one of {who}", "{who} 中的一位", who=who) if ", " in who else who
        if not text:
            return Resolution([ev.Text(t("(Only {who} can answer {what}; files cannot be kept until then, so send "
                                         "them again after it is answered.)", "（只有 {who} 能回答{what}；在那之前无法"
                                         "保留文件，请在回答之后重新发送。）", who=who, what=what))])
        if len(kept) >= MAX_KEPT or sum(len(k["text"]) for k in kept) + len(text) > MAX_KEPT_CHARS:
            log.info("%s: a message from %s not kept: %d are kept already", self.noun, actor_name or actor, len(kept))
            return Resolution([ev.Text(t("(Only {who} can answer {what}, and as much as can be kept until then is "
                                         "kept already; send this again after it is answered.)", "（只有 {who} 能回答"
                                         "{what}，在那之前能保留的消息已经满了；请在回答之后重新发送。）",
                                         who=who, what=what))])
        kept = [*kept, {"actor": actor, "name": actor_name or actor or "someone", "text": text,
                        "at": int(time.time())}]
        log.info("%s: kept a message from %s until %s is settled (%d kept)", self.noun, actor_name or actor,
                 rec["id"], len(kept))
        files = t(", without its files", "（不含文件）") if inp.files else ""
        return Resolution([self._put({**rec, "kept": kept}),
                           ev.Text(t("(Your message is kept until {who} answers {what}; it is sent right after{files}.)",
                                     "（你的消息已保留，等 {who} 回答{what}后马上发送{files}。）",
                                     who=who, what=what, files=files))])

    def _go_on(self, notes: list[ev.Event], kept: list[dict[str, Any]], *, own: bool = True) -> Resolution:
        """This run's message goes to the platform (``own``; else only the kept ones) after
        ``notes``; the open question, if any, is dropped, and kept messages go with it."""
        events: list[ev.Event] = []
        if notes or kept:
            events.append(self._settled([]))
        events += notes
        if kept:
            names = _names(kept)
            log.info("%s: sending %d kept message(s) from %s", self.noun, len(kept), names)
            merged = self._merged(kept, own)
            self.env.pending_own_input = self._own_input()  # a retried stream must not merge twice
            self.env.input = merged
            events.append(ev.Text((t("(Sent together with what {names} wrote while the question was open.)",
                                     "（与 {names} 在问题等待期间写的内容一起发送。）", names=names) if own else
                                   t("(Now what {names} wrote while it was open:)", "（下面是 {names} 在问题等待期间写的内容：）",
                                     names=names)) + "\n\n"))
        return Resolution(events, go_on=True)

    async def settle(self, res: Resolution, submitted: AsyncIterator[ev.Event],
                     send: Callable[[], AsyncIterator[ev.Event]]) -> AsyncIterator[ev.Event]:
        """After an answer: the platform's continuation (``submitted``, the adapter's submit), then
        what others wrote while the question was open, as one ordinary message (``send()`` with
        ``env.input`` set to them), unless the platform asked again right away (they stay kept for
        after that question). An approver answering for another member: that conversation's ids
        are not this run's session's."""
        async for item in submitted:
            if not (self.foreign and isinstance(item, ev.SessionId)):
                yield item
        if res.kept and self.record() is None:
            yield self.kept_sent()
            yield ev.Text(self.kept_note(res.kept))
            self.env.input = self.kept_input(res.kept)
            async for item in send():
                yield item

    # --- what was kept ---------------------------------------------------------------------------

    def kept_input(self, kept: list[dict[str, Any]]) -> UserInput:
        """The kept messages as one ordinary message (each line with its sender's name where more
        than one person wrote); the run's own parameters go with it."""
        return self._merged(kept, own=False)

    def with_kept(self, kept: list[dict[str, Any]]) -> UserInput:
        """This run's own message with the kept messages before it, as one message."""
        merged = self._merged(kept, own=True)
        self.env.pending_own_input = self._own_input()
        return merged

    def kept_note(self, kept: list[dict[str, Any]]) -> str:
        """The line before the reply to the kept messages."""
        return "\n\n" + t("(Now what {names} wrote while the question was open:)",
                          "（下面是 {names} 在问题等待期间写的内容：）", names=_names(kept)) + "\n\n"

    def _own_input(self) -> Any:
        """This run's own message (before kept messages were merged into ``env.input``)."""
        return getattr(self.env, "pending_own_input", None) or self.env.input

    def _merged(self, kept: list[dict[str, Any]], own: bool) -> UserInput:
        inp = self._own_input()
        if not own and kept:  # a question the platform asks about them is theirs to answer
            self._asker = (_str(kept[-1].get("actor")), _str(kept[-1].get("name")))
        parts = [(str(k.get("actor") or k.get("name")), str(k.get("name") or "someone"), k["text"]) for k in kept]
        if own:
            actor, actor_name = actor_of(self.env.ctx)
            parts.append((str(actor or actor_name), actor_name or actor or "someone", inp.text or ""))
        if len({p[0] for p in parts}) > 1:
            # each sender's name, told apart from anyone else's in it (and from the asker's), and no
            # line of one member's text can start as another member's (runner_kit.sessions.named)
            asker = self._rec_asker or (None, None)
            shown = sessions.labels([*((a, n) for a, n, _ in parts), *([asker] if asker[0] else [])])
            text = "\n".join(sessions.named(shown[(a, n)], t) for a, n, t in parts)
        else:
            text = "\n\n".join(t.strip() for _, _, t in parts if t.strip())
        return UserInput(text=text, files=list(inp.files) if own else [], params=dict(getattr(inp, "params", {}) or {}),
                         skipped=list(getattr(inp, "skipped", []) or []) if own else [])


def _names(kept: list[dict[str, Any]]) -> str:
    return ", ".join(dict.fromkeys(str(k.get("name") or "someone") for k in kept))


def _takes_any_text(read_typed: Reader) -> bool:
    """Whether the open question takes free text (any words are an answer to it): then an approver's
    message from their own session is their own message, never an answer to another member's
    question (they answer it with its button); only a reply naming a choice can be."""
    try:
        probe = read_typed(f"zq{uuid.uuid4().hex[:12]} xv")
    except Exception:  # noqa: BLE001 - a reader that cannot read it takes no free text
        return False
    return probe is not None and not isinstance(probe, Incomplete)


def _str(value: Any) -> str | None:
    return str(value) if value not in (None, "") else None
