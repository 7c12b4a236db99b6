"""runner_kit.http.base_url: every form an owner pastes or a migration carries gives one root."""

from __future__ import annotations

import pytest

from runner_kit.errors import RunnerError
from runner_kit.http import base_url


@pytest.mark.parametrize(
    "raw",
    ["http://h:8080", "http://h:8080/", " http://h:8080/api/v1 ", "http://h:8080/api/v1/", "http://h:8080/API/V1//"],
)
def test_suffix_is_cut_and_added_back(raw):
    assert base_url(raw, "base-url", suffixes=("/api/v1",), add="/api/v1") == "http://h:8080/api/v1"


def test_a_path_under_a_reverse_proxy_is_kept():
    got = base_url("https://example.com/weknora/api/v1/", "base-url", suffixes=("/api/v1",), add="/api/v1")
    assert got == "https://example.com/weknora/api/v1"


def test_blank_takes_the_default_and_query_and_fragment_are_dropped():
    assert base_url("", "base-url", default="https://api.tbox.cn") == "https://api.tbox.cn"
    assert base_url(None, "base-url", default="https://api.tbox.cn/") == "https://api.tbox.cn"
    assert base_url("http://h/api?x=1#y", "base-url", suffixes=("/api",)) == "http://h"


def test_repeated_suffixes_are_all_cut():
    assert base_url("http://h/api/v1/api/v1", "k", suffixes=("/api/v1",)) == "http://h"


@pytest.mark.parametrize("raw", ["h:8080", "ftp://h", "http://", "http://h /x", "file:///etc/passwd"])
def test_anything_but_http_is_config_invalid_naming_the_key(raw):
    with pytest.raises(RunnerError) as err:
        base_url(raw, "api-base", example="http://127.0.0.1:2026/api/langgraph")
    assert err.value.code == "config.invalid"
    assert "'api-base'" in str(err.value) and "http://127.0.0.1:2026/api/langgraph" in str(err.value)
