"""Every fault, over real loopback sockets, ends in one run.failed with the right code in time."""

from __future__ import annotations

import time

import pytest

from tests.fakes.http_server import BlackholeServer, closed_port
from tests.helpers import failure, make_runner, run

from .cases import HTTP_FAULTS
from .conftest import MATRIX

FAULT_TIMEOUT = 3.0  # seconds of host deadline for faults that hang


@pytest.mark.parametrize("fault", sorted(HTTP_FAULTS))
async def test_fault(case, server, host, fault):
    if fault not in case.faults:
        pytest.skip(f"{case.plugin} has no {fault} cell")
    cfg = case.config(server)
    if fault == "refused":
        cfg[case.base_url_key] = cfg[case.base_url_key].replace(f":{server.port}", f":{closed_port()}")
    blackhole = None
    if fault == "connect_timeout":
        blackhole = BlackholeServer().start()
        cfg[case.base_url_key] = cfg[case.base_url_key].replace(f":{server.port}", f":{blackhole.port}")
    if fault not in ("refused", "connect_timeout"):
        case.set_fault(server, fault)
    deadline = time.time() + FAULT_TIMEOUT + case.startup
    try:
        results = await run(make_runner(case.plugin, host), host, config=cfg, deadline_at=deadline)
    finally:
        if blackhole is not None:
            blackhole.stop()
    code, retryable, message = failure(results)
    MATRIX[(case.plugin, fault)] = f"{code}{' R' if retryable else ''}"
    assert time.time() < deadline, "failure must arrive within the deadline"
    assert (code, retryable) == case.faults[fault], message
    assert message and len(message) < 600
