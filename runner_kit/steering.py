"""Follow-up messages for a live run (LangBot's steering, host-contract.md §4.6).

While a run whose runner declares ``capabilities.steering`` is active, LangBot claims each new
message of the same conversation for it instead of starting a new run, and hands it over through
``steering_pull``. Anything never pulled before the run ends is journalled as ``steering.dropped``
and gets no reply, so the turn loop pulls at every turn boundary and right before it ends, and
keeps every item it pulled until that item has been answered (or reported as unanswered).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import sessions
from .chat_commands import Command, parse, prefix_of
from .errors import RunnerError
from .inputs import DEFAULT_MAX_BYTES, InputFile, UserInput, collect_input
from .logs import get_logger
from .texts import ZH
from .texts import current as texts_lang

log = get_logger("runner_kit.steering")

PULL_TIMEOUT = 5.0
POLL_INTERVAL = 0.5  # seconds between pulls while a turn runs (follow-up-mode: interrupt)
FOLLOW_UP_MODES = ("next-turn", "interrupt")
TURNS_WHILE_OTHERS_WAIT = 1  # more turns a session gets while another session's follow-ups wait
TURN_MAX_BYTES = 64 * 1024 * 1024  # files of one turn of follow-ups, together (the first always goes)


def steering_allowed(ctx: Any) -> bool:
    apis = getattr(getattr(ctx, "context", None), "available_apis", None)
    return bool(getattr(apis, "steering_pull", False))


def follow_up_mode(config: Any) -> str:
    value = str((config.get("follow-up-mode") if config is not None else None) or "next-turn").strip().lower()
    return value if value in FOLLOW_UP_MODES else "next-turn"


def item_command(item: Any, config: Any) -> Command | None:
    """The chat command a follow-up is (runner_kit.chat_commands): text only, an item with
    attachments or other content never is one."""
    source = getattr(item, "input", None)
    if source is None or getattr(source, "attachments", None):
        return None
    if any(getattr(c, "type", "text") != "text" for c in getattr(source, "contents", None) or []):
        return None
    return parse(text_of(item), prefix_of(config))


def text_of(item: Any) -> str:
    inp = getattr(item, "input", None)
    if inp is None:
        return ""
    try:
        return str(inp.to_text() or "")
    except Exception:  # noqa: BLE001 - a malformed item still counts as a follow-up
        return ""


@dataclass
class Steering:
    """The follow-ups of one run: what was pulled and what still needs an answer."""

    ctx: Any
    enabled: bool = False
    pending: list[Any] = field(default_factory=list)  # pulled, not yet handed to a turn
    in_turn: list[Any] = field(default_factory=list)  # handed to the running turn, not answered yet
    answered: int = 0
    hold: bool = False  # a question to the chat is open: the interrupt poller leaves follow-ups alone
    # the session a follow-up belongs to (runner_kit.sessions.key_of), and the one being answered:
    # a follow-up of another session is kept in ``others`` and answered in that session afterwards
    route: Callable[[Any], str | None] | None = None
    key: str | None = None
    others: dict[str, list[Any]] = field(default_factory=dict)
    streak: int = 0  # turns the session being answered took while another session's follow-ups waited
    # set when a running turn took follow-ups into itself (RunEnv.follow_ups): the interrupt poller goes on
    taken: asyncio.Event = field(default_factory=asyncio.Event)
    # chat commands (runner_kit.chat_commands), when the runner takes them: the run's config; a
    # command never becomes a turn, it waits in ``commands`` to be answered between turns, and a
    # ``/stop`` goes to ``on_stop`` at once (True: it stopped a running turn, nothing more to say)
    command_config: Any = None
    # (item, command, the follow-ups a /stop came after: never started, named in its answer)
    commands: list[tuple[Any, Any, list[Any]]] = field(default_factory=list)
    on_stop: Callable[[Any], bool] | None = None
    unstarted: list[Any] = field(default_factory=list)  # what came before a /stop that stopped the turn

    @classmethod
    def for_run(cls, ctx: Any) -> Steering:
        return cls(ctx=ctx, enabled=steering_allowed(ctx))

    async def pull(self) -> int:
        """Take every follow-up the host holds for this run; how many arrived for the session being
        answered (the others wait in ``others``)."""
        return sum(self.keep(item) for item in await self.pull_new())

    def session_of(self, item: Any) -> str | None:
        """The session a follow-up belongs to; None when it cannot be told (it stays with this one)."""
        if self.route is None:
            return None
        try:
            return self.route(item)
        except Exception as exc:  # noqa: BLE001 - an item whose sender cannot be told apart stays here
            log.info("could not tell whose session a follow-up belongs to: %s", type(exc).__name__)
            return None

    def keep(self, item: Any) -> bool:
        """File a pulled follow-up under its session; True when that is the session being answered.
        A chat command is filed in ``commands`` instead (a ``/stop`` that stopped a turn nowhere)."""
        if self.command_config is not None:
            cmd = item_command(item, self.command_config)
            if cmd is not None:
                stopped = False
                if cmd.name == "stop" and self.on_stop is not None:
                    try:
                        stopped = self.on_stop(item)
                    except Exception as exc:  # noqa: BLE001 - then it is answered between turns
                        log.warning("a /stop could not stop the turn: %s", type(exc).__name__)
                before: list[Any] = []
                if cmd.name == "stop":  # what came before it is not started; what comes after it is
                    own = self.session_of(item)
                    if stopped or own is None or own == self.key:
                        before, self.pending = self.pending, []
                    else:
                        before = self.others.pop(own, [])
                if stopped:
                    self.unstarted.extend(before)
                else:
                    self.commands.append((item, cmd, before))
                return False
        key = self.session_of(item)
        if key is None or key == self.key:
            self.pending.append(item)
            return True
        self.others.setdefault(key, []).append(item)
        return False

    def next_session(self) -> tuple[str, list[Any]]:
        """The next other session with follow-ups, in the order they came; it is answered now."""
        key = next(iter(self.others))
        self.key = key
        self.streak = 0
        return key, self.others.pop(key)

    def defer(self) -> bool:
        """Called before the session being answered takes its next follow-ups: while another
        session's follow-ups wait, it gets :data:`TURNS_WHILE_OTHERS_WAIT` more turns, then gives its
        turn up and its follow-ups wait behind theirs (sessions in the order they came). So one
        member who keeps writing never keeps another member's message waiting for more than that.
        True when it gave its turn up."""
        if not self.others or not self.pending or self.key is None:
            if not self.others:
                self.streak = 0
            return False
        if self.streak < TURNS_WHILE_OTHERS_WAIT:
            self.streak += 1
            return False
        self.others.setdefault(self.key, []).extend(self.pending)
        self.pending = []
        self.streak = 0
        return True

    def drop_all(self) -> None:
        """Forget every follow-up (they were named as unanswered)."""
        self.pending.clear()
        self.in_turn = []
        self.others.clear()

    async def pull_new(self) -> list[Any]:
        """The follow-ups the host holds for this run, not yet added to ``pending`` (the caller
        decides: an answer to a question is consumed, anything else goes to ``pending``)."""
        if not self.enabled:
            return []
        try:
            result = await self.ctx.api.steering_pull(mode="all", limit=100)
        except Exception as exc:  # noqa: BLE001 - a failed pull must not fail the answer already given
            log.warning("could not pull follow-up messages from LangBot: %s", type(exc).__name__)
            return []
        items = list(getattr(result, "items", None) or [])
        if items:
            log.info("%d follow-up message(s) for this run", len(items))
        return items

    def take(self) -> list[Any]:
        """The pending follow-ups, now handed to a turn."""
        batch, self.pending = self.pending, []
        self.in_turn = batch
        return batch

    def take_into_turn(self) -> list[Any]:
        """The pending follow-ups, taken into the turn already running (answered when it ends)."""
        batch, self.pending = self.pending, []
        self.in_turn = [*self.in_turn, *batch]
        self.taken.set()
        return batch

    def turn_done(self) -> None:
        self.answered += len(self.in_turn)
        self.in_turn = []

    def unanswered(self) -> list[str]:
        """Texts of follow-ups pulled but never answered (for the closing note)."""
        return [text_of(i) for i in (*self.in_turn, *self.pending, *(i for v in self.others.values() for i in v),
                                     *(c[0] for c in self.commands))]


async def follow_up_input(ctx: Any, items: list[Any], *, max_bytes: int = DEFAULT_MAX_BYTES,
                          names: bool = False) -> UserInput:
    """One turn's input from a batch of follow-ups: texts joined in order (each after its sender's
    name with ``names``: several people wrote; told apart from ``ctx``'s sender and each other where
    display names are the same, :func:`runner_kit.sessions.labels`), files from each."""
    texts: list[str] = []
    files: list[InputFile] = []
    skipped: list[str] = []
    shown = sessions.labels([sessions.person(ctx), *(sessions.person(i) for i in items)]) if names else {}
    for item in items:
        source = getattr(item, "input", None)
        if source is None:
            continue
        try:
            got = await collect_input(ctx, max_bytes=max_bytes, source=source)
        except RunnerError as exc:  # one sender's file (too large, not base64) never fails the others' turn
            log.info("a follow-up's attachments were not used: %s", exc.code)
            got = UserInput(text=text_of(item), files=[], params={}, skipped=[exc.message])
        if names:
            texts.append(sessions.named(shown.get(sessions.person(item)), got.text))
        elif got.text.strip():
            texts.append(got.text.strip())
        for f in got.files:  # a flood of attachments is not one turn of unbounded size
            if files and sum(x.size for x in files) + f.size > TURN_MAX_BYTES:
                skipped.append(f"'{f.name}' was not sent: the follow-ups of this turn already carry "
                               f"{sum(x.size for x in files) / 1048576:.1f} MiB of files")
                continue
            files.append(f)
        skipped.extend(got.skipped)
    params = {}
    adapter = getattr(ctx, "adapter", None)
    if adapter is not None and isinstance(getattr(adapter, "extra", None), dict):
        raw = adapter.extra.get("params")
        params = dict(raw) if isinstance(raw, dict) else {}
    return UserInput(text="\n\n".join(texts), files=files, params=params, skipped=skipped)


def quoted(texts: list[str]) -> str:
    """A few messages named in a note: the first three, each on one line and cut at 60 characters."""
    shown = [x if len(x) <= 60 else x[:57] + "…" for x in (" ".join(t.split()) for t in texts) if x]
    return "; ".join(f"“{x}”" for x in shown[:3]) + (" …" if len(shown) > 3 else "")


def unanswered_note(texts: list[str]) -> str:
    """One line telling the chat which follow-ups this run could not answer."""
    what = quoted(texts)
    n = len(texts)
    if texts_lang() == ZH:
        return f"（有 {n} 条追问因本次运行已结束而未得到回答" + (f"：{what}" if what else "") + "。请重新发送。）"
    head = f"({n} follow-up message{'s' if n != 1 else ''} not answered because the run ended"
    return f"{head}: {what}. Please send again.)" if what else f"{head}. Please send again.)"
