"""Reading Langflow's documents: the RunResponse (non-stream body and the stream's ``end`` result)
and the Message objects of ``add_message`` events.

Answer text: ``outputs[i].outputs[j].results.message.text`` (a Message), with the fallbacks Langflow
also fills — ``outputs.message.message``, ``messages[0].message``, ``artifacts.message``. Usage:
``token_usage`` or the message's ``properties.usage``, ``{input_tokens, output_tokens, total_tokens}``
(null when the flow has no model that reports it).
"""

from __future__ import annotations

import json
from typing import Any

from runner_kit import events as ev
from runner_kit.usage import usage_from


def _message_text(msg: Any) -> str | None:
    """The text of one output's ``results.message`` (a Message dict, or a bare string)."""
    if isinstance(msg, str):
        return msg
    if not isinstance(msg, dict):
        return None
    text = msg.get("text")
    if text is None and isinstance(msg.get("data"), dict):
        text = msg["data"].get("text")
    if text is None:
        return None
    return text if isinstance(text, str) else json.dumps(text, ensure_ascii=False)


def _output_text(out: dict[str, Any]) -> str | None:
    """One component output's answer: ``results.message.text`` and the fallbacks Langflow fills."""
    results = out.get("results")
    if isinstance(results, dict):
        for key in ("message", "text", "output"):
            if key in results and (t := _message_text(results[key])) is not None:
                return t
    outputs = out.get("outputs")
    if isinstance(outputs, dict) and isinstance(outputs.get("message"), dict):
        m = outputs["message"].get("message")
        if isinstance(m, str):
            return m
    messages = out.get("messages")
    if isinstance(messages, list) and messages and isinstance(messages[0], dict):
        m = messages[0].get("message")
        if isinstance(m, str):
            return m
    artifacts = out.get("artifacts")
    if isinstance(artifacts, dict) and isinstance(artifacts.get("message"), str):
        return artifacts["message"]
    return None


def _output_usage(out: dict[str, Any]) -> ev.Usage | None:
    found = usage_from(out.get("token_usage"), prompt="input_tokens", completion="output_tokens")
    if found is None:
        results = out.get("results")
        msg = results.get("message") if isinstance(results, dict) else None
        props = msg.get("properties") if isinstance(msg, dict) else None
        if isinstance(props, dict):
            found = usage_from(props.get("usage"), prompt="input_tokens", completion="output_tokens")
    return found


def parse_result(doc: Any) -> tuple[str | None, ev.Usage | None]:
    """(answer text, usage) of a RunResponse; text None when the flow produced no output."""
    if not isinstance(doc, dict):
        return None, None
    texts: list[str] = []
    usage: ev.Usage | None = None
    for run_out in doc.get("outputs") or []:
        if not isinstance(run_out, dict):
            continue
        for out in run_out.get("outputs") or []:
            if not isinstance(out, dict):
                continue
            t = _output_text(out)
            if t is not None and t != "":
                texts.append(t)
            u = _output_usage(out)
            if u is not None:
                usage = add_usage(usage, u)
    return ("\n\n".join(texts) if texts else None), usage


def add_usage(a: ev.Usage | None, b: ev.Usage) -> ev.Usage:
    """Two outputs' usage summed field by field (unknown stays unknown)."""
    if a is None:
        return b

    def add(x: int | None, y: int | None) -> int | None:
        return y if x is None else x if y is None else x + y

    return ev.Usage(add(a.prompt_tokens, b.prompt_tokens), add(a.completion_tokens, b.completion_tokens),
                    add(a.total_tokens, b.total_tokens))


def merged(batch: list[ev.Event]) -> list[ev.Event]:
    """Consecutive text pieces joined into one."""
    out: list[ev.Event] = []
    for item in batch:
        if isinstance(item, ev.Text) and out and isinstance(out[-1], ev.Text):
            out[-1] = ev.Text(out[-1].text + item.text)
        else:
            out.append(item)
    return out


def message_usage(data: dict[str, Any]) -> ev.Usage | None:
    """The usage a completed AI Message carries in ``properties.usage``, if any."""
    props = data.get("properties")
    if isinstance(props, dict):
        return usage_from(props.get("usage"), prompt="input_tokens", completion="output_tokens")
    return None
