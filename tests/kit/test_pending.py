"""runner_kit.pending: the question a single-turn platform leaves open (Dify forms, Coze
requires_action), asked in one run and answered in the next. Plugin-level behaviour is in
tests/plugins/test_dify_human_input.py and test_coze_agent_requires_action.py; these check the
table of outcomes in the module's docstring on its own."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

from runner_kit import events as ev
from runner_kit.pending import HOST_MAX_EXPIRY, Incomplete, PendingAction

KEY = "demo.pending"
ALICE = SimpleNamespace(actor_id="alice", actor_name="Alice")
BOB = SimpleNamespace(actor_id="bob", actor_name="Bob")


def env(state: dict[str, Any] | None = None, *, text: str = "", click: Any = None, actor: Any = ALICE,
        interactions: Any = None, config: dict[str, Any] | None = None, files: list[Any] | None = None) -> Any:
    ctx = SimpleNamespace(state=SimpleNamespace(conversation=state or {}),
                          input=SimpleNamespace(interaction=click), actor=actor,
                          delivery=SimpleNamespace(interactions=interactions))
    return SimpleNamespace(ctx=ctx, config=config or {}, input=SimpleNamespace(text=text, files=files or []))


def asked(expires_at: float | None = None, **kw: Any) -> tuple[dict[str, Any], list[ev.Event]]:
    p = PendingAction(env(**kw), KEY, "demo question")
    out = p.ask({"title": "Pick a colour", "token": "t-1"}, text="Pick a colour: red or blue",
                expires_at=expires_at, request=lambda caps, exp: {"kind": "choice", "expires_at": exp, "actions": []})
    state = next(e for e in out if isinstance(e, ev.State))
    return state.value, out


def read_click(sub: Any) -> Any:
    return {"red": "RED", "blue": "BLUE"}.get(getattr(sub, "action_id", None))


def read_typed(text: str) -> Any:
    t = text.strip().lower()
    if t in ("red", "blue"):
        return t.upper()
    if t.startswith("colour:"):
        return Incomplete("colour must be red or blue")
    return None


def resolve(rec: dict[str, Any] | None, **kw: Any) -> Any:
    p = PendingAction(env({KEY: rec} if rec else {}, **kw), KEY, "demo question")
    return p.resolve(read_click, read_typed)


def texts(res: Any) -> str:
    return "".join(e.text for e in res.events if isinstance(e, ev.Text))


def cleared(res: Any) -> bool:
    return any(isinstance(e, ev.State) and e.key == KEY and e.value is None for e in res.events)


def test_ask_keeps_the_asker_and_asks_in_words_without_interactions():
    rec, out = asked()
    assert rec["actor"] == "alice" and rec["actor_name"] == "Alice" and rec["token"] == "t-1"
    assert rec["id"].startswith("ask-")
    assert [type(e) for e in out] == [ev.State, ev.Text] and out[1].text == "Pick a colour: red or blue"


def test_ask_uses_the_interaction_where_the_host_renders_one_and_caps_its_expiry():
    rec, out = asked(expires_at=time.time() + 10 * 24 * 3600, interactions=SimpleNamespace())
    inter = next(e for e in out if isinstance(e, ev.Interaction))
    assert inter.request["interaction_id"] == rec["id"]
    assert inter.request["expires_at"] <= time.time() + HOST_MAX_EXPIRY + 1
    assert any(isinstance(e, ev.NoReply) for e in out) and not any(isinstance(e, ev.Text) for e in out)


def test_no_question_pending_sends_the_message_as_usual():
    res = resolve(None, text="hello")
    assert res.go_on and res.answer is None and res.events == []


def test_a_typed_answer_from_the_asker_is_the_answer_and_the_record_stays_until_done():
    rec, _ = asked()
    res = resolve(rec, text="red")
    assert res.answer == "RED" and res.record == rec and not res.go_on and not cleared(res)


def test_a_click_for_another_or_no_question_is_one_line():
    rec, _ = asked()
    res = resolve(rec, click=SimpleNamespace(interaction_id="ask-other", action_id="red"))
    assert "no longer waiting" in texts(res) and not res.go_on and res.answer is None
    res = resolve(None, click=SimpleNamespace(interaction_id=rec["id"], action_id="red"))
    assert "no longer waiting" in texts(res) and not res.go_on


def test_a_click_is_read_and_an_unreadable_one_keeps_the_question():
    rec, _ = asked()
    assert resolve(rec, click=SimpleNamespace(interaction_id=rec["id"], action_id="blue")).answer == "BLUE"
    res = resolve(rec, click=SimpleNamespace(interaction_id=rec["id"], action_id="green"))
    assert "could not be read" in texts(res) and not cleared(res) and not res.go_on


def test_someone_else_is_refused_but_their_other_messages_go_on():
    rec, _ = asked()
    res = resolve(rec, text="blue", actor=BOB)
    assert texts(res) == "(Only Alice can answer the demo question “Pick a colour”.)" and res.answer is None
    res = resolve(rec, click=SimpleNamespace(interaction_id=rec["id"], action_id="red"), actor=BOB)
    assert texts(res).startswith("(Only Alice") and res.answer is None
    res = resolve(rec, text="what's for lunch?", actor=BOB)
    assert res.go_on and not cleared(res) and res.events == []


def test_an_approver_may_answer():
    rec, _ = asked()
    res = resolve(rec, text="blue", actor=BOB, config={"approvers": ["bob"]})
    assert res.answer == "BLUE"


def test_a_new_message_instead_of_an_answer_drops_the_question_with_a_note():
    rec, _ = asked()
    res = resolve(rec, text="never mind, tell me a joke")
    assert res.go_on and cleared(res) and "was left unanswered; your new message comes next" in texts(res)
    res = resolve(rec, text="red", files=[object()])  # a message with files is no answer
    assert res.go_on and cleared(res)


def test_an_incomplete_answer_says_what_is_missing():
    rec, _ = asked()
    res = resolve(rec, text="colour: green")
    assert texts(res) == "(The demo question “Pick a colour” is still open: colour must be red or blue.)"
    assert not res.go_on and not cleared(res)


def test_an_expired_question_is_dropped():
    rec, _ = asked(expires_at=time.time() - 1)
    res = resolve(rec, click=SimpleNamespace(interaction_id=rec["id"], action_id="red"))
    assert cleared(res) and "expired before it was answered" in texts(res) and not res.go_on
    res = resolve(rec, text="red")
    assert cleared(res) and res.go_on and res.answer is None and "sent as a new one" in texts(res)
