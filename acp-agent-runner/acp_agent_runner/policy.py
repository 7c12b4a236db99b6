"""How the runner answers the agent's permission requests and file requests.

``session/request_permission`` is answered by the configured ``permission-mode``, choosing one of
the agent's own options by its kind (never a blanket approve):

- ``read-only``: tools of a read kind (read, search, think) are allowed once; anything else is
  rejected.
- ``workspace-write``: reads, edits whose every path lies inside the workspace, and commands are
  allowed once; edits elsewhere and network fetches are rejected.
- ``full-access``: everything is allowed once.
- ``ask``: reads inside the workspace are allowed once like ``read-only``; anything else is asked
  in the chat (the adapter's ``env.ask``) and the answer mapped to the agent's own option. The
  outcome has no field for a deny reason: it goes in ``_meta.langbot.reason`` (for agents that read
  it) and, when a person typed one, as the next turn's text in the same session
  (:func:`runner_kit.approvals.denial_note`, ``RunEnv.tell_agent``).

``fs/read_text_file`` and ``fs/write_text_file`` only ever touch files inside the workspace (and
writes only when the mode lets the agent write).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from runner_kit import command_scope as cs

from . import const

ALLOW = ("allow_once", "allow_always")
REJECT = ("reject_once", "reject_always")


def inside(workspace: Path, path: str | os.PathLike[str]) -> bool:
    """True when ``path`` (absolute, or relative to the workspace) resolves inside it."""
    root = workspace.resolve()
    target = Path(path)
    if not target.is_absolute():
        target = root / target
    try:
        return Path(os.path.realpath(target)).is_relative_to(root)
    except (OSError, ValueError):
        return False


def tool_paths(tool_call: Any) -> list[str]:
    """Every file path a tool call names (locations, diff contents, raw input fields)."""
    found: list[str] = []
    for loc in getattr(tool_call, "locations", None) or []:
        if getattr(loc, "path", None):
            found.append(loc.path)
    for item in getattr(tool_call, "content", None) or []:
        if getattr(item, "type", None) == "diff" and getattr(item, "path", None):
            found.append(item.path)
    raw = getattr(tool_call, "raw_input", None)
    if isinstance(raw, dict):
        for key in ("path", "file_path", "filePath", "notebook_path", "target", "destination"):
            value = raw.get(key)
            if isinstance(value, str) and value:
                found.append(value)
        for key in ("paths", "files"):
            value = raw.get(key)
            if isinstance(value, list):
                found.extend(v for v in value if isinstance(v, str))
    return found


def allowed(mode: str, kind: str | None, paths: Iterable[str], workspace: Path) -> bool:
    """Whether ``mode`` lets a tool of this kind touching these paths run."""
    if mode == "full-access":
        return True
    if kind in const.READ_KINDS:
        return True
    if mode != "workspace-write":
        return False
    if kind in const.EDIT_KINDS:
        return all(inside(workspace, p) for p in paths)
    if kind == "fetch":
        return False
    # execute, switch_mode, other and unknown kinds: the agent runs them in the workspace
    return all(inside(workspace, p) for p in paths)


def ask_first(kind: str | None, paths: Iterable[str], workspace: Path) -> bool:
    """In ``ask`` mode: whether this request needs the chat's answer (all but workspace reads)."""
    return not (kind in const.READ_KINDS and all(inside(workspace, p) for p in paths))


def choose_answer(options: Sequence[Any], allow: bool, always: bool) -> str | None:
    """The agent's option id for the chat's answer: allow and always -> allow_once, deny ->
    reject_once (else reject_always).

    "Allow for this session" is kept by the kit (conversation state, per agent session), which
    answers the next request of that kind by itself and forgets it on a reset. The agent's own
    ``allow_always`` is not used: it can outlive the session (codex-acp amends its exec policy in
    its home, claude-code-acp can write a permission rule), so a reset would not clear it."""
    wanted = ("allow_once", "allow_always") if allow else REJECT
    for kind in wanted:
        for opt in options:
            if getattr(opt, "kind", None) == kind:
                return str(opt.option_id)
    return None


BOOKKEEPING = ("call_id", "turn_id", "started_at_ms", "process_id", "parsed_cmd", "source")  # codex-acp's


def scope(kind: str | None, command: Any, paths: Sequence[str] = (), workspace: Path | None = None,
          title: str = "", raw_input: Any = None) -> str | tuple[str, ...]:
    """What "allow for this session" covers (runner_kit.command_scope): ``execute`` this exact
    command (``rawInput.command``: codex-acp's argv ``["/bin/bash", "-lc", "<cmd>"]`` is judged as
    ``<cmd>``, a string as the agent wrote it); ``edit`` / ``delete`` each of these files, ``move`` this move, inside the workspace
    (a path outside it, or none named: nothing, it can only be allowed once); any other kind this
    exact call (its title and input)."""
    if kind == "execute":
        if isinstance(command, list) and command and all(isinstance(c, str) for c in command):
            command = cs.unwrap(command)
        return cs.command_key(command) if isinstance(command, str) and command.strip() else ""
    if kind in const.EDIT_KINDS:
        named = list(dict.fromkeys(p for p in paths if p))
        if kind == "move":
            return cs.move_key(named[0], named[1], workspace) if len(named) == 2 else ""
        keys = tuple(cs.file_key(kind, p, workspace) for p in named)
        return keys if keys and all(keys) else ""
    payload = {k: v for k, v in raw_input.items() if k not in BOOKKEEPING} if isinstance(raw_input, dict) else raw_input
    return cs.tool_key(kind or "other", {"title": title, "input": payload})


def choose(options: Sequence[Any], allow: bool) -> str | None:
    """The agent's option id for allowing once (or rejecting), by option kind; None if it has none."""
    wanted = ALLOW if allow else REJECT
    for kind in wanted:
        for opt in options:
            if getattr(opt, "kind", None) == kind:
                return str(opt.option_id)
    return None


def may_write(mode: str) -> bool:
    # ask: the agent asked for the edit through session/request_permission before writing
    return mode in ("workspace-write", "full-access", "ask")
