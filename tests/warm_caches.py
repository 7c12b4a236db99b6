"""Install what the slow suites need into their caches ahead of them: ``python -m tests.warm_caches``.

`.ci/run` starts this in the background when the slow stage begins, so the real peers' installs (n8n
about 5 minutes, Langflow, LangGraph, LICOS, the coding CLIs) happen while the LangBot suite runs
instead of one after another before the real-peer suites (and Dify's, when its source tree is in
the cache). Each install is the suite's own provider,
under the same file lock: a suite that needs one while it is being installed waits for it and then
reuses it; a finished install is only checked. A provider that cannot install prints why and the
next one goes on; the suite that needs it then skips (or fails) with its own reason, as it would
have without this.

Names to install only some: ``python -m tests.warm_caches langbot n8n``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _langbot() -> Any:
    from tests.e2e.harness import provide_venv

    return provide_venv()


def _n8n() -> Any:
    from tests.real_peers.test_n8n_real import provide_n8n

    return provide_n8n()


def _langflow() -> Any:
    from tests.real_peers.test_langflow_real import provide_langflow

    return provide_langflow()


def _langgraph() -> Any:
    from tests.real_peers.test_langgraph_real import provide_langgraph

    return provide_langgraph()


def _licos() -> Any:
    from tests.real_peers.test_licos_real import provide_licos

    return provide_licos()


def _coding_clis() -> Any:
    from tests.real_peers.coding_clis import provide_coding_clis

    return provide_coding_clis().root


def _dify() -> Any:
    """Dify's locked dependencies and Debian's PostgreSQL and Redis, when the Dify source tree is in
    the cache (it cannot be fetched here: without it this says so and the suite skips)."""
    from tests.real_peers.dify_server import provide_services, provide_venv

    venv = provide_venv()
    provide_services()
    return venv


#: in the order the suites need them: the LangBot suite first, then the longest install
PROVIDERS: dict[str, Callable[[], Any]] = {
    "langbot": _langbot,
    "n8n": _n8n,
    "langflow": _langflow,
    "langgraph": _langgraph,
    "licos": _licos,
    "coding-clis": _coding_clis,
    "dify": _dify,
}


def warm(names: list[str]) -> int:
    """Run each named provider; returns how many could not install (each says why)."""
    failed = 0
    for name in names:
        started = time.monotonic()
        try:
            where = PROVIDERS[name]()
        except BaseException as exc:  # noqa: BLE001 - pytest.skip/fail raise BaseException subclasses
            if isinstance(exc, KeyboardInterrupt):
                raise
            failed += 1
            reason = str(getattr(exc, "msg", "") or exc).strip().splitlines()
            print(f"[warm-caches] {name}: not installed ({type(exc).__name__}: {reason[0] if reason else ''})",
                  file=sys.stderr, flush=True)
            continue
        print(f"[warm-caches] {name}: ready in {time.monotonic() - started:.0f}s at {where}", file=sys.stderr,
              flush=True)
    return failed


def main(argv: list[str]) -> int:
    names = argv or list(PROVIDERS)
    unknown = [n for n in names if n not in PROVIDERS]
    if unknown:
        print(f"unknown: {', '.join(unknown)}; known: {', '.join(PROVIDERS)}", file=sys.stderr)
        return 2
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    return 1 if warm(names) else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
