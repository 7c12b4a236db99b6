"""runner_kit.pending: the question a single-turn platform leaves open (Dify forms, Coze
requires_action), asked in one run and answered in the next. Plugin-level behaviour is in
tests/plugins/test_dify_human_input.py and test_coze_agent_requires_action.py, group behaviour in
test_pending_group.py; these check the table of outcomes in the module's docstring on its own."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

from runner_kit import events as ev
from runner_kit.inputs import UserInput
from runner_kit.pending import HOST_MAX_EXPIRY, Incomplete, PendingAction
from runner_kit.session import session_key

KEY = "demo.pending"
ALICE = SimpleNamespace(actor_id="alice", actor_name="Alice")
BOB = SimpleNamespace(actor_id="bob", actor_name="Bob")
SHARED = {"user-id-source": "conversation"}  # one upstream conversation (and question) for the group


def user_of(actor: Any, config: dict[str, Any] | None) -> str:
    source = (config or {}).get("user-id-source") or "actor"
    return "conversation_conv-1" if source == "conversation" else f"user_{actor.actor_id}"


def key_of(actor: Any = ALICE, config: dict[str, Any] | None = None) -> str:
    """The state key of ``actor``'s session (runner_kit.session.session_key)."""
    return session_key(KEY, (config or {}).get("user-id-source"), user_of(actor, config)) or KEY


def env(state: dict[str, Any] | None = None, *, text: str = "", click: Any = None, actor: Any = ALICE,
        interactions: Any = None, config: dict[str, Any] | None = None, files: list[Any] | None = None) -> Any:
    ctx = SimpleNamespace(state=SimpleNamespace(conversation=state or {}),
                          input=SimpleNamespace(interaction=click), actor=actor,
                          delivery=SimpleNamespace(interactions=interactions))
    return SimpleNamespace(ctx=ctx, config=config or {}, user=user_of(actor, config),
                           input=UserInput(text=text, files=files or [], params={"lang": "en"}))


def asked(expires_at: float | None = None, **kw: Any) -> tuple[dict[str, Any], list[ev.Event]]:
    p = PendingAction(env(**kw), KEY, "demo question")
    out = p.ask({"title": "Pick a colour", "token": "t-1"}, text="Pick a colour: red or blue",
                expires_at=expires_at, request=lambda caps, exp: {"kind": "choice", "expires_at": exp, "actions": []})
    state = next(e for e in out if isinstance(e, ev.State))
    assert state.key == p.key
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


def resolve_with(rec: dict[str, Any] | None, **kw: Any) -> tuple[Any, PendingAction]:
    """Resolve a run of ``kw["actor"]`` (Alice) with ``rec`` stored under Alice's session key."""
    config = kw.get("config")
    p = PendingAction(env({key_of(ALICE, config): rec} if rec else {}, **kw), KEY, "demo question")
    return p.resolve(read_click, read_typed), p


def resolve(rec: dict[str, Any] | None, **kw: Any) -> Any:
    return resolve_with(rec, **kw)[0]


def texts(res: Any) -> str:
    return "".join(e.text for e in res.events if isinstance(e, ev.Text))


def stored(res: Any) -> Any:
    """The value the resolution stores (None: nothing stored, or the key cleared)."""
    values = [e.value for e in res.events if isinstance(e, ev.State)]
    return values[-1] if values else None


def cleared(res: Any) -> bool:
    return any(isinstance(e, ev.State) and not (e.value or {}).get("id") for e in res.events)


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


def test_in_a_shared_session_someone_else_never_answers_a_typed_reply_is_kept():
    rec, _ = asked(config=SHARED)
    res = resolve(rec, text="blue", actor=BOB, config=SHARED)
    assert res.answer is None and not res.go_on, "Bob's 'blue' is no answer to Alice's question"
    assert texts(res) == ("(Your message is kept until Alice answers the demo question “Pick a colour”; "
                          "it is sent right after.)")
    value = stored(res)
    assert value["id"] == rec["id"] and value["kept"][0]["text"] == "blue" and value["kept"][0]["name"] == "Bob"
    res = resolve(rec, click=SimpleNamespace(interaction_id=rec["id"], action_id="red"), actor=BOB, config=SHARED)
    assert texts(res) == "(Only Alice can answer the demo question “Pick a colour”.)" and res.answer is None
    assert stored(res) is None, "a refused click changes nothing"


def test_in_their_own_sessions_someone_else_never_meets_the_question():
    rec, _ = asked()  # user-id-source actor: Alice's question is under Alice's session key
    res, p = resolve_with(rec, text="blue", actor=BOB)
    assert res.go_on and res.answer is None and res.events == [], "Bob's message goes on in his own conversation"
    assert p.key != key_of(ALICE) and p.key == key_of(BOB)


def test_an_approver_may_answer_in_a_shared_session():
    conf = {**SHARED, "approvers": ["bob"]}
    rec, _ = asked(config=conf)
    res, p = resolve_with(rec, text="blue", actor=BOB, config=conf)
    assert res.answer == "BLUE" and p.record() == rec


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
