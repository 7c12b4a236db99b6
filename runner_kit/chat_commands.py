"""Commands a chat sends to a coding agent's runner: ``/new``, ``/sessions``, ``/resume <n>``,
``/stop``, ``/mode <m>``, ``/model <name>``, ``/cost`` (``/usage``), ``/diff``, ``/help``.

A command is a message that is only a command: text, no files, one line, the configured prefix
(``command-prefix``, ``/`` by default; blank turns commands off) and a word. LangBot 4.11.2 keeps
messages starting with its own prefixes (``!`` and ``！``, ``command.prefix`` in its config.yaml) for
its own command handler and never hands them to a runner, so ``/`` is free. ``//text`` sends
``/text`` to the agent as an ordinary message. A message that starts with the prefix and a path
(``/tmp/x is full``) is not a command.

What a command changes lives beside the agent session's id in conversation state
(:class:`Book`, under ``<session key>.chat``): the sessions this conversation had (``/new`` keeps
the old one resumable), their turns, tokens and cost, and the mode and model chosen in the chat,
which override ``permission-mode`` and ``model`` from the next start of the agent
(:func:`effective`). The day's totals of the whole binding live in runner scope (:class:`Day`).

Who may do what (:func:`may`):

- anyone in a session may list, resume and start sessions, see the cost and the diff, and stop its
  running turn; an ``approvers`` member may stop any session's turn in the conversation;
- ``/mode`` and ``/model``: in one's own session (``user-id-source`` gives each person one, or a
  private chat) any mode or model the owner allowed; in a session several people share, only an
  ``approvers`` member may switch them (refused with the reason when the owner listed none).

The owner bounds the chat: ``chat-modes`` lists the modes it may switch to beyond the owner's own
mode and ``plan`` (read only, always allowed); ``chat-models`` the models beyond the configured one.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from . import approvals, texts
from .approvals import actor_of, approvers
from .config import Config, listed
from .identity import PER_PERSON, normalize_source
from .inputs import UserInput
from .logs import get_logger

log = get_logger("runner_kit.chat_commands")

DEFAULT_PREFIX = "/"
BOOK_SUFFIX = ".chat"
DAY_KEY = "chat.usage.day"
BOOK_VERSION = 1
MAX_SESSIONS = 20  # sessions a conversation remembers for /resume (the oldest are forgotten)
TITLE_CHARS = 48

#: chat mode -> the ``permission-mode`` value every coding-agent plugin takes
MODES = {"plan": "read-only", "ask": "ask", "edits": "workspace-write", "full": "full-access"}
MODE_OF = {v: k for k, v in MODES.items()}
RANK = {"plan": 0, "ask": 1, "edits": 2, "full": 3}  # how much a mode lets the agent do on its own

NAMES = ("new", "sessions", "resume", "stop", "mode", "model", "cost", "diff", "help")
ALIASES = {"usage": "cost", "reset": "new", "list": "sessions", "cancel": "stop", "?": "help", "h": "help"}
_WORD = re.compile(r"^(?P<name>[A-Za-z?][A-Za-z0-9_-]{0,31})(?:@[\w.-]{1,64})?(?:\s+(?P<args>.*))?$")


@dataclass(frozen=True, slots=True)
class Command:
    name: str  # a name of :data:`NAMES`, or what was typed when it is unknown
    args: str = ""
    known: bool = True
    raw: str = ""


def prefix_of(config: Mapping[str, Any] | None) -> str:
    """The command prefix (blank: commands are off)."""
    if config is None or "command-prefix" not in config:
        return DEFAULT_PREFIX
    return str(config.get("command-prefix") or "").strip()


def parse(text: str, prefix: str) -> Command | None:
    """The command ``text`` is, or None when it is an ordinary message (see the module's rules)."""
    if not prefix:
        return None
    body = str(text or "").strip()
    if not body.startswith(prefix) or body.startswith(prefix * 2) or len(body.splitlines()) > 1 or len(body) > 300:
        return None
    m = _WORD.match(body[len(prefix):])
    if m is None:
        return None
    typed = m.group("name").lower()
    args = " ".join((m.group("args") or "").split())
    name = ALIASES.get(typed, typed)
    return Command(name=name, args=args, known=name in NAMES, raw=body)


def command_of(inp: UserInput, config: Mapping[str, Any] | None) -> Command | None:
    """The command a run's message is (text only, no files)."""
    if inp.files:
        return None
    return parse(inp.text, prefix_of(config))


def unescaped(inp: UserInput, config: Mapping[str, Any] | None) -> UserInput:
    """``//text`` → ``/text``: a message that only looks like a command goes to the agent as typed."""
    prefix = prefix_of(config)
    body = inp.text.lstrip()
    if prefix and body.startswith(prefix * 2):
        return UserInput(text=body[len(prefix):], files=inp.files, params=inp.params, skipped=inp.skipped)
    return inp


# --- the owner's bounds ----------------------------------------------------------------------------


def owner_mode(config: Mapping[str, Any]) -> str:
    return MODE_OF.get(str(config.get("permission-mode") or "workspace-write"), "edits")


def allowed_modes(config: Mapping[str, Any]) -> list[str]:
    """The modes the chat may pick: ``plan``, the owner's own, and those listed in ``chat-modes``."""
    chosen = [MODE_OF.get(m.lower(), m.lower()) for m in listed(config.get("chat-modes"))]
    out = {"plan", owner_mode(config), *(m for m in chosen if m in MODES)}
    return sorted(out, key=RANK.__getitem__)


def allowed_models(config: Mapping[str, Any]) -> list[str]:
    """The models the chat may pick: the configured one (if any) and those in ``chat-models``."""
    own = str(config.get("model") or "").strip()
    return list(dict.fromkeys([*([own] if own else []), *listed(config.get("chat-models"))]))


def effective(config: Config, book: Book) -> Config:
    """``config`` with the mode and model chosen in the chat, while the owner still allows them
    (an owner who narrows the lists later wins over what the chat chose before)."""
    values = dict(config)
    if book.mode and book.mode in allowed_modes(config):
        values["permission-mode"] = MODES[book.mode]
    if book.model and book.model in allowed_models(config):
        values["model"] = book.model
    if values == dict(config):
        return config
    return Config(values, config.secrets)


def shared(config: Mapping[str, Any]) -> bool:
    """Whether several people share one agent session here (``user-id-source`` not per person)."""
    source = config.get("user-id-source") if "user-id-source" in config else "conversation"
    return normalize_source(source) not in PER_PERSON


def is_approver(config: Mapping[str, Any], actor: str | None) -> bool:
    return actor is not None and actor in approvers(config)


# --- the session book ------------------------------------------------------------------------------


def _num(value: Any) -> float:
    """A count or amount read from state or usage: a finite number >= 0, else 0 (JSON state may
    hold ``Infinity``, and one such value in a book would fail every message of the conversation)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return 0.0
    try:
        number = float(value)
    except OverflowError:  # an int too large for a float
        return 0.0
    return number if math.isfinite(number) and number >= 0 else 0.0


@dataclass
class Entry:
    """One agent session of this conversation, and what it used."""

    id: str
    started: float
    last: float
    title: str = ""
    turns: int = 0
    tokens: int = 0
    cost: float = 0.0
    costed: bool = False  # the agent reported a cost (Codex reports tokens only)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "started": round(self.started, 3), "last": round(self.last, 3),
                               "title": self.title, "turns": self.turns, "tokens": self.tokens}
        if self.costed:
            out["cost"] = round(self.cost, 6)
        return out

    @classmethod
    def from_dict(cls, d: Any) -> Entry | None:
        if not isinstance(d, dict) or not isinstance(d.get("id"), str) or not d["id"]:
            return None
        return cls(id=d["id"], started=_num(d.get("started")), last=_num(d.get("last")),
                   title=str(d.get("title") or "")[:TITLE_CHARS], turns=int(_num(d.get("turns"))),
                   tokens=int(_num(d.get("tokens"))), cost=_num(d.get("cost")), costed="cost" in d)


@dataclass
class Book:
    """What the chat changed for one agent session key, as stored in conversation state."""

    key: str
    sessions: list[Entry] = field(default_factory=list)  # oldest first
    mode: str | None = None
    model: str | None = None
    pending: Entry | None = None  # usage of a turn whose session id is not known yet

    @classmethod
    def load(cls, state: Mapping[str, Any] | None, session_key: str) -> Book:
        key = session_key + BOOK_SUFFIX
        raw = (state or {}).get(key)
        book = cls(key)
        if isinstance(raw, dict) and raw.get("v") == BOOK_VERSION:
            listed = raw.get("sessions")
            book.sessions = [e for e in map(Entry.from_dict, listed if isinstance(listed, list) else []) if e is not None]
            book.mode = raw.get("mode") if raw.get("mode") in MODES else None
            book.model = str(raw["model"]) if isinstance(raw.get("model"), str) and raw["model"] else None
        return book

    def value(self) -> dict[str, Any]:
        return {"v": BOOK_VERSION, "sessions": [e.as_dict() for e in self.sessions[-MAX_SESSIONS:]],
                "mode": self.mode, "model": self.model}

    def find(self, session_id: Any) -> Entry | None:
        if not session_id:
            return None
        return next((e for e in self.sessions if e.id == str(session_id)), None)

    def newest_first(self) -> list[Entry]:
        kept = self.sessions[-MAX_SESSIONS:]
        return [e for _i, e in sorted(enumerate(kept), key=lambda p: (p[1].last, p[0]), reverse=True)]

    def note_turn(self, session_id: Any, title: str, usage: Mapping[str, Any] | None, *,
                  now: float | None = None, began: float | None = None) -> Entry:
        """Count one turn (its usage) for ``session_id`` (a session it does not know yet is added,
        started when the turn ``began``: /diff lists what changed since then)."""
        now = time.time() if now is None else now
        entry = self.find(session_id)
        if entry is None:
            entry = Entry(id=str(session_id), started=min(now, began or now), last=now, title=_title(title))
            self.sessions.append(entry)
            while len(self.sessions) > MAX_SESSIONS:  # forgotten: the one used longest ago (never
                self.sessions.remove(min(self.sessions[:-1], key=lambda e: e.last))  # one just resumed)
        entry.last = now
        entry.turns += 1
        entry.tokens += tokens_of(usage)
        if (cost := cost_of(usage)) is not None:
            entry.cost += cost
            entry.costed = True
        if not entry.title:
            entry.title = _title(title)
        return entry


def _title(text: str) -> str:
    line = " ".join(str(text or "").split())
    return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 1] + "…"


def tokens_of(usage: Mapping[str, Any] | None) -> int:
    if not usage:
        return 0
    total = usage.get("total_tokens")
    if isinstance(total, int) and not isinstance(total, bool):
        return max(total, 0)
    return int(_num(usage.get("prompt_tokens")) + _num(usage.get("completion_tokens")))


def cost_of(usage: Mapping[str, Any] | None) -> float | None:
    """The turn's cost in US dollars, when the agent reported one (``cost_usd``)."""
    value = (usage or {}).get("cost_usd")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0 else None


def usage_delta(before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> dict[str, Any]:
    """What a run's usage totals grew by over one turn (numbers only)."""
    out: dict[str, Any] = {}
    for k, v in (after or {}).items():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            d = v - _num((before or {}).get(k))
            if d > 0:
                out[k] = d
    return out


# --- the day's totals (runner scope: every conversation of the binding) ---------------------------

_DAYS: dict[tuple[str, str], dict[str, Any]] = {}  # (binding, day) -> totals, in this plugin process


def today(now: float | None = None) -> str:
    return _dt.datetime.fromtimestamp(time.time() if now is None else now, _dt.UTC).strftime("%Y-%m-%d")


def _binding(ctx: Any, platform: str) -> str:
    """The binding whose day this is, as near as the plugin can tell it. LangBot keeps runner scope
    per binding (pipeline or agent) but gives a runner no binding id, and every pipeline's WebUI chat
    carries the one bot id ``websocket-proxy-bot``: without the runner config (set per binding) in
    the key, a second pipeline counted the first one's turns and budget as its own."""
    conv = getattr(ctx, "conversation", None)
    try:
        raw = json.dumps(getattr(ctx, "config", None), sort_keys=True, default=str)
    except (TypeError, ValueError):
        raw = ""
    return "|".join(str(x or "") for x in (platform, getattr(conv, "bot_id", None),
                                            getattr(conv, "workspace_id", None),
                                            hashlib.sha256(raw.encode()).hexdigest()[:16]))


class Day:
    """The day's turns, tokens and cost of one binding: the larger of what this process counted and
    what runner state holds (another process, an earlier start), so concurrent runs of this process
    never lose each other's counts."""

    def __init__(self, ctx: Any, platform: str, now: float | None = None):
        self.day = today(now)
        self.ident = (_binding(ctx, platform), self.day)
        stored = (getattr(getattr(ctx, "state", None), "runner", None) or {}).get(DAY_KEY)
        mine = _DAYS.get(self.ident)
        base = {"day": self.day, "turns": 0, "tokens": 0, "cost": 0.0}
        if isinstance(stored, dict) and stored.get("day") == self.day:
            if mine is None or _num(stored.get("tokens")) + _num(stored.get("cost")) > \
                    _num(mine.get("tokens")) + _num(mine.get("cost")):
                mine = {**base, **{k: stored.get(k, base[k]) for k in base}}
        _DAYS[self.ident] = mine = mine or base
        for old in [k for k in _DAYS if k[1] != self.day]:
            del _DAYS[old]

    @property
    def totals(self) -> dict[str, Any]:
        return _DAYS.get(self.ident) or {"day": self.day, "turns": 0, "tokens": 0, "cost": 0.0}

    def add(self, usage: Mapping[str, Any] | None) -> dict[str, Any]:
        t = dict(self.totals)
        t["turns"] = int(_num(t.get("turns"))) + 1
        t["tokens"] = int(_num(t.get("tokens"))) + tokens_of(usage)
        if (cost := cost_of(usage)) is not None:
            t["cost"] = round(_num(t.get("cost")) + cost, 6)
            t["costed"] = True
        _DAYS[self.ident] = t
        return t


# --- budgets and the footer -----------------------------------------------------------------------


def _budget(config: Mapping[str, Any], key: str) -> float:
    return _num(config.get(key))


def over_budget(config: Mapping[str, Any], entry: Entry | None, day: Mapping[str, Any]) -> str | None:
    """The line saying which budget is used up, or None while every one has room."""
    checks = (
        ("session-budget-usd", entry.cost if entry else 0.0, "session", "$"),
        ("session-budget-tokens", entry.tokens if entry else 0, "session", "tokens"),
        ("daily-budget-usd", _num(day.get("cost")), "day", "$"),
        ("daily-budget-tokens", _num(day.get("tokens")), "day", "tokens"),
    )
    for key, used, scope, unit in checks:
        limit = _budget(config, key)
        if limit > 0 and used >= limit:
            amount = f"${limit:g}" if unit == "$" else texts.t("{n} tokens", "{n} 个 token", n=_short(limit))
            if scope == "session":
                return texts.t("This agent session reached its budget of {amount}. Start a new one with {p}new, "
                               "or ask the bot owner to raise “Budget per session”.",
                               "这个智能体会话已达到预算 {amount}。可以用 {p}new 开始新会话，或请机器人所有者提高“每个会话的预算”。",
                               amount=amount, p=prefix_of(config) or "/")
            return texts.t("This bot reached today's budget of {amount} (all its chats together). It works again "
                           "tomorrow (UTC), or when the bot owner raises “Budget per day”.",
                           "这个机器人今天已达到预算 {amount}（所有对话合计）。明天（UTC）恢复，或请机器人所有者提高“每天的预算”。",
                           amount=amount)
    return None


BUDGET_KEYS = ("session-budget-usd", "session-budget-tokens", "daily-budget-usd", "daily-budget-tokens")


def has_budget(config: Mapping[str, Any]) -> bool:
    return any(_budget(config, k) > 0 for k in BUDGET_KEYS)


def over_budget_after(config: Mapping[str, Any], entry: Entry | None, day: Mapping[str, Any],
                      delta: Mapping[str, Any] | None) -> str | None:
    """:func:`over_budget` once the running turn's usage so far (``delta``) is counted too: an agent
    that reports usage while it works (Codex after each model call) is stopped when it reaches a
    budget, not only refused its next turn."""
    grown = Entry(id=entry.id if entry else "", started=0.0, last=0.0,
                  tokens=(entry.tokens if entry else 0) + tokens_of(delta),
                  cost=(entry.cost if entry else 0.0) + (cost_of(delta) or 0.0))
    today_ = {**day, "tokens": _num(day.get("tokens")) + tokens_of(delta),
              "cost": _num(day.get("cost")) + (cost_of(delta) or 0.0)}
    return over_budget(config, grown, today_)


def _short(n: float) -> str:
    if n >= 1_000_000:
        return f"{n / 1_000_000:.3g}M"
    if n >= 1000:
        return f"{n / 1000:.3g}k"
    return f"{int(n)}"


def money(amount: float) -> str:
    """``$0.37``; ``<$0.01`` for a cost that rounds to nothing (it is not nothing)."""
    return "<$0.01" if 0 < amount < 0.005 else f"${amount:.2f}"


def _turns(n: int) -> str:
    return texts.t("1 turn", "1 轮") if n == 1 else texts.t("{n} turns", "{n} 轮", n=n)


def footer(entry: Entry | None) -> str:
    """``💰 $0.37 · 12.4k tokens · 3 turns`` for the session so far (cost only when reported)."""
    if entry is None:
        return ""
    parts = []
    if entry.costed:
        parts.append(money(entry.cost))
    if entry.tokens:  # an agent that reports no token counts (codex-acp) is never said to use 0
        parts.append(texts.t("{n} tokens", "{n} tokens", n=_short(entry.tokens)))
    parts.append(_turns(entry.turns))
    return "💰 " + " · ".join(parts)


# --- the running turns a /stop can reach -----------------------------------------------------------


@dataclass
class Running:
    """A session's turn in progress, as far as ``/stop`` needs it."""

    key: str
    stop: Callable[[str], None]  # called with the name of who stopped it
    started: float = field(default_factory=time.time)


RUNNING: dict[str, Running] = {}


def stop_in(keys: Iterable[str], by: str) -> int:
    """Ask the turns running in ``keys`` to stop; how many were asked."""
    n = 0
    for key in keys:
        r = RUNNING.get(key)
        if r is not None:
            try:
                r.stop(by)
                n += 1
            except Exception as exc:  # noqa: BLE001 - one failed stop never blocks the others
                log.warning("stopping a turn failed: %s", type(exc).__name__)
    return n


def running_in(conversation: str | None) -> list[str]:
    if not conversation:
        return []
    return [k for k in RUNNING if k.startswith(conversation + "|")]


# --- what a command says --------------------------------------------------------------------------


def help_text(config: Mapping[str, Any]) -> str:
    p = prefix_of(config) or "/"
    rows = [
        ("new", texts.t("start a fresh agent session here (the current one stays resumable)",
                        "在这里开始新的智能体会话（当前会话仍可恢复）")),
        ("sessions", texts.t("list this conversation's sessions", "列出这个对话的会话")),
        ("resume <n>", texts.t("go back to session n of the list", "回到列表中的第 n 个会话")),
        ("stop", texts.t("stop the running turn now", "立即停止正在进行的回合")),
        ("mode [" + "|".join(allowed_modes(config)) + "]",
         texts.t("show or switch the permission mode", "查看或切换权限模式")),
        ("model [name]", texts.t("show or switch the model", "查看或切换模型")),
        ("cost", texts.t("tokens and cost of this session and of today", "这个会话和今天的 token 与费用")),
        ("diff", texts.t("what the agent changed in the workspace", "智能体在工作目录中做了哪些修改")),
        ("help", texts.t("this list", "显示这个列表")),
    ]
    head = texts.t("Commands (a message that is only the command):", "命令（消息只包含命令本身）：")
    tail = texts.t("To send a message starting with {p} to the agent, write {p}{p} instead.",
                   "要把以 {p} 开头的消息发给智能体，请改写成 {p}{p} 开头。", p=p)
    return "\n".join([head, *(f"{p}{name} — {what}" for name, what in rows), tail])


def unknown_text(cmd: Command, config: Mapping[str, Any]) -> str:
    p = prefix_of(config) or "/"
    return texts.t("Unknown command {p}{name}.", "未知命令 {p}{name}。", p=p, name=cmd.name[:32]) + "\n\n" + help_text(config)


def mode_label(mode: str) -> str:
    return {
        "plan": texts.t("plan (read only)", "plan（只读）"),
        "ask": texts.t("ask (asks in the chat before acting)", "ask（行动前在聊天中询问）"),
        "edits": texts.t("edits (writes in the workspace)", "edits（可写工作目录）"),
        "full": texts.t("full (no limits)", "full（不加限制）"),
    }.get(mode, mode)


def when(ts: float, now: float | None = None) -> str:
    ago = max(0.0, (time.time() if now is None else now) - ts)
    if ago < 90:
        return texts.t("just now", "刚刚")
    if ago < 5400:
        return texts.t("{n} min ago", "{n} 分钟前", n=round(ago / 60))
    if ago < 36 * 3600:
        return texts.t("{n} h ago", "{n} 小时前", n=round(ago / 3600))
    return texts.t("{n} days ago", "{n} 天前", n=round(ago / 86400))


def sessions_text(book: Book, current: Any, config: Mapping[str, Any], now: float | None = None) -> str:
    p = prefix_of(config) or "/"
    listed = book.newest_first()
    if not listed:
        return texts.t("No agent session here yet.", "这里还没有智能体会话。")
    lines = [texts.t("Sessions of this conversation (newest first):", "这个对话的会话（最新的在前）：")]
    for n, e in enumerate(listed, 1):
        mark = texts.t(" ← current", " ← 当前") if current and e.id == str(current) else ""
        cost = f" · {money(e.cost)}" if e.costed else ""
        title = f"“{e.title}”" if e.title else texts.t("(untitled)", "（无标题）")
        lines.append(f"{n}. {title} — {when(e.last, now)} · "
                     + _turns(e.turns) + (f" · {_short(e.tokens)} tokens" if e.tokens else "") + f"{cost}{mark}")
    lines.append(texts.t("Go back to one with {p}resume <n>.", "用 {p}resume <n> 回到其中一个。", p=p))
    return "\n".join(lines)


def _used(tokens: int, turns: int, cost: str) -> str:
    """``12.4k tokens in 3 turns, $0.37``; without the tokens when none were reported (never "0 tokens")."""
    if not tokens:
        return _turns(turns) + cost
    return texts.t("{tok} tokens in {t}{cost}", "{t}共 {tok} 个 token{cost}", tok=_short(tokens), t=_turns(turns), cost=cost)


def cost_text(book: Book, current: Any, day: Mapping[str, Any], config: Mapping[str, Any]) -> str:
    entry = book.find(current)
    lines = []
    if entry is None:
        lines.append(texts.t("This session: nothing used yet.", "当前会话：尚无用量。"))
    else:
        cost = texts.t(", {c}", "，{c}", c=money(entry.cost)) if entry.costed else ""
        lines.append(texts.t("This session: {used}.", "当前会话：{used}。",
                             used=_used(entry.tokens, entry.turns, cost)))
    day_cost = texts.t(", {c}", "，{c}", c=money(_num(day.get("cost")))) if day.get("costed") or _num(day.get("cost")) else ""
    lines.append(texts.t("Today (UTC, all chats of this bot): {used}.", "今天（UTC，此机器人的所有对话）：{used}。",
                         used=_used(int(_num(day.get("tokens"))), int(_num(day.get("turns"))), day_cost)))
    limits = []
    for key, en, zh in (("session-budget-usd", "session ${v:g}", "每会话 ${v:g}"),
                        ("session-budget-tokens", "session {v} tokens", "每会话 {v} token"),
                        ("daily-budget-usd", "day ${v:g}", "每天 ${v:g}"),
                        ("daily-budget-tokens", "day {v} tokens", "每天 {v} token")):
        if (v := _budget(config, key)) > 0:
            limits.append(texts.t(en, zh, v=v if "$" in en else _short(v)))
    if limits:
        lines.append(texts.t("Budgets: {b}.", "预算：{b}。", b="; ".join(limits)))
    if entry is not None and not entry.costed:
        lines.append(texts.t("(This agent reports tokens, not cost.)", "（这个智能体只报告 token，不报告费用。）")
                     if entry.tokens else
                     texts.t("(This agent reported no token counts or cost for these turns.)",
                             "（这个智能体没有报告这些回合的 token 数或费用。）"))
    return "\n".join(lines)


def who_of(ctx: Any) -> tuple[str | None, str]:
    actor, name = actor_of(ctx)
    return actor, (name or actor or texts.t("someone", "某位成员"))






# --- answering a command ---------------------------------------------------------------------------


@dataclass
class Said:
    """What a command answers: the text, and the state it writes (key, value, scope)."""

    text: str
    writes: list[tuple[str, Any, str]] = field(default_factory=list)


def own_session(ctx: Any, config: Mapping[str, Any]) -> bool:
    """Whether the sender's agent session is theirs alone: a per-person identity mode, or a private chat."""
    conv = getattr(ctx, "conversation", None)
    return not shared(config) or str(getattr(conv, "launcher_type", "") or "") == "person"


def _refused_shared(config: Mapping[str, Any], what: str) -> str:
    if not approvers(config):
        return texts.t("Only the bot's approvers may change the {what} of a session several people share, and the bot "
                       "owner has named none (“Approvers” in the bot's AI settings).",
                       "多人共用的会话只有审批人可以更改{what}，而机器人所有者没有设置审批人（机器人 AI 设置中的“审批人”）。",
                       what=what)
    return texts.t("Only the bot's approvers may change the {what} of a session several people share.",
                   "多人共用的会话只有审批人可以更改{what}。", what=what)


def _pick(arg: str, options: list[str]) -> str | None:
    low = arg.strip().lower()
    return next((o for o in options if o.lower() == low), None)


async def answer(cmd: Command, ctx: Any, config: Config, *, session_key: str | None, current: Any,
                 slot_key: str | None, conversation: str | None, platform: str,
                 diff: Callable[[], Any] | None = None, parked: bool = False) -> Said:
    """What ``cmd``, sent by ``ctx``'s sender, answers and changes (see the module's rules)."""
    p = prefix_of(config) or "/"
    actor, name = who_of(ctx)
    approver = is_approver(config, actor)
    state = getattr(getattr(ctx, "state", None), "conversation", None) or {}
    book = Book.load(state, session_key or "runner")
    busy = slot_key is not None and slot_key in RUNNING
    if not cmd.known:
        return Said(unknown_text(cmd, config))
    if cmd.name == "help":
        return Said(help_text(config))
    if cmd.name == "sessions":
        return Said(sessions_text(book, current, config))
    if cmd.name == "cost":
        return Said(cost_text(book, current, Day(ctx, platform).totals, config))
    if cmd.name == "stop":
        keys = [k for k in ([slot_key] if slot_key else [])]
        if approver:
            keys = list(dict.fromkeys([*keys, *running_in(conversation)]))
        if stop_in(keys, name):
            return Said(texts.t("Stopping the running turn.", "正在停止当前回合。"))
        waiting = [k for k in ([slot_key] if slot_key else [])]
        if approver and conversation:
            waiting += [p.key for p in approvals.waiting_in(conversation)]
        if sum(approvals.stop(k, name) for k in dict.fromkeys(waiting)):
            return Said(texts.t("Stopped: the agent's question is denied and the agent stopped.",
                                "已停止：智能体的问题已拒绝，智能体已停止。"))
        return Said(texts.t("Nothing is running in your session.", "你的会话中没有正在进行的回合。"))
    if cmd.name in ("new", "resume") and (busy or parked):
        return Said(texts.t("A turn is still running in this session: wait for it, or stop it with {p}stop first.",
                            "这个会话中还有回合在进行：请等它结束，或先用 {p}stop 停止。", p=p))
    if session_key is None:
        return Said(texts.t("This agent keeps no sessions to change.", "这个智能体没有可更改的会话。"))
    if cmd.name == "new":
        if not current:
            return Said(texts.t("This is already a fresh session: your next message starts it.",
                                "已经是新会话：你的下一条消息会开始它。"))
        return Said(texts.t("Started a fresh agent session: your next message goes to it. The previous one is kept "
                            "({p}sessions, {p}resume).", "已开始新的智能体会话：你的下一条消息会发给它。之前的会话仍保留（{p}sessions、{p}resume）。",
                            p=p), writes=[(session_key, None, "conversation")])
    if cmd.name == "resume":
        listed = book.newest_first()
        if not listed:
            return Said(texts.t("There is no earlier session to go back to.", "没有可以回到的早先会话。"))
        arg = cmd.args.strip().lstrip("#")
        if not (arg.isascii() and arg.isdigit()) or not 1 <= int(arg) <= len(listed):  # "²" is a digit too
            return Said(texts.t("Which one? Send {p}resume <n> with n from 1 to {k}.", "要回到哪一个？请发送 {p}resume <n>，n 为 1 到 {k}。",
                                p=p, k=len(listed)) + "\n\n" + sessions_text(book, current, config))
        entry = listed[int(arg) - 1]
        if current and entry.id == str(current):
            return Said(texts.t("Session {n} is already the current one.", "第 {n} 个会话已经是当前会话。", n=arg))
        title = f"“{entry.title}”" if entry.title else texts.t("(untitled)", "（无标题）")
        return Said(texts.t("Back in session {n} {title}: your next message continues it.",
                            "已回到第 {n} 个会话 {title}：你的下一条消息会继续它。", n=arg, title=title),
                    writes=[(session_key, entry.id, "conversation")])
    if cmd.name == "mode":
        modes = allowed_modes(config)
        now = book.mode if book.mode in modes else owner_mode(config)
        if not cmd.args:
            return Said(texts.t("Mode of this session: {m}. Allowed here: {all}.", "当前会话的模式：{m}。这里允许：{all}。",
                                m=mode_label(now), all=", ".join(modes)))
        want = _pick(MODE_OF.get(cmd.args.lower(), cmd.args), list(MODES))
        if want is None or want not in modes:
            return Said(texts.t("“{a}” is not a mode the bot owner allows here. Allowed: {all}.",
                                "“{a}”不是机器人所有者在这里允许的模式。允许：{all}。", a=cmd.args[:40], all=", ".join(modes)))
        if not own_session(ctx, config) and not approver:
            return Said(_refused_shared(config, texts.t("mode", "模式")))
        book.mode = None if want == owner_mode(config) else want
        when_ = texts.t("after the current turn", "在当前回合之后") if busy else texts.t("from your next message", "从你的下一条消息起")
        return Said(texts.t("Mode of this session: {m}, {when}.", "当前会话的模式：{m}，{when}生效。", m=mode_label(want), when=when_),
                    writes=[(book.key, book.value(), "conversation")])
    if cmd.name == "model":
        models = allowed_models(config)
        chosen = book.model if book.model in models else (str(config.get("model") or "").strip() or None)
        shown = chosen or texts.t("the agent's default", "智能体的默认模型")
        if not cmd.args:
            more = (texts.t(" Allowed here: {all}.", " 这里允许：{all}。", all=", ".join(models)) if len(models) > 1 else
                    texts.t(" The bot owner allows no other (“Models the chat may pick”).",
                            " 机器人所有者没有允许其他模型（“聊天可选的模型”）。"))
            return Said(texts.t("Model of this session: {m}.", "当前会话的模型：{m}。", m=shown) + more)
        want = _pick(cmd.args, models)
        if want is None:
            return Said(texts.t("“{a}” is not a model the bot owner allows here.", "“{a}”不是机器人所有者在这里允许的模型。",
                                a=cmd.args[:60]) + (texts.t(" Allowed: {all}.", " 允许：{all}。", all=", ".join(models)) if models else ""))
        if not own_session(ctx, config) and not approver:
            return Said(_refused_shared(config, texts.t("model", "模型")))
        book.model = None if want == str(config.get("model") or "").strip() else want
        when_ = texts.t("after the current turn", "在当前回合之后") if busy else texts.t("from your next message", "从你的下一条消息起")
        return Said(texts.t("Model of this session: {m}, {when}.", "当前会话的模型：{m}，{when}生效。", m=want, when=when_),
                    writes=[(book.key, book.value(), "conversation")])
    if cmd.name == "diff":
        if diff is None:
            return Said(texts.t("This agent has no workspace to compare.", "这个智能体没有可比较的工作目录。"))
        found: Said = await diff()
        return found
    return Said(unknown_text(cmd, config))
