"""The real coding CLIs (Claude Code, Codex) and Zed's two ACP adapters, installed from npm once into a
cache directory and reused (see docs real-peers.md §1).

    clis = provide_coding_clis()        # skips the test, saying why, when npm is missing or fails
    subprocess.run([str(clis.claude), "-p", "say hello", ...])
    subprocess.run([str(clis.codex), "exec", "--json", ...], stdin=subprocess.DEVNULL)
    subprocess.Popen([str(clis.codex_acp), "-c", ...])               # native: kill it by PID, it ignores EOF
    subprocess.Popen(clis.claude_code_acp_command)                  # [node, <adapter JS entry>]

- Packages (pinned): ``PACKAGES`` = @anthropic-ai/claude-code@2.1.197, @openai/codex@0.171.0,
  @zed-industries/codex-acp@0.16.0, @zed-industries/claude-code-acp@0.16.2, installed with
  ``npm install --no-audit --no-fund`` into ``$CODING_CLIS_CACHE`` (default
  ``~/.cache/langbot-agent-runners/coding-clis-<TAG>``). About 18 s and 1 GB on the first run.
- A file lock (``.<dir>.lock`` next to the directory) keeps two runs from installing at once; the
  marker file ``install-complete.json`` (it names the packages) says the install finished, so a
  half-done install is completed by running npm again in place.
- ``CodingCLIs`` holds the NATIVE binaries (not npm's Node wrappers, which add 0.25 s per start and
  break signal handling): ``claude``, ``codex``, ``codex_acp``; ``claude_code_acp`` is the adapter's JS
  entry, run with ``node``. ``bin_dir`` is ``node_modules/.bin`` (the wrappers), ``versions`` the
  ``version`` of each package's package.json (plus the agent SDK that claude-code-acp bundles).
- No npm, an npm failure or timeout, or an install without the expected binaries: ``pytest.skip``
  with the reason, also printed to stderr. Linux x86_64 only (the native packages are per platform).
"""

from __future__ import annotations

import fcntl
import json
import os
import platform
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.real_peers import peers

__all__ = ["CACHE_ENV", "PACKAGES", "TAG", "CodingCLIs", "provide_coding_clis"]

LABEL = "coding-clis"
CACHE_ENV = "CODING_CLIS_CACHE"
CLAUDE_CODE_VERSION = "2.1.197"
CODEX_VERSION = "0.171.0"
CODEX_ACP_VERSION = "0.16.0"
CLAUDE_CODE_ACP_VERSION = "0.16.2"
PACKAGES: dict[str, str] = {
    "@anthropic-ai/claude-code": CLAUDE_CODE_VERSION,
    "@openai/codex": CODEX_VERSION,
    "@zed-industries/codex-acp": CODEX_ACP_VERSION,
    "@zed-industries/claude-code-acp": CLAUDE_CODE_ACP_VERSION,
}
TAG = f"cc{CLAUDE_CODE_VERSION}-cx{CODEX_VERSION}-cxacp{CODEX_ACP_VERSION}-ccacp{CLAUDE_CODE_ACP_VERSION}"
MARKER = "install-complete.json"
INSTALL_TIMEOUT = 900.0  # seconds; the install takes ~18 s on the project's box with a warm registry

_CLAUDE_NATIVE = "node_modules/@anthropic-ai/claude-code-linux-x64/claude"
_CLAUDE_LINKED = "node_modules/@anthropic-ai/claude-code/bin/claude.exe"  # postinstall hard link
_CODEX_NATIVE = "node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex"
_CODEX_ACP_NATIVE = "node_modules/@zed-industries/codex-acp-linux-x64/bin/codex-acp"
_CLAUDE_CODE_ACP_PKG = "node_modules/@zed-industries/claude-code-acp"
_AGENT_SDK_PKG = "node_modules/@anthropic-ai/claude-agent-sdk"


@dataclass(frozen=True)
class CodingCLIs:
    """Where the installed CLIs are (all paths absolute)."""

    root: Path  #: the install directory (holds package.json and node_modules)
    bin_dir: Path  #: node_modules/.bin (npm's wrappers: claude, codex, codex-acp, claude-code-acp)
    claude: Path  #: native Claude Code binary
    codex: Path  #: native codex binary (musl build)
    codex_acp: Path  #: native codex-acp binary (embeds its own codex core)
    claude_code_acp: Path  #: the claude-code-acp adapter's JS entry (run with ``node``)
    node: str  #: the ``node`` used to run ``claude_code_acp``
    versions: dict[str, str] = field(default_factory=dict)  #: package name -> version from package.json

    @property
    def claude_code_acp_command(self) -> list[str]:
        """``[node, <adapter entry>]`` — the argv that starts claude-code-acp."""
        return [self.node, str(self.claude_code_acp)]

    @property
    def codex_path_dir(self) -> Path:
        """The dir the codex wrapper puts on PATH (``rg``); add it when running the native codex."""
        return self.codex.parent.parent / "codex-path"


def _skip(reason: str) -> None:
    peers.say(LABEL, f"SKIP: {reason}")
    pytest.skip(reason)


def _key() -> str:
    return json.dumps({"packages": PACKAGES}, sort_keys=True)


def _marker_ok(root: Path) -> bool:
    try:
        return json.loads((root / MARKER).read_text(encoding="utf-8")).get("key") == _key()
    except (OSError, ValueError, AttributeError):
        return False


def _version(pkg_dir: Path) -> str | None:
    try:
        return str(json.loads((pkg_dir / "package.json").read_text(encoding="utf-8"))["version"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _adapter_entry(root: Path) -> Path | None:
    pkg = root / _CLAUDE_CODE_ACP_PKG
    try:
        meta = json.loads((pkg / "package.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    bins = meta.get("bin")
    rel = bins if isinstance(bins, str) else (bins or {}).get("claude-code-acp") if isinstance(bins, dict) else None
    if not rel:
        rel = meta.get("main")
    if not isinstance(rel, str):
        return None
    entry = (pkg / rel).resolve()
    return entry if entry.is_file() else None


def _locate(root: Path, node: str) -> tuple[CodingCLIs | None, list[str]]:
    """The install in ``root``, or None and what is missing or wrong."""
    problems: list[str] = []

    def exe(rel: str) -> Path | None:
        p = root / rel
        if p.is_file() and os.access(p, os.X_OK):
            return p
        return None

    claude = exe(_CLAUDE_NATIVE) or exe(_CLAUDE_LINKED)
    codex = exe(_CODEX_NATIVE)
    codex_acp = exe(_CODEX_ACP_NATIVE)
    entry = _adapter_entry(root)
    for name, path, rel in (("claude", claude, _CLAUDE_NATIVE), ("codex", codex, _CODEX_NATIVE),
                            ("codex-acp", codex_acp, _CODEX_ACP_NATIVE),
                            ("claude-code-acp entry", entry, _CLAUDE_CODE_ACP_PKG + "/package.json bin")):
        if path is None:
            problems.append(f"no {name} at {root / rel}")
    versions: dict[str, str] = {}
    for pkg, want in PACKAGES.items():
        got = _version(root / "node_modules" / pkg)
        if got != want:
            problems.append(f"{pkg} is {got or 'not installed'}, want {want}")
        elif got:
            versions[pkg] = got
    sdk = _version(root / _AGENT_SDK_PKG) or _version(root / _CLAUDE_CODE_ACP_PKG / _AGENT_SDK_PKG)
    if sdk:
        versions["@anthropic-ai/claude-agent-sdk"] = sdk
    if problems or claude is None or codex is None or codex_acp is None or entry is None:
        return None, problems
    return CodingCLIs(root=root, bin_dir=root / "node_modules" / ".bin", claude=claude, codex=codex,
                      codex_acp=codex_acp, claude_code_acp=entry, node=node, versions=versions), []


def provide_coding_clis() -> CodingCLIs:
    """The installed CLIs: reused when a finished install is in the cache, else installed now."""
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        _skip(f"{LABEL}: only linux x86_64 is wired up (this is {platform.system()} {platform.machine()})")
    npm = shutil.which("npm")
    node = shutil.which("node")
    if npm is None or node is None:
        _skip(f"{LABEL}: {'npm' if npm is None else 'node'} is not installed on this machine")
    assert npm is not None and node is not None
    root = peers.cached_path(CACHE_ENV, f"coding-clis-{TAG}")
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.parent / f".{root.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another run may be installing right now
        if _marker_ok(root):
            clis, problems = _locate(root, node)
            if clis is not None:
                peers.say(LABEL, f"reusing {root}")
                return clis
            peers.say(LABEL, f"the cached install at {root} is incomplete ({'; '.join(problems)}); reinstalling")
            (root / MARKER).unlink(missing_ok=True)
        root.mkdir(parents=True, exist_ok=True)
        pkg_json = root / "package.json"
        if not pkg_json.is_file():
            pkg_json.write_text(json.dumps({"name": "coding-clis", "private": True, "version": "0.0.0"}) + "\n",
                                encoding="utf-8")
        log = root / "install.log"
        specs = [f"{name}@{version}" for name, version in PACKAGES.items()]
        peers.say(LABEL, f"installing {' '.join(specs)} into {root} (first run only, ~20 s, ~1 GB); log: {log}")
        started = time.monotonic()
        try:
            peers._run_logged([npm, "install", "--prefix", str(root), "--no-audit", "--no-fund",
                               "--no-update-notifier", "--save-exact", *specs],
                              log, LABEL, "npm install " + " ".join(specs), started + INSTALL_TIMEOUT,
                              INSTALL_TIMEOUT)
        except pytest.skip.Exception as e:
            peers.say(LABEL, f"SKIP: {e}")
            raise
        clis, problems = _locate(root, node)
        if clis is None:
            _skip(f"{LABEL}: npm install finished but the install is unusable: {'; '.join(problems)}; see {log}")
        assert clis is not None
        took = time.monotonic() - started
        (root / MARKER).write_text(json.dumps({"key": _key(), "seconds": round(took, 1), "versions": clis.versions}),
                                   encoding="utf-8")
        peers.say(LABEL, f"installed in {took:.1f}s: {clis.versions}")
        return clis
