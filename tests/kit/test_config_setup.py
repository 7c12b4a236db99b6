"""The kit's pieces for "a binding its owner never set up starts nothing" (issue 29, scenario 8):
ConfigSchema.untouched, load(required=False), not_set_up() and Adapter.check_setup in the driver."""

from __future__ import annotations

import pytest

from runner_kit.config import NOT_SET_UP, ConfigSchema, not_set_up
from runner_kit.errors import RunnerError
from tests.helpers import failure, messages, scripted_runner

SCHEMA = ConfigSchema.from_items([
    {"name": "agent", "type": "select", "required": True, "options": [{"name": "a"}, {"name": "b"}]},
    {"name": "api-key", "type": "secret", "default": ""},
    {"name": "mode", "type": "select", "default": "safe", "options": ["safe", "wild"]},
    {"name": "timeout", "type": "float", "default": 600},
    {"name": "tags", "type": "array[string]", "default": []},
])


@pytest.mark.parametrize("raw", [
    None,
    {},
    {"agent": None, "api-key": "", "mode": "safe", "timeout": 600, "tags": []},  # LangBot's stored defaults
    {"agent": "", "mode": "safe", "enable-all-tools": True, "tools": ["t"]},  # host fields do not count
])
def test_untouched(raw):
    assert SCHEMA.untouched(raw)


@pytest.mark.parametrize("raw", [
    {"agent": "a"},
    {"api-key": "k"},
    {"mode": "wild"},
    {"timeout": 30},
    {"tags": ["x"]},
    {"api-key": " "},  # a blank the owner typed is not the default
])
def test_touched(raw):
    assert not SCHEMA.untouched(raw)


def test_a_former_default_counts_as_untouched():
    assert not SCHEMA.untouched({"agent": "a"})
    assert SCHEMA.untouched({"agent": "a", "mode": "safe"}, former={"agent": "a"})
    assert not SCHEMA.untouched({"agent": "a", "mode": "wild"}, former={"agent": "a"})


def test_load_without_the_required_check():
    with pytest.raises(RunnerError) as err:
        SCHEMA.load({})
    assert err.value.code == "config.missing"
    cfg = SCHEMA.load({}, required=False)
    assert cfg["agent"] is None and cfg["mode"] == "safe"
    with pytest.raises(RunnerError):  # values are still checked
        SCHEMA.load({"mode": "nope"}, required=False)


def test_not_set_up_is_config_missing_with_its_line_for_the_chat():
    exc = not_set_up("Some Agent")
    assert exc.code == "config.missing" and not exc.retryable
    assert exc.message == str(exc.chat) == NOT_SET_UP.format(agent="Some Agent")  # type: ignore[attr-defined]
    assert "\n" not in exc.message


@pytest.mark.parametrize("surface", ["platform", "webui"])
async def test_check_setup_runs_before_anything_and_its_line_is_shown_as_it_is(surface):
    from runner_kit.runner import Adapter

    built: list[object] = []

    class Base(Adapter):
        platform = "Some Agent"

        def __init__(self, env):
            super().__init__(env)
            built.append(self)

        @classmethod
        def check_setup(cls, raw, schema):
            if not (raw or {}).get("agent"):
                raise not_set_up(cls.platform)

        async def stream(self):  # pragma: no cover - never reached
            yield None

    runner, host, _ = scripted_runner(Base, SCHEMA)
    results = [r async for r in runner.invoke(host.make_context("hello", config={}, surface=surface))]
    code, _, message = failure(results)
    assert code == "config.missing" and message == NOT_SET_UP.format(agent="Some Agent")
    assert messages(results) == [NOT_SET_UP.format(agent="Some Agent")]
    assert built == [], "no adapter was made"
