"""``permission-mode`` mapped onto Codex's own policy, and approval requests answered by it.

Codex has two knobs (app-server ``thread/start`` / ``thread/resume``): ``sandbox`` (``read-only``,
``workspace-write``, ``danger-full-access``) decides what a command may touch; ``approvalPolicy``
(``untrusted``, ``on-failure``, ``on-request``, ``never``) decides when Codex stops to ask. Each
permission mode presets both; the ``sandbox`` and ``approval-policy`` selects override one of them.

The presets never make Codex ask (``never``): a chat has nobody to click "approve" yet (the ask mode
comes with the approvals work). When an owner picks an asking policy anyway, every request is
answered by the mode, never by a blanket yes:

- ``read-only``: decline everything (reads need no approval, so anything asked is a write or more);
- ``workspace-write``: accept a file change only when every path lies inside the workspace and no
  extra write root is asked for; accept a command only when it runs inside the workspace and asks
  for nothing beyond the sandbox (no extra permissions, no network); decline the rest;
- ``full-access``: accept (the owner gave the agent the machine).

A declined request lets Codex carry on with the turn (``decline``, not ``cancel``).

``ask`` (asked in the chat): sandbox ``workspace-write`` with approval policy ``untrusted``. Of
Codex's asking policies, ``untrusted`` is the one that stops before every command outside its
trusted read-only set (``ls``, ``cat``, ``rg`` …) and before file changes, whether or not the
sandbox would allow them (real-peers.md §codex: ``untrusted`` asks
``item/commandExecution/requestApproval`` for a plain write); ``on-request`` leaves the choice to
the model, which runs most commands inside the sandbox without asking, so the chat would see
little. Each request becomes one :class:`runner_kit.approvals.Question` (see :func:`question`) and
the answer goes back as ``accept`` / ``decline`` (v1: ``approved`` / ``denied``); Codex's decline
carries no reason field, so a reason typed with a denial reaches Codex as the next turn's text in
the same thread (:func:`runner_kit.approvals.denial_note`, ``RunEnv.tell_agent``). "Allow for this session" is kept by the
kit and covers exactly what the question said (this command, or Codex's proposed exec-policy prefix
for a simple command; these files inside the workspace), so Codex is told ``accept``, never
``acceptForSession``: its own session approval would answer later requests without the chat.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner_kit import approvals as ap
from runner_kit import command_scope as cs

ASK = "ask"
MODES = ("read-only", "workspace-write", "full-access", ASK)
SANDBOXES = ("read-only", "workspace-write", "danger-full-access")
APPROVALS = ("untrusted", "on-failure", "on-request", "never")
PRESET = "preset"

_PRESETS: dict[str, tuple[str, str]] = {
    "read-only": ("read-only", "never"),
    "workspace-write": ("workspace-write", "never"),
    "full-access": ("danger-full-access", "never"),
    ASK: ("workspace-write", "untrusted"),
}

COMMAND_APPROVAL = "item/commandExecution/requestApproval"
FILE_CHANGE_APPROVAL = "item/fileChange/requestApproval"
# the v1 names older app-servers still send for the same two questions
LEGACY_COMMAND_APPROVAL = "execCommandApproval"
LEGACY_PATCH_APPROVAL = "applyPatchApproval"
USER_INPUT = "item/tool/requestUserInput"
APPROVAL_METHODS = frozenset({COMMAND_APPROVAL, FILE_CHANGE_APPROVAL, LEGACY_COMMAND_APPROVAL, LEGACY_PATCH_APPROVAL})


@dataclass(frozen=True, slots=True)
class Permissions:
    mode: str
    sandbox: str
    approval: str
    workspace: Path

    @classmethod
    def from_config(cls, config: Any, workspace: Path) -> Permissions:
        mode = str(config.get("permission-mode") or "workspace-write")
        if mode not in _PRESETS:
            mode = "workspace-write"
        sandbox, approval = _PRESETS[mode]
        chosen_sandbox = str(config.get("sandbox") or PRESET)
        chosen_approval = str(config.get("approval-policy") or PRESET)
        if chosen_sandbox in SANDBOXES:
            sandbox = chosen_sandbox
        if chosen_approval in APPROVALS:
            approval = chosen_approval
        return cls(mode, sandbox, approval, workspace)

    def thread_params(self) -> dict[str, Any]:
        """What thread/start and thread/resume carry, so a resumed thread keeps the same policy."""
        return {"sandbox": self.sandbox, "approvalPolicy": self.approval}

    # --- answering approval requests ----------------------------------------------------------

    def answer(self, method: str, params: dict[str, Any], changes: list[str] | None = None) -> tuple[bool, str]:
        """``(accepted, why)`` for one approval request; ``changes`` are the file paths of the
        fileChange item it is about (from its item/started)."""
        if self.mode == "full-access":
            return True, "full-access mode"
        if self.mode == "read-only":
            return False, "read-only mode"
        if method in (FILE_CHANGE_APPROVAL, LEGACY_PATCH_APPROVAL):
            root = params.get("grantRoot") or params.get("grant_root")
            if root and not self.inside(str(root)):
                return False, f"asks to write outside the workspace ({root})"
            paths = list(changes or []) + _legacy_paths(params)
            outside = [p for p in paths if not self.inside(p)]
            if outside:
                return False, f"changes files outside the workspace ({outside[0]})"
            if not paths and not root:
                return False, "the change's files are unknown"
            return True, "file changes inside the workspace"
        cwd = params.get("cwd")
        if not cwd or not self.inside(str(cwd)):
            return False, f"runs outside the workspace ({cwd or 'no directory given'})"
        for extra in ("additionalPermissions", "networkApprovalContext", "proposedNetworkPolicyAmendments"):
            if params.get(extra):
                return False, "asks for more than the workspace sandbox allows"
        return True, "a command inside the workspace"

    @property
    def asks(self) -> bool:
        return self.mode == ASK

    def decision(self, method: str, accepted: bool, always: bool = False) -> dict[str, Any]:
        if method in (LEGACY_COMMAND_APPROVAL, LEGACY_PATCH_APPROVAL):
            if accepted:
                return {"decision": "approved_for_session" if always else "approved"}
            return {"decision": "denied"}
        if accepted:
            return {"decision": "acceptForSession" if always else "accept"}
        return {"decision": "decline"}

    def inside(self, path: str) -> bool:
        p = Path(path)
        if not p.is_absolute():
            p = self.workspace / p
        real = os.path.realpath(p)
        root = os.path.realpath(self.workspace)
        return real == root or real.startswith(root.rstrip(os.sep) + os.sep)


def _legacy_paths(params: dict[str, Any]) -> list[str]:
    changes = params.get("fileChanges") or params.get("changes")
    if isinstance(changes, dict):
        return [str(k) for k in changes]
    return []


def question(method: str, params: dict[str, Any], changes: list[Any] | None, workspace: Path | None) -> ap.Question:
    """The chat question for one approval request, and what "allow for this session" covers.

    A command: Codex's ``/bin/bash -lc '<cmd>'`` wrapper (string, or v1 argv) is taken off and
    ``<cmd>`` is judged; the scope is that exact command, or Codex's own proposed exec-policy
    prefix (``proposedExecpolicyAmendment``) when the command is a simple one that starts with it.
    A file change: one key per file (``edit:``, ``delete:``, ``move:``) from the fileChange item's
    ``changes`` (``kind`` ``add``/``update``/``delete``, ``move_path``) or v1 ``fileChanges``; a
    file outside the workspace, files not known, or a ``grantRoot`` (a whole directory) make it one
    that can only be allowed once."""
    if method in (FILE_CHANGE_APPROVAL, LEGACY_PATCH_APPROVAL):
        entries = _entries(changes) + _legacy_entries(params)
        root = params.get("grantRoot") or params.get("grant_root")
        what = ", ".join(dict.fromkeys(p for p, _, _ in entries)) or (f"under {root}" if root else "in the workspace")
        keys = tuple(_file_key(path, kind, moved, workspace) for path, kind, moved in entries)
        scope: tuple[str, ...] = () if root or not keys or not all(keys) else tuple(dict.fromkeys(keys))
        return ap.Question(title=f"change files: {_one_line(what)}", detail=_one_line(str(params.get("reason") or "")),
                           scope=scope, request=scope or "")
    cmd = params.get("command")
    inner = cs.unwrap([str(c) for c in cmd] if isinstance(cmd, list) else str(cmd or ""))
    asked = cs.command_key(inner)
    rule = _amendment(params)
    cwd = params.get("cwd")
    return ap.Question(title=f"run a command: {_one_line(inner)}", detail=f"in {cwd}" if cwd else "",
                       scope=(cs.prefix_key(rule, inner) if rule else "") or asked, request=asked)


def _amendment(params: dict[str, Any]) -> list[str] | None:
    raw = params.get("proposedExecpolicyAmendment") or params.get("proposed_execpolicy_amendment")
    if isinstance(raw, dict):
        raw = raw.get("command")
    if isinstance(raw, list) and raw and all(isinstance(w, str) for w in raw):
        return raw
    return None


def _file_key(path: str, kind: str, moved: str | None, workspace: Path | None) -> str:
    if moved:
        return cs.move_key(path, moved, workspace)
    return cs.file_key(cs.DELETE if kind == "delete" else cs.EDIT, path, workspace)


def _entries(changes: list[Any] | None) -> list[tuple[str, str, str | None]]:
    """``(path, kind, moved to)`` of a v2 fileChange item's ``changes`` (or bare paths)."""
    out: list[tuple[str, str, str | None]] = []
    for c in changes or []:
        if isinstance(c, str) and c:
            out.append((c, "update", None))
        elif isinstance(c, dict) and c.get("path"):
            kind = c.get("kind")
            body = kind if isinstance(kind, dict) else {}
            name = str(body.get("type") or "update") if isinstance(kind, dict) else str(kind or "update")
            moved = body.get("move_path") or body.get("movePath") or c.get("move_path") or c.get("movePath")
            out.append((str(c["path"]), name, str(moved) if moved else None))
    return out


def _legacy_entries(params: dict[str, Any]) -> list[tuple[str, str, str | None]]:
    """v1 ``fileChanges``: path -> ``{"add": …}`` / ``{"delete": …}`` / ``{"update": {move_path}}``
    (or the same with a ``type`` field)."""
    changes = params.get("fileChanges") or params.get("changes")
    out: list[tuple[str, str, str | None]] = []
    if not isinstance(changes, dict):
        return out
    for path, change in changes.items():
        kind, body = "update", change if isinstance(change, dict) else {}
        if isinstance(change, dict) and isinstance(change.get("type"), str):
            kind = change["type"]
        elif isinstance(change, dict) and len(change) == 1:
            kind, inner = next(iter(change.items()))
            body = inner if isinstance(inner, dict) else {}
        moved = body.get("move_path") or body.get("movePath")
        out.append((str(path), str(kind), str(moved) if moved else None))
    return out


def _one_line(text: str, limit: int = 300) -> str:
    line = " ".join(cs.visible(text).split())  # a non-plain space stays visible, not a plain one
    return line if len(line) <= limit else line[: limit - 1] + "…"
