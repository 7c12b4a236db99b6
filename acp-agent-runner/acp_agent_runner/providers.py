"""Which ACP agent to start and how to point it at the configured model API.

Every preset names the agent's own ways of taking a model API: codex-acp reads Codex ``-c``
config overrides (a custom Responses provider whose key comes from an environment variable),
claude-code-acp the Anthropic environment variables, Gemini and Qwen Code their own variables.
The key only ever travels in the child's environment, never on the command line.
"""

from __future__ import annotations

import json
import os
import platform as _platform
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner_kit.config import Config
from runner_kit.errors import RunnerError
from runner_kit.http import base_url
from runner_kit.process import find_executable, parse_env_setting
from runner_kit.secret_proxy import SecretProxy

from . import const


@dataclass(frozen=True)
class Preset:
    program: str  # the agent's command on PATH
    args: tuple[str, ...] = ()  # what follows it to start ACP mode
    npx: str | None = None  # the npm package `npx -y` runs when the program is not on PATH


PRESETS: dict[str, Preset] = {
    "codex": Preset("codex-acp", npx="@zed-industries/codex-acp"),
    "claude-code": Preset("claude-code-acp", npx="@zed-industries/claude-code-acp"),
    "gemini": Preset("gemini", ("--experimental-acp",)),
    "qwen-code": Preset("qwen", ("--experimental-acp",)),
    "opencode": Preset("opencode", ("acp",)),
}


# presets whose model API the runner wires from base-url / api-key / model
MODEL_WIRED = frozenset({"codex", "claude-code", "gemini", "qwen-code"})


@dataclass
class Launch:
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    codex_home: bool = False  # the agent keeps its state under CODEX_HOME (set to the private home)


def _split(raw: Any, key: str) -> list[str]:
    if raw is None or raw == "":
        return []
    if isinstance(raw, list):
        return [str(a) for a in raw]
    try:
        return shlex.split(str(raw))
    except ValueError as exc:
        raise RunnerError("config.invalid", f"`{key}` cannot be read as a command line ({exc})") from None


def native_codex_acp(wrapper: str) -> str | None:
    """The native ``codex-acp`` binary the npm wrapper would start (it ignores stdin EOF and the
    wrapper does not forward signals, so the runner starts and kills the binary itself)."""
    arch = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}.get(_platform.machine().lower())
    if arch is None:
        return None
    real = Path(os.path.realpath(wrapper))
    pkg = f"codex-acp-linux-{arch}"
    for parent in real.parents:
        if parent.name == "node_modules":
            for base in (parent / "@zed-industries", parent / "@zed-industries" / "codex-acp" / "node_modules" / "@zed-industries"):
                candidate = base / pkg / "bin" / "codex-acp"
                if candidate.is_file() and os.access(candidate, os.X_OK):
                    return str(candidate)
            break
    return None


def _program(provider: str, cfg: Config) -> list[str]:
    """The command that starts the agent: `command`, else `executable` + the preset's arguments,
    else the preset (the native codex-acp next to its npm wrapper; `npx -y` as the last resort)."""
    command = _split(cfg.get("command"), "command")
    if command:
        command[0] = find_executable(command[0], command[0], key="command")
        return command
    preset = PRESETS.get(provider)
    executable = str(cfg.get("executable") or "").strip()
    if preset is None:
        if executable:
            return [find_executable(executable, executable)]
        raise RunnerError("config.invalid", "provider `custom` needs `command` (the agent's command line)")
    if executable:
        found = find_executable(executable, preset.program)
        if provider == "codex":  # an owner pointing at npm's wrapper gets the binary it would start
            found = native_codex_acp(found) or found
        return [found, *preset.args]
    found = shutil.which(preset.program)
    if found:
        if provider == "codex":
            found = native_codex_acp(found) or found
        return [found, *preset.args]
    if preset.npx and shutil.which("npx"):
        return [shutil.which("npx") or "npx", "-y", preset.npx, *preset.args]
    hint = f" (or install it: npm install -g {preset.npx})" if preset.npx else ""
    return [find_executable(None, preset.program, hint=hint)]


# where a preset's agent goes when no base URL is configured (routed through the secret proxy)
DEFAULT_APIS = {
    "openai": "https://api.openai.com/v1",
    "anthropic": "https://api.anthropic.com",
    "gemini": "https://generativelanguage.googleapis.com",
}


def _toml(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)  # a TOML basic string


def launch(cfg: Config, proxy: SecretProxy | None = None) -> Launch:
    """The argv and the provider's environment for the configured agent. With ``proxy``, a preset
    whose model API we wire gets no secret: its base URL is routed through the proxy (the agent's
    default endpoint when none is configured) and its key is a stand-in."""
    provider = str(cfg.get("provider") or "custom")

    def hide(secret: str) -> str:
        return proxy.stand_in(secret) if proxy is not None and secret else secret

    def via(url: str) -> str:
        return proxy.route(url) if proxy is not None else url

    out = Launch(_program(provider, cfg))
    out.argv += _split(cfg.get("args"), "args")
    raw_base = str(cfg.get("base-url") or "").strip()
    key = str(cfg.get("api-key") or "")
    model = str(cfg.get("model") or "").strip()
    if raw_base and not key and provider in MODEL_WIRED:
        raise RunnerError("config.missing", "`api-key` is needed when `base-url` points the agent at a model API "
                                            "(any value for a local server that takes no key)")
    if provider == "codex":
        out.codex_home = True
        out.argv += ["-c", "analytics.enabled=false", "-c", "check_for_update_on_startup=false"]
        if cfg.get("permission-mode") == "ask":  # codex asks for every command that is not known-safe
            out.argv += ["-c", 'approval_policy="untrusted"', "-c", 'sandbox_mode="workspace-write"']
        if raw_base:
            base = base_url(raw_base, "base-url", suffixes=("/responses", "/v1"), add="/v1",
                            example="https://api.openai.com/v1")
            out.argv += [
                "-c", 'model_provider="langbot"',
                "-c", 'model_providers.langbot.name="LangBot"',
                "-c", f"model_providers.langbot.base_url={_toml(via(base))}",
                "-c", 'model_providers.langbot.wire_api="responses"',
                "-c", f'model_providers.langbot.env_key="{const.CODEX_KEY_ENV}"',
                "-c", "model_providers.langbot.request_max_retries=0",
                "-c", "model_providers.langbot.stream_max_retries=0",
            ]
            out.env[const.CODEX_KEY_ENV] = hide(key)
        elif key:
            out.env["OPENAI_API_KEY"] = hide(key)
            if proxy is not None:
                out.env["OPENAI_BASE_URL"] = via(DEFAULT_APIS["openai"])
        if model:
            out.argv += ["-c", f"model={_toml(model)}"]
    elif provider == "claude-code":
        out.env.update({
            "DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1", "DISABLE_ERROR_REPORTING": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "CLAUDE_CODE_MAX_RETRIES": "1",  # the default (10, with backoff) turns a bad key into minutes
        })
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            out.env["IS_SANDBOX"] = "1"  # Claude Code refuses to start as root without it
        if raw_base:
            out.env["ANTHROPIC_BASE_URL"] = via(base_url(raw_base, "base-url", suffixes=("/v1/messages", "/v1"),
                                                         example="https://api.anthropic.com"))
        if key:
            out.env["ANTHROPIC_API_KEY"] = hide(key)
            if proxy is not None and not raw_base:
                out.env["ANTHROPIC_BASE_URL"] = via(DEFAULT_APIS["anthropic"])
        if model:
            out.env["ANTHROPIC_MODEL"] = model
    elif provider == "gemini":
        if raw_base:
            out.env["GOOGLE_GEMINI_BASE_URL"] = via(base_url(raw_base, "base-url"))
        if key:
            out.env["GEMINI_API_KEY"] = hide(key)
            if proxy is not None and not raw_base:
                out.env["GOOGLE_GEMINI_BASE_URL"] = via(DEFAULT_APIS["gemini"])
        if model:
            out.argv += ["--model", model]
    elif provider == "qwen-code":
        if raw_base:
            out.env["OPENAI_BASE_URL"] = via(base_url(raw_base, "base-url", suffixes=("/chat/completions",)))
        if key:
            out.env["OPENAI_API_KEY"] = hide(key)
            if proxy is not None and not raw_base:
                out.env["OPENAI_BASE_URL"] = via(DEFAULT_APIS["openai"])
        if model:
            out.env["OPENAI_MODEL"] = model
    # opencode and custom agents take their model settings from `env` (and their own config files)
    out.env.update(parse_env_setting(cfg.get("env")))
    return out
