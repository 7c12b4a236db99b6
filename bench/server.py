"""The benchmark side of ``python -m bench.serve``: start it, send it commands, stop it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


class FakeServer:
    """A plugin's fake platform running in a subprocess."""

    def __init__(self, plugin: str):
        self.plugin = plugin
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.serve", plugin],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        hello = self._read()
        self.base_url: str = hello["base_url"]
        self.port: int = hello["port"]

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"bench.serve {self.plugin} exited (code {self.proc.poll()})")
        return json.loads(line)

    def call(self, op: str, **kw: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": op, **kw}) + "\n")
        self.proc.stdin.flush()
        reply = self._read()
        if "error" in reply:
            raise RuntimeError(reply["error"])
        return reply

    def stream(self, n_tokens: int, delay: float, prefix: str | None = None) -> None:
        """Runs (whose key starts with ``prefix``) stream ``n_tokens`` tokens ``delay`` s apart."""
        self.call("stream", tokens=n_tokens, delay=delay, prefix=prefix)

    def marks(self) -> dict[str, list[int]]:
        return self.call("marks")["marks"]

    def stats(self) -> dict[str, Any]:
        return self.call("stats")

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.call("quit")
                self.proc.wait(10)
            except Exception:  # noqa: BLE001
                self.proc.kill()
                self.proc.wait(5)

    def __enter__(self) -> FakeServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
