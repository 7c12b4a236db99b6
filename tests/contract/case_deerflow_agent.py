"""DeerFlowAgent in the contract suite and the fault matrix, against tests/fakes/deerflow.py in its
DeerFlow flavour (nginx root as migrated pipelines carry it, Bearer personal access token).

Every HTTP cell keeps the shared default. Notes on the mapping:

- ``http_404``: the fake's generic 404 is FastAPI's ``{"detail": "Not Found"}`` (a wrong route), which
  stays ``upstream.not_found``. LangGraph's "Thread or assistant not found." for a stored thread starts a
  fresh thread, and for a thread created a moment ago is ``config.invalid`` (the assistant is unknown)
  — both in tests/plugins/test_deerflow_agent.py against the LangGraph flavour.
- ``error_event``: the fake sends what the real server sent when the model behind the graph failed
  (``OpenAIAPIError`` "An internal error occurred", fixture 32): the model provider failed, retryable
  ``upstream.unavailable``. A graph's own exception (``ValueError``) is ``upstream.error``, not
  retryable (plugin tests).

``forget_sessions``: the DeerFlow gateway (since 2.0-rc) answers a run on a thread it no longer
tracks with 404 ``Thread <id> not found``, so the fresh-session cell sees a new thread id. The older
gateway, which started such a thread again empty instead, is in the plugin tests (the plugin
notices the empty thread and announces it), as is the 404 of a plain LangGraph server.

The credential is a full ``auth-header`` (``Bearer <token>``): DeerFlow runs without authentication by
default, so no key is required and a blank one is not ``config.missing``. ``usage`` is the sum of the
run's AI messages' ``usage_metadata``; with usage off the fake's model reports none.

``user-id-source`` is set to ``actor``: the plugin's default is ``conversation`` (one thread per LangBot
conversation, as the built-in DeerFlow runner kept it), and the two-bots cell tells the bots apart
by the person written into the thread metadata.
"""

from __future__ import annotations

from typing import Any

from tests.contract.cases import PluginCase, Question, Seen

KEY = "df-pat-contract-secret-token"


def cases() -> list[PluginCase]:
    from tests.fakes.deerflow import FakeDeerFlow

    def start() -> Any:
        srv = FakeDeerFlow(api_key=KEY)
        srv.start()
        return srv

    def config(srv: Any, key: str = KEY) -> dict[str, Any]:
        return {"api-base": srv.base_url, "auth-header": f"Bearer {key}", "user-id-source": "actor"}

    def answer(srv: Any, tokens: list[str], delay: float) -> None:
        srv.answer_tokens = tokens
        srv.token_delay = delay

    def no_usage(srv: Any) -> None:
        srv.include_usage = False

    def set_fault(srv: Any, name: str) -> None:
        srv.fault = name

    def stall(srv: Any, pings: bool) -> None:
        srv.answer_tokens = ["The first part ", "and the rest."]
        srv.heartbeat_interval = 0.2
        srv.fault = "stall_pings" if pings else "stall"

    def think(srv: Any, thoughts: list[str], tokens: list[str]) -> None:
        srv.reasoning = "".join(thoughts)
        srv.answer_tokens = tokens

    def seen(srv: Any) -> list[Seen]:
        out = []
        for r in srv.stream_requests():  # what clear_requests() forgets, so does this
            tid = r.path.split("/threads/", 1)[1].split("/", 1)[0]
            thread = srv.threads.get(tid)
            user = (thread.metadata.get("langbot_user") if thread else "") or ""
            out.append(Seen(credential=r.headers.get("authorization", "").removeprefix("Bearer "), user=user,
                            conversation=tid, cookie=r.headers.get("cookie"), sent=r.body.decode("utf-8", "replace")))
        return out

    def ask(srv: Any, on: bool) -> None:
        # the graph calls interrupt() with a question and two options; the next run resumes it
        srv.interrupt_value = {"question": "Which city?", "options": ["Paris", "Berlin"]} if on else None

    def resumed(srv: Any) -> str | None:
        # the answer DeerFlow got: the last run that resumed the graph ({"command": {"resume": …}})
        answers = [c["resume"] for r in srv.stream_requests()
                   if isinstance(c := r.json().get("command"), dict) and "resume" in c]
        if not answers:
            return None
        last = answers[-1]
        return str(next(iter(last.values()), "")) if isinstance(last, dict) else str(last)

    def image_received(srv: Any) -> bool:
        for run in srv.runs:
            for msg in ((run.body.get("input") or {}).get("messages") or []):
                content = msg.get("content")
                if isinstance(content, list) and any(
                        p.get("type") == "image_url" and p["image_url"]["url"].startswith("data:image/png;base64,")
                        for p in content if isinstance(p, dict)):
                    return True
        return False

    return [
        PluginCase(
            plugin="deerflow-agent",
            start_server=start,
            config=config,
            key=KEY,
            answer=answer,
            no_usage=no_usage,
            set_fault=set_fault,
            image_received=image_received,
            cancel_seen=lambda srv: bool(srv.cancelled),
            base_url_key="api-base",
            stall=stall,
            think=think,
            seen=seen,
            ended=lambda srv: list(srv.deleted),
            forget_sessions=lambda srv: srv.forget_conversations(),
            second_bot=lambda srv, key: (srv.api_keys.add(key), config(srv, key))[1],
            group_modes={"actor": "person", "hashed": "person", "conversation": "shared",
                         "legacy-session": "shared", "legacy-bot": "shared"},
            # DeerFlow declares no interactions: its question is answered by typing
            question=Question(ask=ask, answer="Paris", click={}, received=resumed, expect="Paris",
                              shown="Which city?", free_text=True),
        )
    ]
