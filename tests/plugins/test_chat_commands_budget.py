"""A budget reached while the agent works (issue 36): Codex reports each model request's usage as it
goes (the real 0.171.0 once the request's tools ran), so a turn that reaches a budget in the middle
of a tool loop is stopped there, with the budget's line, and the session's next message is refused
without reaching the model."""

from __future__ import annotations

import time

from tests.contract import cases as _cases  # noqa: F401 - loads the case modules in their order
from tests.contract.case_codex_agent import CodexServer, config
from tests.helpers import children_left, make_runner, messages, rtype, run, terminal

PLUGIN = "codex-agent"


async def test_a_budget_reached_mid_turn_stops_the_agent_there(host):
    srv = CodexServer()
    srv.start()
    try:
        srv.tool_command = "echo step"  # the first request asks for a command; its usage comes after it
        srv.answer_tokens, srv.token_delay = ["word "] * 60, 0.1  # then a 6 s answer, unless stopped
        cfg = {**config(srv), "session-budget-tokens": 1, "permission-mode": "full-access"}
        runner = make_runner(PLUGIN, host)
        start = time.monotonic()
        results = await run(runner, host, "a long job", config=cfg)
        assert time.monotonic() - start < 5, "stopped once the first request's usage came"
        assert rtype(terminal(results)) == "run.completed", terminal(results).data
        assert "reached its budget" in messages(results)[-1], messages(results)
        assert messages(results)[-1].count("word") < 60, "the answer was cut there"
        calls = len(srv.model_requests())
        srv.tool_command = None
        again = await run(runner, host, "more", config=cfg)
        assert "reached its budget" in messages(again)[-1] and len(srv.model_requests()) == calls
        assert not await children_left()
    finally:
        srv.stop()
