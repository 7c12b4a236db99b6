"""Questions a coding agent asks the chat (approvals, and questions to the user), and their answers.

An adapter in ``permission-mode: ask`` calls ``await env.ask(Question(...))`` from wherever its agent
asks (an ACP ``session/request_permission``, a Codex approval request, a Claude Code
``can_use_tool`` control request) and gets a :class:`Decision`. The kit does the rest (see
``runner.py``):

- a request already allowed "for this session" is allowed at once: "for this session" covers exactly
  what the question's button said — this command (or the agent's own prefix rule, for simple
  commands only), this file — never a kind of request (:mod:`runner_kit.command_scope`); kept in
  conversation state per agent session, so a reset or a new session forgets it;
- otherwise the chat gets one short question. Where the host renders interactions
  (``ctx.delivery.interactions``) it carries buttons and the run ends at once, leaving the agent
  process waiting in this plugin process (:data:`PARKED`): the click comes back as a new run
  (``interaction.submitted``), which attaches to it, answers and streams the rest of the turn. Where
  it does not, the run stays open and takes a typed reply through ``steering_pull``; when the run's
  own deadline comes first, the question is parked the same way and a typed reply in a later run
  answers it;
- only the person whose message started the turn, or one of ``approvers``, may answer; no answer
  within ``approval-timeout`` is a denial, said in the chat and told to the agent.

LangBot never lets a button reach the run that asked (interactions.md §2): that is why a waiting
agent is parked rather than the run kept open.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from . import command_scope as cs
from . import events as ev
from . import sessions
from .channel import Channel
from .config import listed
from .logs import get_logger
from .texts import current, t

log = get_logger("runner_kit.approvals")

DEFAULT_APPROVAL_TIMEOUT = 600.0
PARK_GRACE = 5.0  # after a parked question timed out: how long the agent gets to take the denial
MEMORY_SUFFIX = ".approvals"  # conversation state: {"session": <agent session>, "allow": [keys], "v": 2}
MEMORY_VERSION = 2  # older values (scopes such as "shell:git", "edit") are not read: nothing is remembered
# "allow for this session" keeps at most this many keys and this much JSON per agent session (LangBot
# rejects a state value over 256 KiB, and every remembered key is checked on every request): past
# either, the oldest approvals are forgotten first and asked again
MEMORY_MAX_KEYS = 200
MEMORY_MAX_BYTES = 64 * 1024
PENDING_SUFFIX = ".pending-question"  # conversation state: the question a parked agent waits on

MAX_CHOICES = 20  # a question with up to this many options is asked with one button an option
ALLOW, ALWAYS, DENY, ANSWER = "allow", "always", "deny", "answer"
ACTIONS = {ALLOW: "Allow once", ALWAYS: "Allow for this session", DENY: "Deny"}
ACTIONS_ZH = {ALLOW: "允许一次", ALWAYS: "本次会话内允许", DENY: "拒绝"}

_WORDS: dict[str, tuple[str, ...]] = {
    ALWAYS: ("always", "allow always", "always allow", "allow for session", "allow for this session",
             "总是允许", "始终允许", "一直允许", "本次会话允许", "本次会话内允许", "会话内允许", "总是", "始终"),
    ALLOW: ("allow", "allow once", "allowed", "yes", "y", "yep", "yeah", "ok", "okay", "sure", "approve",
            "approved", "go ahead", "go for it", "do it", "proceed", "continue", "lgtm",
            "允许", "同意", "批准", "可以", "好", "好的", "是", "是的", "允许一次", "行", "继续", "执行", "确认"),
    DENY: ("deny", "denied", "reject", "rejected", "refuse", "no", "n", "nope", "nah", "no way", "no thanks",
           "no thank you", "not now", "not yet", "don't", "do not",
           "拒绝", "不", "不行", "不允许", "不要", "否", "别"),
}
# said after an allow word, these keep it an allow ("yes, go ahead", "好的，执行吧"); alone they answer nothing
_ASSENT_TAIL = ("please", "pls", "thanks", "thank you", "thx", "go", "run it", "no problem", "no worries",
                "请", "吧", "谢谢", "执行吧", "继续吧", "去吧", "做吧", "跑吧", "可以的", "没问题")
# deny words that start ordinary English phrases ("no problem", "no idea what this does", "nah it's
# fine"): a reason may follow them only after a mark (", : ; . ! -"), not after a bare space
_DENY_BEFORE_MARK = ("no", "n", "nope", "nah", "no way", "no thanks", "no thank you", "not now", "not yet",
                     "don't", "do not")
_ASSENT_MAX = 80  # a longer reply is a message, not a yes
_TRAILING = " \t\r\n.!?。！？~"
_SEPARATORS = " \t\r\n:：,，;；-—。.!！、"
_MARKS = ":：,，;；-—。.!！、"  # the separators that are not spaces


def _norm(text: str) -> str:
    return " ".join(text.strip().lower().split()).strip(_TRAILING)


@dataclass(frozen=True, slots=True)
class Option:
    value: str
    label: str
    description: str | None = None


@dataclass(slots=True)
class Question:
    """What the agent asks.

    ``kind`` ``permission``: may it do ``title`` (one line: the command, or the file and what
    changes); ``scope`` is what "allow for this session" remembers and ``request`` what is asked
    for (when it differs), each one or several keys of :mod:`runner_kit.command_scope`
    (``cmd:git status``, ``cmd-prefix:git status``, ``edit:src/app.py``); no scope: it can only be
    allowed once. ``kind`` ``question``: the agent asks the user ``title``, with ``options`` to pick
    from and/or a free-text answer."""

    title: str
    detail: str = ""
    kind: str = "permission"
    scope: str | tuple[str, ...] = ""
    request: str | tuple[str, ...] | None = None  # None: the same as scope
    options: list[Option] = field(default_factory=list)
    free_text: bool = True
    id: str = field(default_factory=lambda: f"ask-{uuid.uuid4().hex[:16]}")

    def remembers(self) -> tuple[str, ...]:
        """The keys "allow for this session" keeps; () when they cannot be kept (an unknown scope,
        a file outside the workspace)."""
        keys = _keys(self.scope)
        return keys if keys and all(cs.valid(k) for k in keys) else ()

    def asks(self) -> tuple[str, ...]:
        """The keys this request needs covered to be allowed without asking."""
        return _keys(self.scope if self.request is None else self.request)

    @property
    def session_label(self) -> str | None:
        """The "allow for this session" button, saying what it covers; None when there is none."""
        keys = self.remembers()
        if not keys:
            return None
        return cs.label(*keys, language=current())


def _keys(value: str | tuple[str, ...] | list[str] | None) -> tuple[str, ...]:
    """One key or several; an empty one in several stays (it is no key, so they never all match)."""
    if value is None or isinstance(value, str):
        return (value,) if value else ()
    return tuple(k if isinstance(k, str) else "" for k in value)


@dataclass(slots=True)
class Decision:
    """The answer: ``allow`` (``always``: for the rest of the agent session) or not, with the deny
    ``reason``; for a question, ``answer`` is the chosen option's value or the typed text."""

    allow: bool
    always: bool = False
    reason: str | None = None
    answer: str | None = None
    by: str | None = None
    timed_out: bool = False
    remembered: bool = False

    @property
    def word(self) -> str:
        if self.answer is not None:
            return ANSWER
        return ALWAYS if self.always else ALLOW if self.allow else DENY


def parse_answer(text: str, question: Question) -> Decision | None:
    """A typed reply read as an answer to ``question``; None when it is not one.

    Question: an option's number, value or label; any other text when ``free_text``.

    Permission, read as people write in a group chat (English and Chinese, any case, trailing
    ``.!?。！？~`` ignored); anything else is None, so the message goes on as an ordinary one:

    - allow (``always``: for this session, when the question can be remembered): an allow word
      (:data:`_WORDS`) alone, or followed only by more allow words and courtesies
      (:data:`_ASSENT_TAIL`), with or without separators: "yes, go ahead", "ok 继续", "好的，执行吧".
      Anything else after it ("ok but run the tests first", "好的问题") is no answer;
    - deny: a deny word alone ("no.", "No!", "n", "nope", "不行"), a run of them ("no no no"), or a
      deny word followed by a separator and a reason ("NO, use git rm instead", "拒绝：先跑测试",
      "deny too risky"). A deny word is never a prefix of a longer word ("nothing", "note", "不错",
      "不过…", "不客气" are no answers). After the English interjections of
      :data:`_DENY_BEFORE_MARK` ("no", "nah" …) a space alone is no separator, so "no problem!",
      "no worries, go ahead" and "no idea what this does" are no answers; a mark is
      ("no, use git rm instead")."""
    raw = (text or "").strip()
    if not raw:
        return None
    low = _norm(raw)
    if question.kind == "question":
        picked = pick(raw, question.options)
        if picked is not None:
            return Decision(allow=True, answer=picked)
        if question.free_text:
            return Decision(allow=True, answer=raw)
        return None
    if low in _WORDS[DENY] or _only(low, _WORDS[DENY], _WORDS[DENY]) is not None:
        return Decision(allow=False)
    said = _only(low, _WORDS[ALWAYS] + _WORDS[ALLOW], _WORDS[ALWAYS] + _WORDS[ALLOW] + _ASSENT_TAIL)
    if said is not None:  # "always" on what cannot be remembered is an allow once
        return Decision(allow=True, always=any(w in _WORDS[ALWAYS] for w in said) and bool(question.remembers()))
    for word, pattern in _DENY_PATTERNS:
        m = pattern.match(raw)
        if m is None:
            continue
        rest = raw[m.end():]
        if not _separated(rest, strict=word in _DENY_BEFORE_MARK):
            continue  # "nothing" is not "no", "不错" is not "不"; "no problem" is no answer
        reason = rest.strip(_SEPARATORS)
        return Decision(allow=False, reason=reason or None)
    return None


def _only(low: str, first: tuple[str, ...], then: tuple[str, ...]) -> list[str] | None:
    """``low`` (as :func:`_norm` leaves it) cut whole into phrases, the first of ``first``, the rest
    of ``then``, with separators or nothing between them (an English word needs a separator or a
    non-ASCII character after it: "okay" is not "ok" + "ay"); the phrases, or None."""
    if not low or len(low) > _ASSENT_MAX:
        return None
    phrases = sorted(set(first) | set(then), key=len, reverse=True)

    def cut(i: int, allowed: tuple[str, ...], started: bool) -> list[str] | None:
        while i < len(low) and low[i] in _SEPARATORS:
            i += 1
        if i == len(low):
            return [] if started else None  # at least one phrase
        for p in phrases:
            if p not in allowed or not low.startswith(p, i):
                continue
            j = i + len(p)
            if p[-1].isascii() and p[-1].isalnum() and j < len(low) and low[j].isascii() and low[j].isalnum():
                continue
            if (rest := cut(j, then, True)) is not None:
                return [p, *rest]
        return None

    return cut(0, first, False)


def _separated(rest: str, *, strict: bool) -> bool:
    """Whether what follows a deny word starts with a separator (a reason may follow): a space or a
    mark, or with ``strict`` a mark only (spaces before it allowed). A dash or a dot directly before a
    letter or digit joins words ("no-one", "n.b.") and separates nothing."""
    if strict:
        rest = rest.lstrip()
    if not rest:
        return True
    if rest[0] in "-." and rest[1:2].isalnum():
        return False
    return rest[0] in _MARKS or (not strict and rest[0].isspace())


def _deny_pattern(word: str) -> re.Pattern[str]:
    """``word`` at the start of a reply: any case, any run of spaces inside, either apostrophe."""
    body = r"\s+".join(re.escape(w).replace("'", "['\u2019]") for w in word.split())
    return re.compile(body, re.IGNORECASE)


_DENY_PATTERNS = [(w, _deny_pattern(w)) for w in sorted(_WORDS[DENY], key=len, reverse=True)]


def denial_note(title: str, decision: Decision) -> str | None:
    """What an agent whose protocol has no field for a deny reason (Codex's ``decline``, ACP's
    outcome) is told after its turn (``RunEnv.tell_agent``) when a person denied ``title`` with a
    reason; None for an allow, a denial without a reason, a timeout, or one nobody typed (the plugin
    shutting down)."""
    if decision.allow or not decision.reason or decision.timed_out or not decision.by:
        return None
    return f"{decision.by} denied “{title}”: {decision.reason}"


def from_submission(submission: Any, question: Question, *, field: str = "answer") -> Decision | None:
    """A button or form answer (``ctx.input.interaction``) to ``question``; ``field`` is the id of
    the text field it was asked with (see :func:`interaction_request`), ``answer`` is also read."""
    action = getattr(submission, "action_id", None)
    values = getattr(submission, "values", None) or {}
    if question.kind == "question":
        if action and action.startswith("opt-") and action[4:].isdigit():
            i = int(action[4:])
            if 0 <= i < len(question.options):
                return Decision(allow=True, answer=question.options[i].value)
        if 0 < len(question.options) <= MAX_CHOICES:
            return None  # asked with buttons: only a button answers it
        value = values.get(field, values.get("answer"))
        if isinstance(value, (str, int, float)) and str(value).strip():
            return Decision(allow=True, answer=str(value).strip())
        return None
    if action in (ALLOW, ALWAYS, DENY):
        return Decision(allow=action != DENY, always=action == ALWAYS and bool(question.remembers()))
    return None


# --- what the chat sees ------------------------------------------------------------------------


def question_text(agent: str, q: Question, *, who: str | None = None) -> str:
    """The question as one short message, with how to answer it in words."""
    lines = []
    if q.kind == "question":
        lines.append(t("❓ {agent} asks: {title}", "❓ {agent} 提问：{title}", agent=agent, title=q.title))
        if q.detail:
            lines.append(q.detail)
        for i, opt in enumerate(q.options, 1):
            lines.append(f"{i}. {opt.label}" + (f" — {opt.description}" if opt.description else ""))
        how = "Reply with a number" if q.options else "Reply with your answer"
        if q.options and q.free_text:
            how += " or your own answer"
        lines.append(how + ". / 请回复" + ("编号" if q.options else "你的答案") + "。")
    else:
        lines.append(t("🔐 {agent} wants to {title}", "🔐 {agent} 请求许可：{title}", agent=agent, title=shown(q.title)))
        if q.detail:
            lines.append(shown(q.detail))
        covered = cs.what(q.remembers())
        if covered is not None:
            lines.append(f"Reply allow (once), always (allow {covered} for this session) or deny (a reason "
                         f"may follow). / 回复 允许、总是允许（本次会话内允许{cs.what(q.remembers(), 'zh')}）或 拒绝（可附理由）。")
        else:
            lines.append("Reply allow (once) or deny (a reason may follow); this cannot be allowed for the "
                         "whole session. / 回复 允许 或 拒绝（可附理由）。")
    if who:
        lines.append(t("(Only {who} can answer.)", "（只有 {who} 能回答。）", who=who))
    return "\n".join(lines)


def shown(text: str) -> str:
    """A permission question's command or path as the chat shows it: every character that does not
    read as itself (zero-width, direction controls, odd spaces) written out (``<U+202E>``)."""
    return cs.visible(text)


def interaction_request(agent: str, q: Question, expires_at: float | None, caps: Any, *,
                        field: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``InteractionRequest`` for ``q``: buttons (actions only), or one text field; every
    platform renders one of the two (interactions.md §3). ``field`` is that one field when the
    platform's own (its id, label, type, default) should be kept; by default a textarea ``answer``."""
    request: dict[str, Any] = {
        "interaction_id": q.id,
        "title": (t("{agent} asks", "{agent} 提问", agent=agent) if q.kind == "question" else
                  t("{agent} asks for permission", "{agent} 请求许可", agent=agent))[:1000],
        "description": (shown(q.title) + (f"\n{shown(q.detail)}" if q.detail else "") if q.kind != "question" else
                        q.title + (f"\n{q.detail}" if q.detail else ""))[:10000],
        "fallback_text": question_text(agent, q)[:20000],
    }
    if expires_at is not None:
        request["expires_at"] = int(expires_at)
    styles = set(getattr(caps, "action_styles", None) or ["default", "primary", "danger"])

    def style(s: str) -> str:
        return s if s in styles else "default"

    if q.kind != "question":
        request["kind"] = "confirmation"
        request["actions"] = [{"id": ALLOW, "label": t(ACTIONS[ALLOW], ACTIONS_ZH[ALLOW]), "style": style("primary")}]
        if (session := q.session_label) is not None:  # says what it covers; none if nothing can be kept
            request["actions"].append({"id": ALWAYS, "label": session, "style": style("default")})
        request["actions"].append({"id": DENY, "label": t(ACTIONS[DENY], ACTIONS_ZH[DENY]), "style": style("danger")})
    elif q.options and len(q.options) <= MAX_CHOICES:
        request["kind"] = "choice"
        request["actions"] = [{"id": f"opt-{i}", "label": opt.label[:200] or opt.value[:200], "style": "default"}
                              for i, opt in enumerate(q.options)]
    else:
        request["kind"] = "form"
        request["fields"] = [field or {"id": "answer", "label": t("Answer", "回答"), "type": "textarea", "required": True}]
    return request


# --- who may answer, how long ------------------------------------------------------------------


def approvers(config: Any) -> list[str]:
    return listed(config.get("approvers") if config is not None else None)


def approval_timeout(config: Any) -> float:
    value = config.get("approval-timeout") if config is not None else None
    try:
        t = float(value) if value not in (None, "") else DEFAULT_APPROVAL_TIMEOUT
    except (TypeError, ValueError):
        t = DEFAULT_APPROVAL_TIMEOUT
    return t if t > 0 else DEFAULT_APPROVAL_TIMEOUT


def actor_of(item: Any) -> tuple[str | None, str | None]:
    """``(actor id, display name)`` of a run context or a steering item (:func:`runner_kit.sessions.person`)."""
    return sessions.person(item)


@dataclass(slots=True)
class Gate:
    """Who may answer this question: the asker, or anyone listed in ``approvers``."""

    asker: str | None
    asker_name: str | None
    listed: list[str]

    def may_answer(self, actor: str | None) -> bool:
        if self.listed:
            return actor in self.listed or (actor is not None and actor == self.asker)
        return self.asker is None or actor == self.asker

    def who(self) -> str:
        names = [self.asker_name or self.asker or "the person who asked"]
        names += [a for a in self.listed if a != self.asker]
        return ", ".join(n for n in names if n)


# --- the session memory ------------------------------------------------------------------------


class Memory:
    """What was allowed "for this session", per agent session (conversation state): scope keys of
    :mod:`runner_kit.command_scope`, oldest approval first. A request is allowed without asking only
    when each key it asks for is covered (the same command, file or call; a simple command under a
    prefix rule). A value stored by an older version, or a key this version does not know, allows
    nothing. At most :data:`MEMORY_MAX_KEYS` keys and :data:`MEMORY_MAX_BYTES` are kept: a long
    conversation forgets its oldest approvals (they are asked again), never the newest."""

    def __init__(self, key: str, stored: Any):
        self.key = key
        self.session: str | None = None
        self.scopes: dict[str, None] = {}  # an ordered set: oldest approval first
        if (isinstance(stored, dict) and stored.get("v") == MEMORY_VERSION
                and isinstance(stored.get("allow"), list)):
            self.session = stored.get("session") if isinstance(stored.get("session"), str) else None
            kept = [s for s in stored["allow"][-MEMORY_MAX_KEYS:] if isinstance(s, str) and cs.valid(s)]
            self.scopes = dict.fromkeys(kept)
            self._trim()

    def allows(self, request: Question | str, session: str | None) -> bool:
        """Whether ``request`` (a question, or one key) is covered for ``session``."""
        asked = request.asks() if isinstance(request, Question) else _keys(request)
        if not asked or session is None or session != self.session:
            return False
        return all(any(cs.covers(kept, want) for kept in self.scopes) for want in asked)

    def remember(self, scope: Question | str, session: str | None) -> dict[str, Any] | None:
        """Keep what "allow for this session" on ``scope`` (a question, or one key) covers; the
        value to store (None when nothing changed or nothing can be kept)."""
        keys = scope.remembers() if isinstance(scope, Question) else _keys(scope)
        if not keys or not all(cs.valid(k) for k in keys) or session is None:
            return None
        if session != self.session:
            self.session, self.scopes = session, {}
        if all(k in self.scopes for k in keys):
            return None
        for k in keys:
            self.scopes.pop(k, None)
            self.scopes[k] = None  # the newest approval goes last
        self._trim()
        return self.value()

    def value(self) -> dict[str, Any]:
        """What is stored in conversation state."""
        return {"session": self.session, "allow": list(self.scopes), "v": MEMORY_VERSION}

    def _trim(self) -> None:
        """Forget the oldest approvals until the stored value is within the bounds."""
        while len(self.scopes) > MEMORY_MAX_KEYS:
            del self.scopes[next(iter(self.scopes))]
        size = len(json.dumps(self.value(), ensure_ascii=False).encode())
        while self.scopes and size > MEMORY_MAX_BYTES:
            oldest = next(iter(self.scopes))
            del self.scopes[oldest]
            size -= len(json.dumps(oldest, ensure_ascii=False).encode()) + 2  # the key and ", "


# --- parked agents ------------------------------------------------------------------------------


@dataclass(eq=False)
class Parked:
    """An agent turn waiting in this process for the answer to ``question``."""

    key: str
    question: Question
    future: asyncio.Future[Decision]
    adapter: Any
    task: asyncio.Task[None]
    queue: Channel[Any]
    gate: Gate
    expires_at: float
    agent: str
    index: int = 0
    timer: asyncio.TimerHandle | None = None
    closing: asyncio.Task[None] | None = None
    hurry: asyncio.Event = field(default_factory=asyncio.Event)
    timed_out: bool = False  # nobody answered in time: what the agent did next goes to the session's next run  # set: end the grace now (a run needs the session)
    slot: Any = None  # the sessions.Slot it keeps busy until answered or stopped
    generation: str | None = None  # the conversation's reset generation it was asked in (runner_kit.resets)


ANSWERED: dict[str, str] = {}  # question id -> who answered it ("" unknown), the latest ANSWERED_KEPT
ANSWERED_KEPT = 1000


def answered(question_id: str, by: str | None) -> None:
    """Remember that a question was answered (``by`` None: it timed out), so a replayed click on it
    says so instead of "expired"."""
    if by is None:
        return
    ANSWERED.pop(question_id, None)
    ANSWERED[question_id] = by
    while len(ANSWERED) > ANSWERED_KEPT:
        del ANSWERED[next(iter(ANSWERED))]


PARKED: dict[str, Parked] = {}  # by session (sessions.key_of): one open question per agent session
_CLOSING: set[Parked] = set()  # expired, in their grace period before the agent is stopped


def conversation_key(ctx: Any, platform: str) -> str | None:
    """The plugin, bot, conversation and thread (see :func:`runner_kit.sessions.conversation_key`)."""
    return sessions.conversation_key(ctx, platform)


def park(p: Parked) -> None:
    """Keep ``p`` until it is answered or ``p.expires_at``; then it is denied and closed. Its
    session stays busy (its slot's lock held) until then."""
    old = PARKED.pop(p.key, None)
    if old is not None:
        _expire(old, "a newer question replaced it")
    PARKED[p.key] = p
    if p.slot is not None:
        p.slot.parked = p
    loop = asyncio.get_running_loop()
    p.timer = loop.call_at(loop.time() + max(p.expires_at - time.time(), 0.0), _expire, p, None)


def claim(key: str | None) -> Parked | None:
    """Take the parked turn of this session (its expiry is cancelled); the run that takes it owns
    the session from here on (it releases the slot when it ends)."""
    if key is None:
        return None
    p = PARKED.pop(key, None)
    if p is not None:
        if p.timer is not None:
            p.timer.cancel()
        if p.slot is not None and p.slot.parked is p:
            p.slot.parked = None
    return p


def waiting_in(conv: str | None) -> list[Parked]:
    """The parked turns of one conversation (every session's open question), oldest first."""
    if conv is None:
        return []
    prefix = conv + "|"
    return [p for k, p in PARKED.items() if k.startswith(prefix)]


def reset(conv: str | None, generation: str | None) -> None:
    """A LangBot reset of ``conv`` (a run came in at a new ``generation``): the questions asked
    before it are denied and their agents stopped, like an expiry but without a word in the chat, and
    what was kept for after them goes too (the reset hid it): nobody waits on the old conversation."""
    if generation is None:
        return
    for p in waiting_in(conv):
        if p.generation is not None and p.generation != generation:
            if p.slot is not None:
                p.slot.held.clear()
            _expire(p, "the conversation was reset")


def stop(key: str | None, by: str) -> bool:
    """A /stop for session ``key`` whose agent waits on a question in no run: the question is
    denied and the agent stopped now (no grace); False when none waits."""
    p = PARKED.get(key) if key is not None else None
    if p is None:
        return False
    _expire(p, f"stopped in the chat by {by}")
    p.hurry.set()
    return True


def put_back(p: Parked) -> None:
    """Leave ``p`` waiting (the run that looked at it did not answer it)."""
    PARKED[p.key] = p
    if p.slot is not None:
        p.slot.parked = p
    loop = asyncio.get_running_loop()
    p.timer = loop.call_at(loop.time() + max(p.expires_at - time.time(), 0.0), _expire, p, None)


def _expire(p: Parked, why: str | None) -> None:
    if PARKED.get(p.key) is p:
        del PARKED[p.key]
    if p.slot is not None and p.slot.parked is p:
        p.slot.parked = None
    if not p.future.done():
        p.future.set_result(Decision(allow=False, timed_out=why is None,
                                     reason=why or "nobody answered in time"))
    log.info("%s: question %s %s: denied", p.agent, p.question.id, "expired" if why is None else why)
    p.timed_out = why is None
    p.closing = asyncio.ensure_future(_close_parked(p))
    if p.slot is not None:
        p.slot.closing = p.closing  # a next run of the session cuts the grace short (p.hurry)
        p.slot.hurry = p.hurry
    _CLOSING.add(p)
    p.closing.add_done_callback(lambda _t: _CLOSING.discard(p))


async def _close_parked(p: Parked) -> None:
    """Give the agent a moment to take the denial into its session, then stop it."""
    try:
        await asyncio.wait_for(p.hurry.wait(), PARK_GRACE)
    except (TimeoutError, asyncio.CancelledError):
        pass  # the grace is over, or we are being torn down: stop it now
    await _stop(p)


async def _stop(p: Parked) -> None:
    try:
        if not p.task.done():
            p.task.cancel()
        for step in (p.adapter.cancel, p.adapter.close):
            try:
                await asyncio.wait_for(step(), 5.0)
            except BaseException:  # noqa: BLE001 - best effort, nobody is waiting on this
                pass
    finally:
        if p.timed_out:
            _keep_reaction(p)
        sessions.release(p.slot)  # the session is free for its next run


# what an agent did after a question of its timed out (no run was there to take it): the session's
# next run shows it and counts its usage (issue 31: "the agent's reaction and the turn's usage are
# recorded on a run"); LangBot 4.11.2 gives a plugin no way to post to a chat outside a run
REACTIONS: dict[str, tuple[float, str, str, list[Any]]] = {}  # session -> (when, agent, title, events)
REACTIONS_KEEP_FOR = 24 * 3600.0
REACTIONS_KEPT = 1000  # sessions (the oldest first forgotten)
REACTION_EVENTS = 2000  # events kept per session
_KEPT_EVENTS = (ev.Text, ev.Think, ev.ReplaceText, ev.FinalText, ev.ToolStarted, ev.ToolCompleted, ev.Attachment,
                ev.Usage, ev.SessionId, ev.Log, ev.Finish, ev.State)


def _keep_reaction(p: Parked) -> None:
    events: list[Any] = []
    while not p.queue.empty():
        item = p.queue.get_nowait()
        if isinstance(item, _KEPT_EVENTS) and len(events) < REACTION_EVENTS:
            events.append(item)
    if not events:
        return
    REACTIONS.pop(p.key, None)
    REACTIONS[p.key] = (time.time(), p.agent, p.question.title, events)
    now = time.time()
    for key in [k for k, (at, *_rest) in REACTIONS.items() if now - at > REACTIONS_KEEP_FOR]:
        del REACTIONS[key]
    while len(REACTIONS) > REACTIONS_KEPT:
        del REACTIONS[next(iter(REACTIONS))]


def reaction(key: str | None) -> tuple[str, str, list[Any]] | None:
    """``(agent, question title, events)``: what the agent of session ``key`` did after its question
    timed out, once (the session's next run takes it); None when there is nothing."""
    got = REACTIONS.pop(key, None) if key is not None else None
    if got is None or time.time() - got[0] > REACTIONS_KEEP_FOR:
        return None
    return got[1], got[2], got[3]


async def close_all() -> None:
    """Stop every parked agent, and those still in their grace period (plugin shutdown, tests)."""
    for p in list(PARKED.values()):
        claim(p.key)
        if not p.future.done():
            p.future.set_result(Decision(allow=False, reason="the plugin is shutting down"))
        await _stop(p)
    loop = asyncio.get_running_loop()
    closing = [p.closing for p in list(_CLOSING)
               if p.closing is not None and not p.closing.done() and p.closing.get_loop() is loop]
    for p in list(_CLOSING):
        p.hurry.set()  # skips the grace; each task still stops its agent (even one not started yet,
        # which a cancel would have ended before its first step)
    _CLOSING.clear()  # what is left belongs to a loop that is gone
    if closing:
        await asyncio.gather(*closing, return_exceptions=True)


# --- forms: a JSON-schema request for input (ACP and MCP elicitation) -----------------------------

DECLINE = "__decline__"
_DECLINE_WORDS = ("decline", "cancel", "拒绝", "取消")
_YES = ("yes", "y", "true", "1", "是", "对", "好")
_NO = ("no", "n", "false", "0", "否", "不")


@dataclass(slots=True)
class SchemaForm:
    """An agent's request for structured input (an object of primitive properties, as ACP's
    ``elicitation/create`` and MCP elicitation send it) asked as one chat question.

    One property with choices (``enum``, ``oneOf``, a boolean) becomes buttons, one free property a
    text answer, several properties typed ``name: value`` lines. :meth:`content` turns the answer
    into the object to send back: a dict, :data:`DECLINE`'s None, or a string naming what is missing."""

    message: str
    props: list[tuple[str, dict[str, Any]]]
    required: list[str]
    question: Question

    def content(self, answer: str) -> dict[str, Any] | str | None:
        raw = answer.strip()
        if answer == DECLINE or _norm(raw) in _DECLINE_WORDS:
            return None
        if not self.props:
            return {}
        if len(self.props) == 1:
            name, spec = self.props[0]
            value = _coerce(raw, spec)
            return {name: value} if value is not None else f"{name}: {_expects(spec)}"
        names: dict[str, str] = {_norm(n): n for n, _ in self.props}
        names.update({_norm(str(s.get("title") or n)): n for n, s in self.props})
        values = {name: lines[0] for name, lines in read_lines(raw, names) if name is not None}
        out: dict[str, Any] = {}
        problems = []
        for name, spec in self.props:
            if name not in values or values[name] == "":
                if name in self.required:
                    problems.append(f"{name} ({_expects(spec)})")
                continue
            value = _coerce(values[name], spec)
            if value is None:
                problems.append(f"{name} ({_expects(spec)})")
            else:
                out[name] = value
        return "missing or not understood: " + "; ".join(problems) if problems else out

    def again(self, problem: str) -> SchemaForm:
        """The same form asked once more, saying what the last answer lacked."""
        q = self.question
        detail = f"{q.detail}\n({problem})" if q.detail else f"({problem})"
        asked = Question(title=q.title, detail=detail[:1500], kind="question", options=list(q.options),
                         free_text=q.free_text)
        return SchemaForm(self.message, self.props, self.required, asked)


_KEY_LINE = re.compile(r"\s*([^:：=\n]{1,64}?)\s*[:：=]\s*(.*)$")


def read_lines(raw: str, names: dict[str, str]) -> list[tuple[str | None, list[str]]]:
    """A typed reply of ``name: value`` lines (``：`` and ``=`` separate too) cut where a line names
    a field: ``(field, [its value, the lines after it that name none])``, in order, the first with
    field None when lines come before any name. ``names`` maps a key, as :func:`norm` leaves it, to
    the field it names; a line naming something else goes on the one before."""
    out: list[tuple[str | None, list[str]]] = []
    for line in raw.splitlines():
        m = _KEY_LINE.match(line)
        named = names.get(_norm(m.group(1))) if m else None
        if m is not None and named is not None:
            out.append((named, [m.group(2).strip()]))
        elif out:
            out[-1][1].append(line)
        else:
            out.append((None, [line]))
    return out


def norm(text: str) -> str:
    """``text`` as answers are compared: lower case, single spaces, no trailing punctuation."""
    return _norm(text)


def schema_form(message: str, schema: dict[str, Any]) -> SchemaForm:
    props = [(str(k), v) for k, v in (schema.get("properties") or {}).items() if isinstance(v, dict)]
    required = [str(r) for r in schema.get("required") or []]
    title = " ".join(str(message or schema.get("title") or "The agent needs your input").split())[:300]
    decline = Option(value=DECLINE, label="Decline")
    if not props:
        q = Question(title=title, kind="question", options=[Option(value="ok", label="OK"), decline], free_text=False)
    elif len(props) == 1:
        name, spec = props[0]
        choices = _choices(spec)
        about = str(spec.get("description") or spec.get("title") or "")
        if choices and spec.get("type") != "array":
            q = Question(title=title, detail=about[:600], kind="question", options=[*choices, decline],
                         free_text=False)
        else:
            detail = "; ".join(x for x in (about, _expects(spec), "reply decline to refuse") if x)
            q = Question(title=title, detail=detail[:600], kind="question", free_text=True)
    else:
        lines = []
        for name, spec in props:
            mark = " (required)" if name in required else ""
            about = f" — {spec['description']}" if spec.get("description") else ""
            lines.append(f"{name}: {_expects(spec)}{mark}{about}"[:200])
        lines.append("Reply with one line per field, name: value (or decline). / 请每行回复一个字段“名称: 值”（或回复 拒绝）。")
        q = Question(title=title, detail="\n".join(lines)[:1500], kind="question", free_text=True)
    return SchemaForm(message=title, props=props, required=required, question=q)


def _choices(spec: dict[str, Any]) -> list[Option]:
    if spec.get("type") == "boolean":
        return [Option(value="true", label="Yes"), Option(value="false", label="No")]
    items: dict[str, Any] = spec["items"] if isinstance(spec.get("items"), dict) else spec
    one_of = items.get("oneOf") or items.get("anyOf")
    if isinstance(one_of, list) and one_of:
        return [Option(value=str(o.get("const")), label=str(o.get("title") or o.get("const"))[:200])
                for o in one_of[:20] if isinstance(o, dict) and o.get("const") is not None]
    enum = items.get("enum")
    if isinstance(enum, list) and 0 < len(enum) <= 20:
        names: list[Any] = spec["enumNames"] if isinstance(spec.get("enumNames"), list) else []
        return [Option(value=str(v), label=str(names[i] if i < len(names) else v)[:200]) for i, v in enumerate(enum)]
    return []


def _expects(spec: dict[str, Any]) -> str:
    choices = _choices(spec)
    kind = str(spec.get("type") or "string")
    if choices:
        listed = " / ".join(o.label for o in choices)
        return f"one or more of {listed}, comma-separated" if kind == "array" else f"one of {listed}"
    return {"number": "a number", "integer": "a whole number", "boolean": "yes or no"}.get(kind, "text")


def _coerce(raw: str, spec: dict[str, Any]) -> Any:
    kind = spec.get("type")
    choices = _choices(spec)
    if kind == "boolean":
        low = _norm(raw)
        return True if low in _YES else False if low in _NO else None
    if kind in ("number", "integer"):
        try:
            value: float | int = int(raw) if kind == "integer" else float(raw)
        except ValueError:
            return None
        lo, hi = spec.get("minimum"), spec.get("maximum")
        if (isinstance(lo, (int, float)) and value < lo) or (isinstance(hi, (int, float)) and value > hi):
            return None
        return value
    if kind == "array":
        parts = [p for p in re.split(r"[,，、\n]", raw) if p.strip()]
        picked = [pick(p, choices) if choices else p.strip() for p in parts]
        return picked if picked and all(p is not None for p in picked) else None
    if choices:
        return pick(raw, choices)
    return raw if raw else None


def pick(raw: str, choices: list[Option]) -> str | None:
    """The value of the choice ``raw`` names: by its number (from 1), its value or its label."""
    low = _norm(raw)
    for i, opt in enumerate(choices, 1):
        if low in (str(i), _norm(opt.value), _norm(opt.label)):
            return opt.value
    return None
