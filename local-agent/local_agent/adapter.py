"""LocalAgent's agent loop on LangBot's own models, tools and knowledge bases, all through ``ctx.api``.

One run keeps one conversation (``multi_turn``): each turn (the run's message, then each batch of
follow-ups LangBot hands over) sends ``[system prompt (+ date, skills, knowledge), summary checkpoint,
prompt examples, earlier messages from the transcript, this run's messages]`` to the model; tool calls
the model asks for run through ``call_tool`` (LangBot's tracing reports them as ``tool.call.*``) and
their results go back until the model answers, a batch terminates, or the round limit is reached.

Before every model call the request is measured with LangBot's ``count_tokens`` (no estimates);
over the budget, older history is summarised once and the summary stored as a conversation
checkpoint the next runs start from.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from typing import Any, TypeVar, get_args

from langbot_plugin.api.entities.builtin.provider.message import LLMTokenUsage, Message, MessageChunk
from langbot_plugin.api.entities.builtin.provider.reasoning import ReasoningLevel
from langbot_plugin.api.entities.builtin.resource.tool import LLMTool
from langbot_plugin.api.entities.builtin.runner.errors import AgentAPIException
from langbot_plugin.api.proxies.runner.common import PermissionDeniedError

from runner_kit import events as ev
from runner_kit.errors import RunnerError
from runner_kit.host_api import host_error, is_context_overflow, no_token_counting
from runner_kit.inputs import UserInput
from runner_kit.runner import Adapter, RunEnv

from . import const
from .context import (
    Msg,
    Prompt,
    knowledge_block,
    load_history,
    load_prompt,
    operations,
    system_text,
    user_message,
)
from .tools import Call, Outcome, definitions, run_batch, terminal_text

T = TypeVar("T")
REASONING_LEVELS = frozenset(get_args(ReasoningLevel))
FINAL_ROUND_NOTE = (
    "(You have used every tool round this answer allows. Do not call tools any more: give the best "
    "answer you can with what you have found so far, and say what is still missing.)"
)
SUMMARY_INSTRUCTIONS = (
    "You compress a conversation so it can continue later. Write a concise summary of the conversation "
    "below: the user's goals and preferences, facts and decisions, names, numbers, file paths and URLs "
    "that matter, and open questions. Keep any earlier summary's content that still matters. Write the "
    "summary only, in the conversation's language."
)


class _Interrupted(Exception):
    """The turn was interrupted (a follow-up arrived in ``follow-up-mode: interrupt``)."""


@dataclass
class Reply:
    """What one model call produced."""

    text: str = ""
    calls: dict[str, Call] = field(default_factory=dict)
    extra: dict[str, Any] | None = None
    interrupted: bool = False

    def reset(self) -> None:
        self.text, self.calls, self.extra, self.interrupted = "", {}, None, False

    def add_fragment(self, tc: Any) -> None:
        fn = tc.function
        key = tc.id or (next(reversed(self.calls)) if self.calls else "call_0")
        call = self.calls.get(key)
        if call is None:
            self.calls[key] = Call(key, fn.name or "", fn.arguments or "", tc.provider_specific_fields)
            return
        call.name = call.name or fn.name or ""
        call.arguments += fn.arguments or ""

    def message(self, with_calls: bool) -> Msg:
        msg: Msg = {"role": "assistant", "content": self.text}
        if with_calls and self.calls:
            msg["tool_calls"] = [c.as_tool_call() for c in self.calls.values()]
        if self.extra:
            msg["provider_specific_fields"] = self.extra
        return msg


def _usage(u: LLMTokenUsage | None) -> ev.Usage | None:
    if u is None:
        return None
    return ev.Usage(u.prompt_tokens, u.completion_tokens, u.total_tokens, dict(u.model_extra or {}))


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(getattr(p, "text", None) or "" for p in content if getattr(p, "type", None) == "text")
    return ""


def _as_text(msg: Msg) -> str:
    content = msg.get("content")
    if isinstance(content, list):
        return " ".join(
            str(p.get("text") or "") if p.get("type") == "text" else f"[{p.get('type')}]" for p in content
        )
    return str(content or "")


def _short(name: str, params: dict[str, Any]) -> str:
    shown = ", ".join(f"{k}={v}" if not isinstance(v, str) else f"{k}={v!r}" for k, v in list(params.items())[:3])
    shown = shown if len(shown) <= 80 else shown[:77] + "…"
    return f"⏳ {name}: {shown}" if shown else f"⏳ {name}"


async def _advance(it: AsyncIterator[T]) -> T:
    return await anext(it)


class LocalAdapter(Adapter):
    """The agent loop of one run; see the module docstring."""

    platform = const.PLATFORM
    multi_turn = True

    def __init__(self, env: RunEnv):
        super().__init__(env)
        cfg = env.config
        self.streaming = bool(getattr(env.ctx.delivery, "supports_streaming", False))
        self.remove_think = bool(cfg.get("remove-think"))
        self.max_rounds = int(cfg.get("max-tool-iterations") or 0)
        self.parallel = cfg.get("tool-execution-mode") == "parallel"
        self.max_chars = int(cfg.get("max-tool-result-chars") or 20000)
        window = int(cfg.get("context-window-tokens") or 200000)
        hinted = (env.ctx.runtime.metadata or {}).get("model_context_window_tokens")
        if isinstance(hinted, int) and not isinstance(hinted, bool) and hinted > 0:
            window = min(window, hinted)
        self.limit = window - int(cfg.get("context-reserve-tokens") or 0)
        self.keep_recent = int(cfg.get("context-keep-recent-tokens") or 0)
        self.summary_tokens = int(cfg.get("context-summary-tokens") or 8000)
        self.models: list[str] = []
        self.model_ops: dict[str, frozenset[str]] = {}
        self.active = 0
        self.reasoning: dict[str, str] = {}  # model id -> reasoning level (LangBot's model-fallback-selector)
        self.tools: list[LLMTool] = []
        self.prompt = Prompt("", [])
        self.history: list[tuple[int, Msg]] = []
        stored = (env.ctx.state.conversation or {}).get(const.CHECKPOINT_KEY)
        self.checkpoint: dict[str, Any] | None = stored if isinstance(stored, dict) and stored.get("summary") else None
        self.transcript: list[Msg] = []  # this run: user turns, assistant replies, tool results
        self.system = ""
        self.request: list[Msg] = []
        self._sizes: dict[int, int] = {}  # history seq -> its tokens, counted once per run
        self._notes: list[str] = []
        self._ready = False
        self._shown = False  # answer text went to the chat in this turn
        self._stop = asyncio.Event()

    # --- setup -----------------------------------------------------------------------------

    def note(self, text: str) -> None:
        self._notes.append(text)

    def _drain(self) -> list[ev.Event]:
        out: list[ev.Event] = [ev.Log(t) for t in self._notes]
        self._notes.clear()
        return out

    def _pick_models(self) -> None:
        raw = self.env.config.get("model")
        chain: list[Any] = []
        if isinstance(raw, str):
            chain = [raw]
        elif isinstance(raw, dict):
            chain = [raw.get("primary"), *(raw.get("fallbacks") or [])]
            chosen = raw.get("reasoning")
            if isinstance(chosen, dict):  # what LangBot's form stores: {model id: level}
                self.reasoning = {m: v for m, v in chosen.items() if isinstance(v, str) and v in REASONING_LEVELS}
            elif isinstance(chosen, str) and chosen in REASONING_LEVELS:  # one level for every model
                self.reasoning = {m: chosen for m in chain if isinstance(m, str)}
        chain = list(dict.fromkeys(m.strip() for m in chain if isinstance(m, str) and m.strip()))
        if not chain:
            raise RunnerError("config.invalid", "config key 'model' names no model: choose the model to answer with")
        granted = {m.model_id: operations(m, "model") for m in self.env.ctx.resources.models}
        need = "stream" if self.streaming else "invoke"
        for model in chain:
            ops = granted.get(model)
            if ops is None:
                self.note(f"model {model!r} is not available to this run (LangBot did not grant it); skipped")
            elif need not in ops:
                self.note(f"model {model!r} may not be used to {need} in this run; skipped")
            else:
                self.models.append(model)
                self.model_ops[model] = ops
        if not self.models:
            raise RunnerError(
                "config.invalid",
                f"config key 'model': none of the configured models ({', '.join(chain)}) is available to this "
                "run; check that they still exist in LangBot's model settings",
            )

    async def _setup(self) -> None:
        cfg, ctx = self.env.config, self.env.ctx
        self._pick_models()
        if str(cfg.get("box-session-id-template") or "").strip():
            self.note("box-session-id-template is set, but LocalAgent uses no box; the value is ignored")
        self.tools = await definitions(ctx, self.note)
        self.prompt = await load_prompt(ctx, cfg.get("prompt"), self.note)
        through = self.checkpoint.get("through_seq") if self.checkpoint else None
        self.history = await load_history(
            ctx, int(cfg.get("context-history-fetch-limit") or 0), through if isinstance(through, int) else None,
            self.note,
        )
        self._ready = True

    def _rerank_model(self) -> str | None:
        rid = str(self.env.config.get("rerank-model") or "").strip()
        if not rid or rid in ("__none__", "__none"):
            return None
        for m in self.env.ctx.resources.models:
            if m.model_id == rid and "rerank" in operations(m, "model"):
                return rid
        self.note(f"rerank model {rid!r} is not available to this run; passages are not reranked")
        return None

    # --- the turn --------------------------------------------------------------------------

    async def turn(self, inp: UserInput, index: int) -> AsyncIterator[ev.Event]:
        cfg = self.env.config
        self._stop = asyncio.Event()
        self._shown = False
        if not self._ready:
            await self._setup()
        knowledge = await knowledge_block(
            self.env.ctx, inp.text, top_k=int(cfg.get("retrieval-top-k") or 5),
            rerank_model=self._rerank_model() if self.env.ctx.resources.knowledge_bases else None,
            rerank_top_k=int(cfg.get("rerank-top-k") or 5), log=self.note,
        )
        self.system = system_text(
            self.prompt, date=bool(cfg.get("date-grounding")), skills=list(self.env.ctx.resources.skills or []),
            knowledge=knowledge,
        )
        for e in self._drain():
            yield e
        self.transcript.append(user_message(inp))
        rounds = 0
        while True:
            offer = self.tools if rounds < self.max_rounds else []
            note = FINAL_ROUND_NOTE if self.tools and not offer and rounds else None
            reply = Reply()
            async for e in self._model(offer, note, reply):
                yield e
            self.transcript.append(reply.message(with_calls=bool(offer) and not reply.interrupted))
            if reply.interrupted or not reply.calls or not offer:
                return
            outcomes: list[Outcome] = []
            async for e in self._run_tools(list(reply.calls.values()), outcomes):
                yield e
            self.transcript.extend(o.message(self.max_chars) for o in outcomes)
            rounds += 1
            if all(o.terminates for o in outcomes):
                if not self._shown:
                    text = terminal_text(outcomes)
                    yield ev.Text(text) if text else ev.NoReply()
                return
            if self._stop.is_set():
                return

    async def _run_tools(self, calls: list[Call], out: list[Outcome]) -> AsyncIterator[ev.Event]:
        for call in calls:
            try:
                params = call.parsed()
            except ValueError:
                params = {}
            yield ev.Progress(_short(call.name, params))
            if not self.parallel:
                out.extend(await run_batch(self.env.ctx, [call], parallel=False))
        if self.parallel:
            out.extend(await run_batch(self.env.ctx, calls, parallel=True))

    async def interrupt(self) -> None:
        self._stop.set()

    # --- one model call: budget, fallback, overflow retry ------------------------------------

    async def _model(self, funcs: list[LLMTool], note: str | None, reply: Reply) -> AsyncIterator[ev.Event]:
        harder = False
        while True:
            model = self.models[self.active]
            async for e in self._fit(model, funcs, note, harder):
                yield e
            try:
                async for e in self._invoke(model, funcs, reply):
                    yield e
                return
            except PermissionDeniedError as exc:
                raise host_error(exc, what=f"the model {model!r}") from None
            except AgentAPIException as exc:
                if self._shown:
                    raise host_error(exc, what=f"the model {model!r}") from None
                if is_context_overflow(exc) and not harder:
                    yield ev.Log(f"the model {model!r} reports the request is over its context window; "
                                 "summarising more of the conversation and trying once more")
                    harder = True
                    reply.reset()
                    continue
                err = host_error(exc, what=f"the model {model!r}")
                if err.retryable and self.active + 1 < len(self.models):
                    self.active += 1
                    yield ev.Log(f"{err.message}; trying the fallback model {self.models[self.active]!r}")
                    reply.reset()
                    continue
                raise err from None

    async def _race(self, aw: Awaitable[T]) -> T:
        """``aw``'s result, unless the turn is interrupted first (raises _Interrupted)."""
        task = asyncio.ensure_future(aw)
        stop = asyncio.ensure_future(self._stop.wait())
        try:
            await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
        if task.cancelled():
            raise _Interrupted
        return task.result()

    def _kwargs(self, model: str, messages: list[Msg], funcs: list[LLMTool]) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "llm_model_uuid": model,
            "messages": [Message.model_validate(m) for m in messages],
            "funcs": funcs or None,
            "remove_think": self.remove_think,
        }
        level = self.reasoning.get(model)
        if level and level != "provider_default":  # the default needs no host feature
            kwargs["reasoning_level"] = level
        return kwargs

    def _say(self, text: str, reply: Reply) -> list[ev.Event]:
        out: list[ev.Event] = []
        if not text:
            return out
        if self._shown and not reply.text:
            out.append(ev.Text("\n\n"))  # a new round's text after an earlier round's
        reply.text += text
        self._shown = True
        out.append(ev.Text(text))
        return out

    def _absorb(self, usage: LLMTokenUsage | None, part: Message | MessageChunk | None, reply: Reply) -> list[ev.Event]:
        """One answer (or stream chunk) of the model: its usage, its text for the chat, its tool calls."""
        out: list[ev.Event] = [u] if (u := _usage(usage)) is not None else []
        if part is not None:
            out += self._say(_text(part.content), reply)
            for tc in part.tool_calls or []:
                reply.add_fragment(tc)
        return out

    async def _invoke(self, model: str, funcs: list[LLMTool], reply: Reply) -> AsyncIterator[ev.Event]:
        api = self.env.ctx.api
        kwargs = self._kwargs(model, self.request, funcs)
        if not self.streaming:
            try:
                result = await self._race(api.invoke_llm_with_usage(**kwargs, timeout=self.env.budget()))
            except _Interrupted:
                reply.interrupted = True
                return
            for e in self._absorb(result.usage, result.message, reply):
                yield e
            reply.extra = result.message.provider_specific_fields
            return
        stream = api.invoke_llm_stream_events(**kwargs)
        async with contextlib.aclosing(stream):
            while True:
                try:
                    event = await self._race(_advance(stream))
                except StopAsyncIteration:
                    return
                except _Interrupted:
                    reply.interrupted = True
                    return
                for e in self._absorb(event.usage, event.chunk, reply):
                    yield e

    # --- token budget and compaction ----------------------------------------------------------

    def _build(self, history: list[tuple[int, Msg]], note: str | None) -> list[Msg]:
        msgs: list[Msg] = [{"role": "system", "content": self.system}] if self.system else []
        if self.checkpoint:
            msgs.append({"role": "system", "content": "Summary of the earlier conversation:\n"
                         + str(self.checkpoint["summary"])})
        msgs += self.prompt.examples
        msgs += [m for _, m in history]
        msgs += self.transcript
        if note:
            msgs.append({"role": "user", "content": note})
        return msgs

    def _no_counter(self, model: str, why: str) -> RunnerError:
        return RunnerError(
            "config.invalid",
            f"LocalAgent needs LangBot's token counter for the model {model!r} to keep the conversation within "
            f"its context window, and it is not available ({why}). Choose a model whose provider supports token "
            "counting, or grant this runner the model's count_tokens operation.",
        )

    async def _count(self, model: str, messages: list[Msg], funcs: list[LLMTool]) -> int:
        if "count_tokens" not in self.model_ops.get(model, frozenset()):
            raise self._no_counter(model, "the run may not count tokens with this model")
        try:
            return int(await self.env.ctx.api.count_tokens(
                model, [Message.model_validate(m) for m in messages], funcs or None
            ))
        except PermissionDeniedError:
            raise self._no_counter(model, "the run may not count tokens with this model") from None
        except AgentAPIException as exc:
            if no_token_counting(exc) or exc.error.code == "host.action_error":
                raise self._no_counter(model, host_error(exc, what="token counting").message) from None
            raise host_error(exc, what=f"counting tokens for the model {model!r}") from None

    async def _fit(self, model: str, funcs: list[LLMTool], note: str | None, harder: bool) -> AsyncIterator[ev.Event]:
        """Set ``self.request`` to a request within the budget, summarising older history when it
        is over (or, ``harder``, always, keeping half as much recent history)."""
        self.request = self._build(self.history, note)
        used = await self._count(model, self.request, funcs)
        if used <= self.limit and not harder:
            return
        keep = self.keep_recent // 2 if harder else self.keep_recent
        recent: list[tuple[int, Msg]] = []
        total = 0
        for seq, msg in reversed(self.history):
            if seq not in self._sizes:
                self._sizes[seq] = await self._count(model, [msg], [])
            if total + self._sizes[seq] > keep:
                break
            total += self._sizes[seq]
            recent.insert(0, (seq, msg))
        older = self.history[: len(self.history) - len(recent)]
        if older:
            yield ev.Log(f"the conversation needs {used} tokens of {self.limit}; summarising {len(older)} older "
                         "message(s)")
            async for e in self._summarise(model, older):
                yield e
            self.history = recent
            self.request = self._build(self.history, note)
            used = await self._count(model, self.request, funcs)
        elif harder:
            used = max(used, self.limit + 1)
        if used > self.limit:
            raise RunnerError(
                "input.too_large",
                f"the request needs {used} tokens but the model's budget is {self.limit} (context window minus "
                "the reserve for the answer), even with the earlier conversation summarised; send a shorter "
                "message or fewer attachments, or raise context-window-tokens if the model allows more",
            )

    async def _summarise(self, model: str, older: list[tuple[int, Msg]]) -> AsyncIterator[ev.Event]:
        lines = []
        if self.checkpoint:
            lines.append(f"Earlier summary:\n{self.checkpoint['summary']}\n")
        lines += [f"{m['role'].capitalize()}: {_as_text(m)}" for _, m in older]
        messages = [Message(role="system", content=SUMMARY_INSTRUCTIONS), Message(role="user", content="\n".join(lines))]
        try:
            result = await self.env.ctx.api.invoke_llm_with_usage(
                model, messages, None, {"max_tokens": self.summary_tokens}, timeout=self.env.budget(),
                remove_think=True,
            )
        except (AgentAPIException, PermissionDeniedError) as exc:
            raise host_error(exc, what=f"summarising the conversation with the model {model!r}") from None
        if (u := _usage(result.usage)) is not None:
            yield u
        summary = _text(result.message.content).strip()
        if not summary:
            raise RunnerError("upstream.empty_response", f"the model {model!r} returned an empty summary of the conversation")
        self.checkpoint = {
            "summary": summary,
            "through_seq": older[-1][0],
            "created_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        }
        yield ev.State(const.CHECKPOINT_KEY, self.checkpoint, scope="conversation")

