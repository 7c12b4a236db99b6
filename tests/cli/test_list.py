"""``runners list``."""

from __future__ import annotations

import json
import subprocess
import sys

from runners_cli.__main__ import main
from runners_cli.plugins import ROOT, discover


def test_list_json_names_dify_agent() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "runners_cli", "list", "--json"],
        capture_output=True, text=True, timeout=60, cwd=str(ROOT),
    )
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    by_name = {r["name"]: r for r in rows}
    dify = by_name["DifyAgent"]
    assert dify["runner_id"] == "plugin:langbot-team/DifyAgent/default"
    assert dify["directory"] == "dify-agent"
    assert dify["version"]
    assert "streaming" in dify["capabilities"]
    assert {r["directory"] for r in rows} == {p.dirname for p in discover()}


def test_list_table(capsys) -> None:
    assert main(["list"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:2] == ["DIRECTORY", "RUNNER"]
    row = next(line for line in out if line.startswith("dify-agent "))
    assert "plugin:langbot-team/DifyAgent/default" in row
    assert "streaming" in row
    assert "tool_calling" not in row  # only capabilities that are true
