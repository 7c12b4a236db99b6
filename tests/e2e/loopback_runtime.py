"""Start the LangBot plugin runtime (``lbp rt``) with its websocket servers bound to loopback.

Run with the LangBot venv's interpreter, never imported by the test suite::

    <venv>/bin/python tests/e2e/loopback_runtime.py --ws-control-port P1 --ws-debug-port P2

The SDK hard-codes ``0.0.0.0`` for the control server (``runtime/app.py``) and defaults the debug
server to it (``WebSocketServerController(host="0.0.0.0")``). Both are built through
``WebSocketServerController``, so forcing its ``host`` here puts every runtime listener on
127.0.0.1 without touching the installed files.
"""

from __future__ import annotations

import sys

LOOPBACK = "127.0.0.1"


def _patch_bind_host() -> None:
    from langbot_plugin.runtime.io.controllers.ws import server

    cls = server.WebSocketServerController
    original_init = cls.__init__

    def loopback_init(self, port, *args, **kwargs):
        kwargs["host"] = LOOPBACK
        original_init(self, port, *args, **kwargs)

    cls.__init__ = loopback_init


def main() -> int:
    _patch_bind_host()
    from langbot_plugin.cli import main as lbp_main

    sys.argv = ["lbp", "rt", *sys.argv[1:]]
    return lbp_main() or 0


if __name__ == "__main__":
    sys.exit(main())
