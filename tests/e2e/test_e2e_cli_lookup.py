"""How the e2e tests find the real CLIs: skip only without node/npm, and never under CI."""

from __future__ import annotations

import e2e_support
import pytest


def _no_cli_no_node(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(e2e_support, "_lookup", lambda name: None)
    monkeypatch.setattr(e2e_support.shutil, "which", lambda name: None)


def test_missing_node_skips_with_the_reason(monkeypatch, capsys):
    _no_cli_no_node(monkeypatch)
    monkeypatch.delenv("RALPH_CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="node and npm not installed"):
        e2e_support.find_cli("claude")
    assert "SKIP: real `claude` CLI unavailable" in capsys.readouterr().err


def test_missing_node_fails_under_ci(monkeypatch):
    _no_cli_no_node(monkeypatch)
    monkeypatch.setenv("RALPH_CI", "1")
    with pytest.raises(pytest.fail.Exception, match="RALPH_CI=1"):
        e2e_support.find_cli("codex")


def test_pinned_install_is_preferred(monkeypatch, tmp_path):
    pinned = tmp_path / "claude"
    pinned.write_text("#!/bin/sh\n")
    monkeypatch.setattr(e2e_support, "NPM_BIN", tmp_path)
    monkeypatch.setattr(e2e_support.shutil, "which", lambda name: "/usr/bin/" + name)
    assert e2e_support.find_cli("claude") == str(pinned)
    assert e2e_support.find_cli("codex") == "/usr/bin/codex"  # else PATH
