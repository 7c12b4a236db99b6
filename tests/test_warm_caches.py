"""`python -m tests.warm_caches` (run by .ci/run beside the LangBot suite): each install is tried in
order, one that cannot install says why and the next goes on, and a typo is refused."""

from __future__ import annotations

import pytest

from tests import warm_caches


def test_an_install_that_cannot_happen_is_said_and_the_next_goes_on(monkeypatch, capsys):
    done = []

    def skipped():
        pytest.skip("n8n real peer: npm is not installed on this machine")

    monkeypatch.setattr(warm_caches, "PROVIDERS", {
        "n8n": skipped, "langflow": lambda: done.append("langflow") or "/cache/langflow"})
    assert warm_caches.main([]) == 1
    err = capsys.readouterr().err
    assert done == ["langflow"]
    assert "n8n: not installed (Skipped: n8n real peer: npm is not installed on this machine)" in err
    assert "langflow: ready in" in err and "/cache/langflow" in err


def test_only_the_named_installs_run_and_unknown_names_are_refused(monkeypatch, capsys):
    done = []
    monkeypatch.setattr(warm_caches, "PROVIDERS", {"a": lambda: done.append("a"), "b": lambda: done.append("b")})
    assert warm_caches.main(["b"]) == 0 and done == ["b"]
    assert warm_caches.main(["b", "nope"]) == 2 and done == ["b"]
    assert "unknown: nope; known: a, b" in capsys.readouterr().err


def test_every_slow_suite_install_is_there_in_the_order_the_suites_need_them():
    assert list(warm_caches.PROVIDERS) == ["langbot", "n8n", "langflow", "langgraph", "licos", "coding-clis", "dify"]


def test_dify_is_warmed_only_from_a_cached_source(tmp_path, monkeypatch, capsys):
    """Without Dify's source tree nothing is installed and the reason names the command."""
    monkeypatch.setenv("DIFY_SOURCE", str(tmp_path / "none"))
    monkeypatch.setenv("DIFY_VENV", str(tmp_path / "venv"))
    assert warm_caches.warm(["dify"]) == 1
    err = capsys.readouterr().err
    assert "dify: not installed" in err and "no Dify 1.12.1 source" in err
    assert not (tmp_path / "venv").exists()
