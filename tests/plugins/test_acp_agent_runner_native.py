"""acp-agent-runner pointed at npm's ``codex-acp`` wrapper (``executable``, the way an owner copies
the path from ``which codex-acp``) starts the native binary next to it, as it does when it finds
the wrapper on PATH: the wrapper costs a quarter second per start and passes no signal on."""

from __future__ import annotations

import platform
import sys
from pathlib import Path

import pytest

from runner_kit.config import ConfigSchema

ROOT = Path(__file__).resolve().parents[2] / "acp-agent-runner"
sys.path.insert(0, str(ROOT))
from acp_agent_runner import providers  # noqa: E402

ARCH = {"x86_64": "x64", "aarch64": "arm64"}.get(platform.machine())


def _cfg(**kw):
    schema = ConfigSchema.from_yaml(ROOT / "components" / "runner" / "default.yaml")
    return schema.load({"advanced-settings": True, **kw})


def _install(tmp_path: Path) -> tuple[Path, Path]:
    nm = tmp_path / "lib" / "node_modules"
    wrapper = nm / "@zed-industries" / "codex-acp" / "bin" / "codex-acp.js"
    native = nm / "@zed-industries" / f"codex-acp-linux-{ARCH}" / "bin" / "codex-acp"
    for f in (wrapper, native):
        f.parent.mkdir(parents=True)
        f.write_text("#!/bin/sh\n")
        f.chmod(0o755)
    link = tmp_path / "bin" / "codex-acp"
    link.parent.mkdir()
    link.symlink_to(wrapper)
    return link, native


@pytest.mark.skipif(ARCH is None, reason="no codex-acp native package name for this machine")
def test_executable_naming_the_wrapper_starts_the_native_binary(tmp_path):
    link, native = _install(tmp_path)
    assert providers.launch(_cfg(provider="codex", executable=str(link))).argv[0] == str(native)


@pytest.mark.skipif(ARCH is None, reason="no codex-acp native package name for this machine")
def test_another_program_is_started_as_given(tmp_path):
    _install(tmp_path)
    own = tmp_path / "mine" / "codex-acp"
    own.parent.mkdir()
    own.write_text("#!/bin/sh\n")
    own.chmod(0o755)
    assert providers.launch(_cfg(provider="codex", executable=str(own))).argv[0] == str(own)
