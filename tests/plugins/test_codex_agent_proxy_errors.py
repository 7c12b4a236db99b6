"""codex-agent behind its secret proxy: a model API that cannot be connected to reaches Codex as the
proxy's 502 ("could not reach <host> (ConnectError)"); the chat still tells the owner to check
base-url, and a 502 from the model API itself does not."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "codex-agent"))
from codex_agent.errors import turn_error  # noqa: E402


def test_the_proxys_502_says_check_base_url():
    err = turn_error({"message": "unexpected status 502 Bad Gateway: could not reach api.example.com (ConnectError), "
                                 "url: http://127.0.0.1:4100/r/ab12/responses"})
    assert err.code == "upstream.unavailable" and err.retryable
    assert "check base-url" in str(err)


def test_an_upstream_502_is_not_blamed_on_base_url():
    err = turn_error({"message": "unexpected status 502 Bad Gateway: upstream overloaded"})
    assert err.code == "upstream.unavailable"
    assert "base-url" not in str(err)
