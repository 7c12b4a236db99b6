"""Reading LangChain message dicts as LangGraph streams them (``messages`` tuples and ``values``)."""

from __future__ import annotations

import json
from typing import Any

AI_TYPES = frozenset({"ai", "aimessage", "aimessagechunk", "assistant"})
TOOL_TYPES = frozenset({"tool", "toolmessage", "toolmessagechunk"})

# the fields an interrupt value or clarification may carry its question in, most specific first
_QUESTION_KEYS = ("question", "message", "prompt", "text", "content", "description", "query")


def kind(msg: dict[str, Any]) -> str:
    """``ai`` | ``tool`` | ``other`` for a message dict (``type`` or ``role``)."""
    t = str(msg.get("type") or msg.get("role") or "").lower()
    if t in AI_TYPES:
        return "ai"
    if t in TOOL_TYPES:
        return "tool"
    return "other"


def is_chunk(msg: dict[str, Any]) -> bool:
    return str(msg.get("type") or "").lower().endswith("chunk")


def split_content(content: Any) -> tuple[str, str]:
    """``(text, reasoning)`` of a message's content: a string, or a list of blocks where ``text``
    blocks are answer and ``thinking`` / ``reasoning`` blocks are reasoning."""
    if isinstance(content, str):
        return content, ""
    text: list[str] = []
    think: list[str] = []
    if isinstance(content, list):
        for block in content:
            if isinstance(block, str):
                text.append(block)
            elif isinstance(block, dict):
                btype = block.get("type")
                if btype == "text" and isinstance(block.get("text"), str):
                    text.append(block["text"])
                elif btype == "thinking" and isinstance(block.get("thinking"), str):
                    think.append(block["thinking"])
                elif btype == "reasoning":
                    value = block.get("reasoning", block.get("text"))
                    if isinstance(value, str):
                        think.append(value)
    return "".join(text), "".join(think)


def reasoning_of(msg: dict[str, Any]) -> str:
    """DeepSeek/OpenAI-compatible reasoning: ``additional_kwargs.reasoning_content``."""
    extra = msg.get("additional_kwargs")
    value = extra.get("reasoning_content") if isinstance(extra, dict) else None
    return value if isinstance(value, str) else ""


def plain_text(content: Any) -> str:
    """Any content as one readable string (tool results, clarification questions)."""
    text, _ = split_content(content)
    if text or isinstance(content, (str, list)):
        return text
    return "" if content is None else json.dumps(content, ensure_ascii=False)


def question_text(value: Any) -> str:
    """An interrupt's value as the user should read it: a string as is; an object's question (or
    message, prompt …) with its options numbered beneath; anything else as JSON."""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, dict):
        question = next((value[k] for k in _QUESTION_KEYS if isinstance(value.get(k), str) and value[k].strip()), None)
        if question is not None:
            lines = [question.strip()]
            options = value.get("options") or value.get("choices")
            if isinstance(options, list) and options:
                lines.append("")
                for i, opt in enumerate(options, 1):
                    label = opt.get("label") or opt.get("value") if isinstance(opt, dict) else opt
                    lines.append(f"{i}. {label}")
            return "\n".join(lines)
    if value is None:
        return ""
    return json.dumps(value, ensure_ascii=False, indent=2)
