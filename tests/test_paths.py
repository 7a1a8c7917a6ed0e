from pathlib import Path

from hermes_store import default_db_path


def test_default_db_path_follows_current_hermes_home(monkeypatch, tmp_path):
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "a"))
    assert default_db_path() == tmp_path / "a" / "state.db"
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "b"))
    assert default_db_path() == tmp_path / "b" / "state.db"


def test_default_db_path_without_hermes_home(monkeypatch):
    monkeypatch.delenv("HERMES_HOME", raising=False)
    assert default_db_path() == Path.home() / ".hermes" / "state.db"
