"""What the sandbox shows of an agent's install: an npm package's script started by its interpreter
sees the packages installed beside it, and a program the agent starts itself (named in an
environment variable) is there too; neither rule shows anything of the data root."""

from __future__ import annotations

import asyncio
import shutil
import sys
from pathlib import Path

import pytest

from runner_kit import sandbox
from runner_kit.process import AgentProcess, child_env

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="bubblewrap is Linux only")
NODE = shutil.which("node")


@pytest.fixture
def prefix(tmp_path, monkeypatch) -> Path:
    """An npm prefix: an adapter package whose entry imports a package beside it."""
    monkeypatch.setenv("RUNNER_KIT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv(sandbox.READ_ENV, raising=False)
    monkeypatch.delenv(sandbox.WRITE_ENV, raising=False)
    root = tmp_path / "npm"
    entry = root / "node_modules" / "@acme" / "adapter" / "dist" / "index.js"
    entry.parent.mkdir(parents=True)
    entry.write_text("console.log(require('../../helper').word)\n")
    helper = root / "node_modules" / "@acme" / "helper" / "index.js"
    helper.parent.mkdir(parents=True)
    helper.write_text("module.exports = {word: 'helper-loaded'}\n")
    tool = root / "node_modules" / "@acme" / "native-x64" / "bin" / "tool"
    tool.parent.mkdir(parents=True)
    tool.write_text("#!/bin/sh\necho tool-ran\n")
    tool.chmod(0o755)
    return root


def test_a_script_in_an_npm_package_brings_its_prefix(prefix):
    entry = prefix / "node_modules" / "@acme" / "adapter" / "dist" / "index.js"
    paths = sandbox.program_paths(["/usr/bin/node", str(entry)], {"PATH": "/usr/bin"})
    assert prefix in paths, paths


def test_a_program_named_in_the_environment_is_bound(prefix, tmp_path):
    tool = prefix / "node_modules" / "@acme" / "native-x64" / "bin" / "tool"
    inside_data = tmp_path / "data" / "agent" / "homes" / "h" / "prog"
    inside_data.parent.mkdir(parents=True)
    inside_data.write_text("#!/bin/sh\n")
    inside_data.chmod(0o755)
    env = {"PATH": "/usr/bin", "AGENT_EXECUTABLE": str(tool), "OTHER": str(inside_data), "HOME": str(tmp_path)}
    paths = sandbox.program_paths(["/bin/sh"], env)
    assert prefix in paths, paths
    assert not any(p == inside_data or p in inside_data.parents for p in paths), "nothing of the data root"
    assert not any(p == tmp_path for p in paths), "HOME is not a program"


@pytest.mark.skipif(NODE is None, reason="node is not installed")
async def test_node_runs_the_package_and_the_program_inside_the_sandbox(prefix, tmp_path):
    if await sandbox.probe(sandbox.find_bwrap()) is not None:
        pytest.skip("no working bubblewrap here")
    entry = prefix / "node_modules" / "@acme" / "adapter" / "dist" / "index.js"
    tool = prefix / "node_modules" / "@acme" / "native-x64" / "bin" / "tool"
    ws, home = tmp_path / "data" / "a" / "ws", tmp_path / "data" / "a" / "home"
    ws.mkdir(parents=True)
    home.mkdir(parents=True)
    argv = [str(NODE), str(entry)]
    env = child_env({"AGENT_EXECUTABLE": str(tool)}, home=home)
    box = await sandbox.boundary({}, agent="test agent", workspace=ws, home=home, argv=argv, env=env)
    assert box.confined
    for cmd, want in ((argv, "helper-loaded"), (["/bin/sh", "-c", '"$AGENT_EXECUTABLE"'], "tool-ran")):
        proc = await AgentProcess.spawn(cmd, cwd=ws, env=env, name="agent", boundary=box, stdin=False)
        out = b"".join([line async for line in proc.lines()]).decode()
        await asyncio.wait_for(proc.wait(), 5)
        await proc.stop(grace=0.2)
        assert want in out, (cmd, out, proc.stderr_tail())
