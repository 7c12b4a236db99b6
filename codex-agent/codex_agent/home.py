"""Where Codex runs from: the native binary, its private CODEX_HOME and the generated config.toml.

- **Binary.** ``codex`` on PATH (and what npm puts in ``node_modules/.bin``) is a Node wrapper that
  spawns the native binary; it costs a quarter second per start and does not pass signals on
  (real-peers.md §1, §6). When ``executable`` resolves to that wrapper, the native binary next to it
  (``@openai/codex-linux-<arch>/vendor/<triple>/bin/codex``) is started instead, with the wrapper's
  ``vendor/<triple>/path`` directory (``rg``) put on PATH as the wrapper would.
- **CODEX_HOME.** One per workspace (:func:`runner_kit.process.private_home`), reused: it holds the
  thread rollouts ``thread/resume`` reads, so the same workspace always gets the same home.
- **config.toml.** A custom OpenAI-compatible provider (``base-url``; the key only in the child's
  environment, in the variable ``env-key`` names; ``wire-api``; retries from ``max-retries``), no
  update check, no analytics, and web search off unless asked for. Rewritten for every run (atomic
  replace), so changing the runner's settings takes effect at the next message.
"""

from __future__ import annotations

import os
import platform as _platform
import re
from pathlib import Path
from typing import Any

from runner_kit.logs import get_logger

from .const import PROVIDER_ID

log = get_logger("codex_agent.home")

_ARCH = {"x86_64": ("x64", "x86_64"), "amd64": ("x64", "x86_64"), "aarch64": ("arm64", "aarch64"),
         "arm64": ("arm64", "aarch64")}
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _is_node_script(path: Path) -> bool:
    if path.suffix in (".js", ".mjs", ".cjs"):
        return True
    try:
        with open(path, "rb") as fh:
            head = fh.read(128)
    except OSError:
        return False
    return head.startswith(b"#!") and b"node" in head.split(b"\n", 1)[0]


def native_codex(executable: str) -> tuple[str, list[str]]:
    """``(program, extra PATH dirs)``: the native binary behind an npm wrapper, else as given."""
    path = Path(executable)
    real = Path(os.path.realpath(path))
    if not _is_node_script(real):
        return executable, []
    arch = _ARCH.get(_platform.machine().lower())
    for parent in real.parents:
        if parent.name != "node_modules" and not (parent / "node_modules").is_dir():
            continue
        roots = [parent] if parent.name == "node_modules" else [parent / "node_modules"]
        roots.append(real.parents[1] / "node_modules")  # npm's nested layout under @openai/codex
        for root in roots:
            for found in _candidates(root, arch):
                if found.is_file() and os.access(found, os.X_OK):
                    extra = found.parent.parent / "path"
                    log.debug("using the native codex %s behind the wrapper %s", found, executable)
                    return str(found), [str(extra)] if extra.is_dir() else []
        if parent.name == "node_modules":
            break
    log.warning("%s is Codex's Node wrapper and no native binary was found next to it; "
                "signals may not reach the agent", executable)
    return executable, []


def _candidates(root: Path, arch: tuple[str, str] | None) -> list[Path]:
    if arch is None:
        return []
    npm_arch, triple_arch = arch
    out: list[Path] = []
    for pkg in (root / "@openai" / f"codex-linux-{npm_arch}", root / "@openai" / "codex"):
        vendor = pkg / "vendor"
        if not vendor.is_dir():
            continue
        for triple in sorted(vendor.glob(f"{triple_arch}-unknown-linux-*")):
            out.append(triple / "bin" / "codex")  # 0.1xx layout
            out.append(triple / "codex" / "codex")  # older layout
    return out


# --- config.toml --------------------------------------------------------------------------------


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items()) + " }"
    text = str(value)
    out = ['"']
    for ch in text:
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _toml_key(key: str) -> str:
    return key if _BARE_KEY.match(key) else _toml_value(key)


def render_toml(doc: dict[str, Any]) -> str:
    """A small TOML writer: top-level values first, then one table per nested dict (any depth)."""
    lines: list[str] = []

    def table(prefix: list[str], body: dict[str, Any]) -> None:
        scalars = {k: v for k, v in body.items() if not isinstance(v, dict)}
        tables = {k: v for k, v in body.items() if isinstance(v, dict)}
        if prefix and (scalars or not tables):
            lines.append("")
            lines.append("[" + ".".join(_toml_key(p) for p in prefix) + "]")
        for k, v in scalars.items():
            if v is not None:
                lines.append(f"{_toml_key(k)} = {_toml_value(v)}")
        for k, v in tables.items():
            table([*prefix, k], v)

    table([], doc)
    return "\n".join(lines).lstrip("\n") + "\n"


def codex_config(
    *,
    base_url: str,
    env_key: str | None,
    wire_api: str,
    max_retries: int,
    model: str | None,
    web_search: bool,
    idle_ms: int | None = None,
) -> dict[str, Any]:
    provider: dict[str, Any] = {
        "name": "LangBot model API",
        "base_url": base_url,
        "wire_api": wire_api,
        "request_max_retries": max_retries,
        "stream_max_retries": max_retries,
        "requires_openai_auth": False,
    }
    if env_key:
        provider["env_key"] = env_key
    if idle_ms:
        provider["stream_idle_timeout_ms"] = idle_ms
    doc: dict[str, Any] = {}
    if model:
        doc["model"] = model
    doc["model_provider"] = PROVIDER_ID
    doc["check_for_update_on_startup"] = False
    doc["web_search"] = "live" if web_search else "disabled"
    doc["model_providers"] = {PROVIDER_ID: provider}
    doc["analytics"] = {"enabled": False}
    return doc


def write_config(home: Path, doc: dict[str, Any]) -> Path:
    """Write ``$CODEX_HOME/config.toml`` atomically (another run may be reading it)."""
    path = home / "config.toml"
    text = render_toml(doc)
    try:
        if path.read_text(encoding="utf-8") == text:
            return path
    except OSError:
        pass
    tmp = home / f".config.toml.{os.getpid()}.tmp"
    tmp.write_text(text, encoding="utf-8")
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)
    return path
