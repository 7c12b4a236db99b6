import math

import pytest

from runner_kit.config import ConfigSchema
from runner_kit.errors import RunnerError

ITEMS = [
    {"name": "base-url", "type": "string", "required": True},
    {"name": "api-key", "type": "secret", "required": True},
    {"name": "timeout", "type": "float", "default": 120},
    {"name": "retries", "type": "integer", "default": 2},
    {"name": "remove-think", "type": "boolean", "default": False},
    {"name": "mode", "type": "select", "default": "chat", "options": [{"name": "chat"}, {"name": "agent"}]},
    {"name": "free", "type": "select", "default": "a", "options": [{"name": "a"}], "allow_custom": True},
    {"name": "tweaks", "type": "json", "default": {}},
    {"name": "ids", "type": "array", "default": []},
    {"name": "advanced-settings", "type": "boolean", "default": False},
    {"name": "stream-growth", "type": "float", "default": 0.5, "advanced": True},
]
SCHEMA = ConfigSchema.from_items(ITEMS)
BASE = {"base-url": "http://127.0.0.1:1/v1", "api-key": "app-secret-value"}


def load(**extra):
    return SCHEMA.load({**BASE, **extra})


def test_defaults_applied_when_host_injects_none():
    cfg = load()
    assert cfg["timeout"] == 120.0 and cfg["retries"] == 2
    assert cfg["remove-think"] is False and cfg["mode"] == "chat" and cfg["tweaks"] == {} and cfg["ids"] == []


@pytest.mark.parametrize("raw,expected", [("false", False), ("0", False), ("no", False), ("off", False),
                                          ("true", True), ("1", True), ("YES", True), (1, True), (0, False)])
def test_boolean_strings_coerced(raw, expected):
    assert load(**{"remove-think": raw})["remove-think"] is expected


def test_numeric_strings_coerced():
    cfg = load(timeout="30", retries="3")
    assert cfg["timeout"] == 30.0 and cfg["retries"] == 3
    assert load(timeout=45)["timeout"] == 45.0  # migration sends int for a float field


@pytest.mark.parametrize("bad", ["abc", "nan", "inf", "-1", -5, math.inf, True])
def test_bad_timeouts_fail_clearly_naming_the_key(bad):
    with pytest.raises(RunnerError) as info:
        load(timeout=bad)
    assert info.value.code == "config.invalid"
    assert "'timeout'" in info.value.message


@pytest.mark.parametrize("blank", ["", "  ", "0", 0, 0.0])
def test_zero_or_blank_timeout_means_no_limit_as_the_host_reads_it(blank):
    assert load(timeout=blank)["timeout"] == 0


def test_integer_field_rejects_fractions():
    with pytest.raises(RunnerError) as info:
        load(retries="2.5")
    assert info.value.code == "config.invalid" and "retries" in info.value.message


def test_select_must_be_an_option_unless_custom_allowed():
    with pytest.raises(RunnerError) as info:
        load(mode="nope")
    assert info.value.code == "config.invalid" and "chat, agent" in info.value.message
    assert load(free="anything")["free"] == "anything"


def test_json_field_accepts_json_string():
    assert load(tweaks='{"a": 1}')["tweaks"] == {"a": 1}
    with pytest.raises(RunnerError):
        load(tweaks="{not json")


def test_required_missing_or_blank():
    with pytest.raises(RunnerError) as info:
        SCHEMA.load({"base-url": "http://x"})
    assert info.value.code == "config.missing" and "api-key" in info.value.message
    with pytest.raises(RunnerError):
        SCHEMA.load({"base-url": "http://x", "api-key": "   "})


def test_secrets_never_echoed():
    cfg = load()
    assert cfg.secrets == ["app-secret-value"]
    assert "app-secret-value" not in repr(cfg)
    with pytest.raises(RunnerError) as info:
        load(**{"api-key": ["not", "a", "string"]})
    assert "not" not in info.value.message.split("'api-key'")[1]


def test_unknown_keys_pass_through():
    cfg = load(**{"zzz-unknown": 1, "enable-all-tools": False})
    assert cfg["zzz-unknown"] == 1 and cfg["enable-all-tools"] is False


def test_advanced_fields_keep_defaults_unless_advanced_settings_on():
    assert load(**{"stream-growth": "2"})["stream-growth"] == 0.5
    assert load(**{"stream-growth": "2", "advanced-settings": "true"})["stream-growth"] == 2.0
