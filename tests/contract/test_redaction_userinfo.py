"""A password in a base URL (``http://alice:S3cr3t-pw@host:port``) never reaches the chat, the
host's results or any log line, for every plugin that takes an address from its config, whatever
way the run fails; the explanation still says where it tried, and the request still authenticates."""

from __future__ import annotations

import logging
import time

import pytest

from tests.fakes.http_server import closed_port
from tests.helpers import dump, failure, make_runner, messages, rtype, run, terminal

PASSWORD = "S3cr3t-pw"
USERINFO = f"alice:{PASSWORD}@"
FAULT_DEADLINE = 10.0  # seconds: a backstop only, every cell ends on its own well before
CELLS = ("refused", "http_500", "http_401", "stall")


def _with_userinfo(case, server, port: int | None = None) -> tuple[dict, str]:
    """The case's config with ``alice:S3cr3t-pw@`` in its address (on ``port`` when given)."""
    cfg = case.config(server)
    url = cfg.get(case.base_url_key)
    if not isinstance(url, str) or "://" not in url:
        pytest.skip(f"{case.plugin} takes no address from its config ({case.base_url_key} is LangBot's model)")
    if port is not None:
        url = url.replace(f":{server.port}", f":{port}")
    cfg[case.base_url_key] = url.replace("://", "://" + USERINFO, 1)
    return cfg, url


def _everything(results, caplog) -> str:
    """All the host received, and every log line (message and traceback) of every logger."""
    lines = [r.getMessage() + "\n" + (r.exc_text or "") for r in caplog.records]
    return dump(results) + "\n".join(lines)


@pytest.mark.parametrize("cell", CELLS)
async def test_password_in_base_url_never_shows(case, server, host, caplog, cell):
    if cell not in case.faults and cell != "refused":
        pytest.skip(f"{case.plugin} has no {cell} cell")
    caplog.set_level(logging.DEBUG)
    port = closed_port() if cell == "refused" else None
    cfg, _ = _with_userinfo(case, server, port)
    if cell == "stall":
        cfg.update({"advanced-settings": True, "idle-timeout": 0.3})  # a stalled stream gives up in 0.3 s
        if case.stall is not None:
            case.stall(server, False)
        else:
            case.set_fault(server, cell)
    elif cell != "refused":
        case.set_fault(server, cell)
    deadline = time.time() + FAULT_DEADLINE + case.startup
    results = await run(make_runner(case.plugin, host), host, config=cfg, deadline_at=deadline)
    code, _, message = failure(results)
    assert code.startswith(("upstream.", "process.")), (code, message)
    shown = "\n".join(messages(results))
    assert shown, "the chat gets an explanation"
    everything = _everything(results, caplog)
    assert PASSWORD not in everything
    assert USERINFO not in everything
    if "://" in shown:  # an address in the explanation keeps its host, only the userinfo goes
        assert "***@127.0.0.1" in shown or "//127.0.0.1" in shown, shown
    if cell == "refused" and case.startup == 0:  # the kit's own HTTP: the address it could not reach
        assert f"127.0.0.1:{port}" in shown, shown


async def test_userinfo_in_base_url_still_authenticates(case, server, host, caplog):
    """The platform's key still goes out (the userinfo goes as Basic only where no Authorization
    header is set), the answer arrives, and no log line shows the password."""
    caplog.set_level(logging.DEBUG)
    cfg, _ = _with_userinfo(case, server)
    case.answer(server, ["all ", "good"], 0.0)
    results = await run(make_runner(case.plugin, host), host, config=cfg)
    assert rtype(terminal(results)) == "run.completed", dump(results)[-600:]
    assert "".join(messages(results)).endswith("all good")
    if case.seen is not None and case.key:
        assert case.seen(server)[-1].credential == case.key
    assert PASSWORD not in _everything(results, caplog)
    for record in caplog.records:  # httpx logs each request's URL: it goes out without userinfo
        if record.name == "httpx":
            assert "alice" not in record.getMessage(), record.getMessage()
