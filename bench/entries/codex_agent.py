"""codex-agent in bench section 6: the runner drives the scripted ``codex app-server``
(tests/fakes/cli/fake_codex.py) over the shared fake model API, with its own data directory."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Any

from bench.registry import CodingAgent

_FAKE = Path(__file__).resolve().parents[2] / "tests" / "fakes" / "cli" / "fake_codex.py"
_KEY = "sk-bench-codex-key"
_DATA_ENV = "RUNNER_KIT_DATA_DIR"


def _start() -> Any:
    from tests.fakes.model_api import FakeModelAPI

    mode = _FAKE.stat().st_mode
    if not mode & stat.S_IXUSR:
        _FAKE.chmod(mode | stat.S_IXUSR)
    srv = FakeModelAPI(api_keys={_KEY})
    srv.bench_data = tempfile.mkdtemp(prefix="bench-codex-")
    srv.bench_old_data = os.environ.get(_DATA_ENV)
    os.environ[_DATA_ENV] = srv.bench_data
    return srv.start()


def _stop(srv: Any) -> None:
    srv.stop()
    if srv.bench_old_data is None:
        os.environ.pop(_DATA_ENV, None)
    else:
        os.environ[_DATA_ENV] = srv.bench_old_data
    shutil.rmtree(srv.bench_data, ignore_errors=True)


def _config(srv: Any) -> dict[str, Any]:
    return {"executable": str(_FAKE), "base-url": srv.openai_base_url(), "api-key": _KEY, "model": "fake-model",
            "advanced-settings": True, "max-retries": 0, "langbot-tools": False}


ENTRY = CodingAgent(plugin="codex-agent", start=_start, config=_config, stop=_stop)
