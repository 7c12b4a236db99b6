"""One Codex turn's app-server notifications as kit events.

Order for a turn (real transcripts ``codex-app-server/*.jsonl``): ``turn/start`` → result
``{turn: {id, status: "inProgress"}}`` → ``turn/started`` → ``item/started`` / ``item/completed``
for the ``userMessage`` → per item ``item/started`` → its deltas → ``item/completed`` →
``thread/tokenUsage/updated`` after each model request → ``turn/completed {turn: {status}}``.

- ``agentMessage``: ``item/agentMessage/delta`` pieces are the answer; a second message in the same
  turn (Codex says something, runs a tool, then answers) starts a new paragraph. The completed
  item's ``text`` fills in whatever no delta carried.
- ``reasoning``: ``item/reasoning/summaryTextDelta`` / ``textDelta`` are think text; a completed
  item whose text never streamed is shown from its ``summary`` / ``content``.
- ``commandExecution``, ``fileChange``, ``mcpToolCall``, ``webSearch``, ``dynamicToolCall``,
  ``imageView``: tool started / completed.
- ``thread/tokenUsage/updated``: Codex counts per thread and cumulatively (a resumed thread first
  repeats the count it ended with, under that old turn's id), so a turn's usage is the difference of
  the thread totals (:class:`UsageMeter`).
- ``error``: ``willRetry`` ones are progress ("Reconnecting… 1/2"); a final one is kept and raised
  when ``turn/completed`` says ``failed``. When the model API cannot be connected to at all, Codex
  0.171.0 retries "waiting for network" every 5 s without end (captured/connection-refused.jsonl):
  after ``network_retries`` such notices the turn gives up (``give_up``) instead of hanging until
  the run's time limit.
- ``warning`` (the model-metadata note every custom-provider model gets) and other notices: a
  processor-log line, never answer text and never an error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from runner_kit import events as ev
from runner_kit.errors import RunnerError

from .const import IGNORED_NOTIFICATIONS, LOGGED_NOTIFICATIONS
from .errors import is_retry_notice, network_wait, turn_error, unreachable
from .rpc import Notification

_COUNTS = ("inputTokens", "outputTokens", "totalTokens", "cachedInputTokens", "cacheWriteInputTokens",
           "reasoningOutputTokens")
_EXTRA = {"cachedInputTokens": "cached_input_tokens", "cacheWriteInputTokens": "cache_write_input_tokens",
          "reasoningOutputTokens": "reasoning_output_tokens"}
_TOOL_ITEMS = frozenset({"commandExecution", "fileChange", "mcpToolCall", "webSearch", "dynamicToolCall",
                         "imageView", "collabAgentToolCall"})
_FAILED = frozenset({"failed", "declined"})
_OUTPUT_LIMIT = 4000  # characters of a command's output kept on tool.call.completed


def _counts(raw: Any) -> dict[str, int] | None:
    if not isinstance(raw, dict):
        return None
    out = {k: v for k in _COUNTS if isinstance(v := raw.get(k), int) and not isinstance(v, bool) and v >= 0}
    return out or None


class UsageMeter:
    """A thread's cumulative token counts turned into per-turn usage."""

    def __init__(self, *, fresh_thread: bool):
        # the thread's totals before the current turn; zero for a thread started in this process
        self.before: dict[str, int] | None = {} if fresh_thread else None
        self.now: dict[str, int] | None = None
        self.summed: dict[str, int] = {}  # fallback: the per-request `last` counts of this turn
        self.reported: dict[str, int] = {}  # what this turn's usage events already carried

    def update(self, params: dict[str, Any], turn_id: str | None) -> ev.Usage | None:
        """Take one ``thread/tokenUsage/updated``; the usage this turn added since the last report
        (after each model request: the budgets see a long turn's usage while it runs)."""
        usage = v if isinstance(v := params.get("tokenUsage"), dict) else {}
        total = _counts(usage.get("total"))
        if total is None:
            return None
        other = params.get("turnId")
        if other and turn_id and other != turn_id:
            self.before = total  # the count an earlier turn ended with (repeated on resume)
            return None
        self.now = total
        if (last := _counts(usage.get("last"))) is not None:
            for k, v in last.items():
                self.summed[k] = self.summed.get(k, 0) + v
        return self._increment(self._diff(self.now, self.before, self.summed))

    @staticmethod
    def _diff(now: dict[str, int] | None, before: dict[str, int] | None, summed: dict[str, int]) -> dict[str, int]:
        if now is None:
            return {}
        if before is None:  # resumed and the old count was never repeated: add up the requests
            return dict(summed)
        return {k: max(v - before.get(k, 0), 0) for k, v in now.items()}

    def _increment(self, diff: dict[str, int]) -> ev.Usage | None:
        step = {k: v - self.reported.get(k, 0) for k, v in diff.items() if v - self.reported.get(k, 0) > 0}
        if not step:
            return None
        for k, v in step.items():
            self.reported[k] = self.reported.get(k, 0) + v
        extra = {name: step[k] for k, name in _EXTRA.items() if step.get(k)}
        return ev.Usage(step.get("inputTokens"), step.get("outputTokens"), step.get("totalTokens"), extra)

    def finish_turn(self) -> ev.Usage | None:
        """What of this turn's usage no report carried yet (None when nothing is left, or Codex
        reported none), and the start of the next turn's."""
        now, before, summed = self.now, self.before, self.summed
        rest = self._increment(self._diff(now, before, summed))
        self.now, self.summed, self.reported = None, {}, {}
        if now is not None:
            self.before = now
        return rest


@dataclass
class TurnMapper:
    """Notifications of the turn ``turn_id`` in, kit events out; ``done`` once it completed."""

    thread_id: str
    turn_id: str | None
    usage: UsageMeter
    network_retries: int = 2  # "waiting for network" notices to sit through before giving up
    done: bool = False
    give_up: RunnerError | None = None  # end the turn now (Codex would wait for the network forever)
    status: str | None = None
    error: RunnerError | None = None
    interrupted: bool = False
    _texts: dict[str, str] = field(default_factory=dict)  # agentMessage id -> text emitted so far
    _thinks: dict[str, str] = field(default_factory=dict)  # reasoning id -> think text emitted so far
    _tools: dict[str, str] = field(default_factory=dict)  # tool item id -> tool name, while running
    _answered: bool = False  # some answer text was emitted in this turn
    _last_error: dict[str, Any] | None = None
    _network_waits: int = 0

    def feed(self, note: Notification) -> list[ev.Event]:
        method, p = note.method, note.params
        if not self._mine(p):
            return []
        if method == "item/agentMessage/delta":
            return self._text(str(p.get("itemId") or ""), p.get("delta"))
        if method in ("item/reasoning/summaryTextDelta", "item/reasoning/textDelta"):
            return self._think(str(p.get("itemId") or ""), p.get("delta"))
        if method == "item/reasoning/summaryPartAdded":
            item = str(p.get("itemId") or "")
            return self._think(item, "\n\n") if self._thinks.get(item) else []
        if method == "item/plan/delta":
            return []
        if method == "item/started":
            return self._started(p.get("item"))
        if method == "item/completed":
            return self._completed(p.get("item"))
        if method == "thread/tokenUsage/updated":
            step = self.usage.update(p, self.turn_id)
            return [step] if step is not None else []
        if method == "turn/plan/updated":
            return self._plan(p)
        if method == "error":
            return self._error(p)
        if method == "turn/completed":
            return self._finish(p.get("turn"))
        if method in LOGGED_NOTIFICATIONS:
            text = p.get("message") or p.get("summary") or ""
            return [ev.Log(f"Codex {method}: {text}", "warning" if method != "deprecationNotice" else "info")] if text else []
        if method not in IGNORED_NOTIFICATIONS:
            return [ev.Log(f"Codex notification {method} (not used)", "debug")]
        return []

    def _mine(self, p: dict[str, Any]) -> bool:
        thread = p.get("threadId")
        if thread and thread != self.thread_id:
            return False
        turn = p.get("turnId")
        if turn is None and isinstance(p.get("turn"), dict):
            turn = p["turn"].get("id")
        # a usage count may name an earlier turn (repeated on resume): the meter sorts it out
        return not (turn and self.turn_id and turn != self.turn_id) or "tokenUsage" in p

    # --- answer and reasoning ------------------------------------------------------------------

    def _text(self, item: str, delta: Any) -> list[ev.Event]:
        if not isinstance(delta, str) or not delta:
            return []
        out: list[ev.Event] = []
        if item not in self._texts:
            self._texts[item] = ""
            if self._answered:
                out.append(ev.Text("\n\n"))  # a later message of the same turn starts a new paragraph
        self._texts[item] += delta
        self._answered = True
        out.append(ev.Text(delta))
        return out

    def _think(self, item: str, delta: Any) -> list[ev.Event]:
        if not isinstance(delta, str) or not delta:
            return []
        self._thinks[item] = self._thinks.get(item, "") + delta
        return [ev.Think(delta)]

    # --- items ---------------------------------------------------------------------------------

    def _started(self, item: Any) -> list[ev.Event]:
        if not isinstance(item, dict) or item.get("type") not in _TOOL_ITEMS:
            return []
        iid = str(item.get("id") or "")
        if iid in self._tools:
            return []
        name, params = _tool(item)
        self._tools[iid] = name
        return [ev.ToolStarted(iid, name, params)]

    def _completed(self, item: Any) -> list[ev.Event]:
        if not isinstance(item, dict):
            return []
        kind, iid = item.get("type"), str(item.get("id") or "")
        if kind == "agentMessage":
            text = item.get("text")
            seen = self._texts.get(iid)
            if not isinstance(text, str) or not text:
                return []
            if seen is None:
                return self._text(iid, text)
            if text.startswith(seen) and len(text) > len(seen):
                return self._text(iid, text[len(seen):])
            return []
        if kind == "reasoning":
            if self._thinks.get(iid):
                return []
            text = _reasoning_text(item)
            return self._think(iid, text) if text else []
        if kind in _TOOL_ITEMS:
            out = [] if iid in self._tools else self._started(item)
            name = self._tools.pop(iid, None) or _tool(item)[0]
            result, error = _tool_result(item)
            out.append(ev.ToolCompleted(iid, name, result, error))
            return out
        return []

    def _plan(self, p: dict[str, Any]) -> list[ev.Event]:
        steps = v if isinstance(v := p.get("plan"), list) else []
        current = next((s.get("step") for s in steps if isinstance(s, dict) and s.get("status") == "inProgress"), None)
        return [ev.Progress(f"📋 {current}")] if isinstance(current, str) and current else []

    # --- end of the turn ---------------------------------------------------------------------

    def _error(self, p: dict[str, Any]) -> list[ev.Event]:
        err = v if isinstance(v := p.get("error"), dict) else {}
        message = str(err.get("message") or "").strip()
        if is_retry_notice(p):
            details = str(err.get("additionalDetails") or "").strip()
            if network_wait(message, details):
                self._network_waits += 1
                if self._network_waits > self.network_retries:
                    self.give_up = unreachable(details or message)
            shown = f"{message} ({details})" if details and details not in message else message
            return [ev.Log(f"Codex is retrying: {shown}", "warning"), ev.Progress(f"⏳ {message}")] if message else []
        self._last_error = err
        return [ev.Log(f"Codex error: {message}", "warning")] if message else []

    def _finish(self, turn: Any) -> list[ev.Event]:
        turn = turn if isinstance(turn, dict) else {}
        self.done = True
        self.status = str(turn.get("status") or "completed")
        out: list[ev.Event] = []
        for iid, name in list(self._tools.items()):  # a tool the turn never completed (interrupt)
            out.append(ev.ToolCompleted(iid, name, None, "stopped before it finished"))
        self._tools.clear()
        if (usage := self.usage.finish_turn()) is not None:
            out.append(usage)
        if self.status == "failed":
            self.error = turn_error(turn.get("error") or self._last_error)
        elif self.status == "interrupted":
            self.interrupted = True
        elif not self._answered and self._last_error is not None:
            self.error = turn_error(self._last_error)  # completed, but only an error to show for it
        return out


def _tool(item: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    kind = item.get("type")
    if kind == "commandExecution":
        command = item.get("command")
        actions = item.get("commandActions")
        if isinstance(actions, list) and len(actions) == 1 and isinstance(actions[0], dict):
            command = actions[0].get("command") or command  # without the `/bin/bash -lc '…'` wrapper
        return "shell", {"command": command, "cwd": item.get("cwd")}
    if kind == "fileChange":
        changes = v if isinstance(v := item.get("changes"), list) else []
        paths = [str(c.get("path")) for c in changes if isinstance(c, dict) and c.get("path")]
        kinds = [_change_kind(c) for c in changes if isinstance(c, dict)]
        return "edit", {"path": ", ".join(paths), "paths": paths, "kinds": kinds}
    if kind == "mcpToolCall":
        server, tool = item.get("server") or "mcp", item.get("tool") or "tool"
        args = item.get("arguments")
        return f"{server}.{tool}", args if isinstance(args, dict) else {"arguments": args}
    if kind == "dynamicToolCall":
        args = item.get("arguments")
        return str(item.get("tool") or "tool"), args if isinstance(args, dict) else {"arguments": args}
    if kind == "webSearch":
        return "web_search", {"query": item.get("query")}
    if kind == "imageView":
        return "view_image", {"path": item.get("path")}
    return str(kind or "tool"), {}


def _change_kind(change: dict[str, Any]) -> str:
    kind = change.get("kind")
    if isinstance(kind, dict):
        return str(kind.get("type") or "update")
    return str(kind or "update")


def _tool_result(item: dict[str, Any]) -> tuple[Any, str | None]:
    kind, status = item.get("type"), item.get("status")
    error: str | None = None
    if kind == "commandExecution":
        output = item.get("aggregatedOutput")
        if isinstance(output, str) and len(output) > _OUTPUT_LIMIT:
            output = output[:_OUTPUT_LIMIT] + "…"
        result: Any = {"exit_code": item.get("exitCode"), "output": output}
        code = item.get("exitCode")
        if status in _FAILED:
            error = "declined" if status == "declined" else f"failed (exit code {code})"
        elif isinstance(code, int) and code != 0:
            error = f"exit code {code}"
        return result, error
    if kind == "mcpToolCall":
        err = item.get("error")
        if isinstance(err, dict) and err.get("message"):
            error = str(err["message"])
        elif status in _FAILED:
            error = str(status)
        return item.get("result"), error
    if status in _FAILED:
        error = str(status)
    if kind == "fileChange":
        return {"status": status}, error
    return item.get("contentItems") or item.get("result") or {"status": status}, error


def _reasoning_text(item: dict[str, Any]) -> str:
    parts: list[str] = []
    for key in ("summary", "content"):
        value = item.get(key)
        if isinstance(value, list):
            for piece in value:
                text = piece if isinstance(piece, str) else piece.get("text") if isinstance(piece, dict) else None
                if isinstance(text, str) and text.strip():
                    parts.append(text.strip())
        if parts:
            break
    return "\n\n".join(parts)
