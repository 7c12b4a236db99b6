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
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MODES = ("read-only", "workspace-write", "full-access")
SANDBOXES = ("read-only", "workspace-write", "danger-full-access")
APPROVALS = ("untrusted", "on-failure", "on-request", "never")
PRESET = "preset"

_PRESETS: dict[str, tuple[str, str]] = {
    "read-only": ("read-only", "never"),
    "workspace-write": ("workspace-write", "never"),
    "full-access": ("danger-full-access", "never"),
}

COMMAND_APPROVAL = "item/commandExecution/requestApproval"
FILE_CHANGE_APPROVAL = "item/fileChange/requestApproval"
# the v1 names older app-servers still send for the same two questions
LEGACY_COMMAND_APPROVAL = "execCommandApproval"
LEGACY_PATCH_APPROVAL = "applyPatchApproval"
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

    def decision(self, method: str, accepted: bool) -> dict[str, Any]:
        if method in (LEGACY_COMMAND_APPROVAL, LEGACY_PATCH_APPROVAL):
            return {"decision": "approved" if accepted else "denied"}
        return {"decision": "accept" if accepted else "decline"}

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
