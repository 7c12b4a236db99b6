"""What the chat shows for WeKnora's side results: the cited documents after the answer, and the
message when the agent waits for a person (tool approval, MCP OAuth)."""

from __future__ import annotations

from typing import Any

from . import const


def score(ref: dict[str, Any]) -> float:
    """A reference's retrieval score (0 when it has none)."""
    value = ref.get("score")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def references_text(refs: dict[str, dict[str, Any]], heading: str, answer: str) -> str:
    """A short list of the cited documents, one line each: title (and file name when different)."""
    lines = []
    for ref in list(refs.values())[: const.MAX_REFERENCES]:
        title = str(ref.get("knowledge_title") or "").strip()
        filename = str(ref.get("knowledge_filename") or "").strip()
        label = title or filename or str(ref.get("knowledge_id") or ref.get("id"))
        if filename and title and filename != title:
            label += f" ({filename})"
        lines.append(f"- {label}")
    more = len(refs) - const.MAX_REFERENCES
    if more > 0:
        lines.append(f"- … (+{more})")
    sep = "\n" if answer.endswith("\n") else "\n\n"
    if answer.endswith("\n\n"):
        sep = ""
    head = f"{heading}\n" if heading else ""
    return sep + head + "\n".join(lines)


def paused_message(kind: str, meta: dict[str, Any]) -> str:
    """What to tell the owner when WeKnora's agent waits for an approval or an OAuth authorization."""
    service = str(meta.get("service_name") or meta.get("service_id") or "an MCP service")
    tool = str(meta.get("mcp_tool_name") or meta.get("registered_tool_name") or "")
    if kind == "tool_approval_required":
        what = f"the tool '{tool}' of {service}" if tool else f"a tool of {service}"
        return (f"{const.PLATFORM} waits for a person to approve {what}, which cannot be done from the chat; "
                "approve it in WeKnora's web UI or turn approval off for that tool")
    return (f"{const.PLATFORM} needs OAuth authorization for {service} first, which cannot be done from the chat; "
            "authorize the service once in WeKnora's web UI")
