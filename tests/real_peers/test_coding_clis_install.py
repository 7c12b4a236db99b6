"""The coding CLIs install from npm into the cache and their native binaries run (opt-in: RUN_SLOW=1).

Running this once warms the cache (``tests/real_peers/coding_clis.py``) for the suites that drive
Claude Code, Codex and the ACP adapters against ``tests.fakes.model_api.FakeModelAPI``.
"""

from __future__ import annotations

import subprocess

import pytest

from tests.real_peers import coding_clis
from tests.real_peers.coding_clis import CodingCLIs, provide_coding_clis

pytestmark = [pytest.mark.slow, pytest.mark.real_peers, pytest.mark.timeout(1200)]


@pytest.fixture(scope="module")
def clis() -> CodingCLIs:
    return provide_coding_clis()


def _stdout_of(argv: list[str], tmp_path) -> str:
    # a private HOME so nothing is written to the real one
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "DISABLE_AUTOUPDATER": "1", "DISABLE_TELEMETRY": "1",
           "CODEX_HOME": str(tmp_path / "codex-home")}
    (tmp_path / "codex-home").mkdir(exist_ok=True)
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env, stdin=subprocess.DEVNULL,
                          cwd=tmp_path)
    assert proc.returncode == 0, f"{argv} exited {proc.returncode}: {proc.stderr[-2000:]}"
    return proc.stdout.strip()


def test_versions_match_the_pins(clis: CodingCLIs) -> None:
    for pkg, version in coding_clis.PACKAGES.items():
        assert clis.versions[pkg] == version
    assert clis.bin_dir.is_dir()
    for name in ("claude", "codex", "codex-acp", "claude-code-acp"):
        assert (clis.bin_dir / name).exists(), name


def test_claude_native_version(clis: CodingCLIs, tmp_path) -> None:
    assert coding_clis.CLAUDE_CODE_VERSION in _stdout_of([str(clis.claude), "--version"], tmp_path)


def test_codex_native_version(clis: CodingCLIs, tmp_path) -> None:
    assert _stdout_of([str(clis.codex), "--version"], tmp_path) == f"codex-cli {coding_clis.CODEX_VERSION}"


def test_codex_acp_native_runs(clis: CodingCLIs, tmp_path) -> None:
    # codex-acp 0.16.0 has no --version (clap rejects it with exit 2); --help proves the binary runs,
    # the version comes from its package.json (test_versions_match_the_pins)
    assert "Usage: codex-acp" in _stdout_of([str(clis.codex_acp), "--help"], tmp_path)


def test_codex_path_dir_has_rg(clis: CodingCLIs) -> None:
    assert (clis.codex_path_dir / "rg").is_file()


def test_claude_code_acp_entry_exists(clis: CodingCLIs) -> None:
    assert clis.claude_code_acp.is_file()
    assert clis.claude_code_acp.suffix in (".js", ".mjs", ".cjs")
    proc = subprocess.run([clis.node, "--check", str(clis.claude_code_acp)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
