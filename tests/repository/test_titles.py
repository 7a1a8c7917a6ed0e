"""Titles concern: api-catalog §4 examples."""

from __future__ import annotations

import pytest

from hermes_store import SessionDB, TitleError
from support.repository import backend, db, db_path, db_target, set_fields  # noqa: F401


@pytest.mark.parametrize("raw, clean", [
    (None, None),
    ("", None),
    ("   ", None),
    ("  hello   world \t\n x ", "hello world x"),
    ("a\x00b\x07c\x7fd", "abcd"),
    ("line1\r\nline2", "line1 line2"),
    ("zero\u200bwidth\u200f \u202eRTL\u2066 \ufeffbom\ufffc", "zerowidth RTL bom"),
    ("nbsp\u00a0and\u3000ideographic", "nbsp and ideographic"),
    ("lone \ud800 surrogate", "lone \ufffd surrogate"),
    ("x" * 100, "x" * 100),
    ("  " + "y" * 100 + "  ", "y" * 100),
])
def test_sanitize_title(raw, clean):
    assert SessionDB.sanitize_title(raw) == clean


def test_sanitize_title_too_long_is_a_value_error_with_upstream_text():
    with pytest.raises(ValueError, match=r"^Title too long \(101 chars, max 100\)$") as err:
        SessionDB.sanitize_title("z" * 101)
    assert isinstance(err.value, TitleError)
    assert SessionDB.MAX_TITLE_LENGTH == 100


def test_set_title_sanitises_clears_and_reports_existence(db):
    db.create_session("s1", "cli")
    assert db.set_session_title("s1", "  My\tProject ") is True
    assert db.get_session_title("s1") == "My Project"
    assert db.set_session_title("s1", "My Project") is True  # unchanged, still True
    assert db.set_session_title("s1", "   ") is True
    assert db.get_session_title("s1") is None
    assert db.set_session_title("missing", "free title") is False


def test_titles_are_unique_and_case_sensitive(db):
    db.create_session("s1", "cli")
    db.create_session("s2", "cli")
    db.set_session_title("s1", "my project")
    assert db.set_session_title("s2", "My Project") is True  # BINARY comparison
    with pytest.raises(ValueError) as err:
        db.set_session_title("s2", "my project")
    assert str(err.value) == "Title 'my project' is already in use by session s1"
    # raised even for an id that does not exist
    with pytest.raises(TitleError, match="already in use by session s1"):
        db.set_session_title("ghost", "my project")
    assert db.get_session_title("s2") == "My Project"


def test_title_moves_from_a_compression_ancestor_only(db):
    db.create_session("root", "cli")
    db.set_session_title("root", "Fix Docker Build")
    db.end_session("root", "compression")
    db.create_session("c1", "cli", parent_session_id="root")
    db.end_session("c1", "compression")
    db.create_session("c2", "cli", parent_session_id="c1")
    assert db.set_session_title("c2", "Fix Docker Build") is True
    assert db.get_session_title("root") is None
    assert db.get_session_title("c2") == "Fix Docker Build"

    db.create_session("p", "cli")
    db.set_session_title("p", "Parent Title")
    db.end_session("p", "user_exit")
    db.create_session("kid", "cli", parent_session_id="p")
    with pytest.raises(TitleError, match="already in use by session p"):
        db.set_session_title("kid", "Parent Title")
    assert db.get_session_title("p") == "Parent Title"


def test_set_auto_title_if_empty(db):
    db.create_session("s1", "cli")
    db.create_session("s2", "cli")
    assert db.set_auto_title_if_empty("s1", "auto one") is True
    assert db.set_auto_title_if_empty("s1", "auto two") is False
    assert db.get_session_title("s1") == "auto one"
    assert db.set_auto_title_if_empty("missing", "x") is False
    with pytest.raises(TitleError, match="already in use"):
        db.set_auto_title_if_empty("s2", "auto one")
    with pytest.raises(ValueError, match="Title too long"):
        db.set_auto_title_if_empty("s2", "q" * 101)
    assert db.get_session_title("s2") is None


def test_get_session_by_title_exact(db):
    db.create_session("s1", "cli")
    db.set_session_title("s1", "Exact")
    assert db.get_session_by_title("Exact")["id"] == "s1"
    assert db.get_session_by_title("exact") is None


def test_resolve_session_by_title_prefers_newest_variant(db):
    for i, (sid, title) in enumerate([("a", "my project"), ("b", "my project #3"),
                                      ("c", "my project #2")]):
        db.create_session(sid, "cli")
        set_fields(db, sid, started_at=1000.0 + i)
        db.set_session_title(sid, title)
    # most recently *started* variant, not the highest number
    assert db.resolve_session_by_title("my project") == "c"
    assert db.resolve_session_by_title("my project #2") == "c"
    assert db.resolve_session_by_title("nothing") is None

    db.create_session("o", "cli")
    db.set_session_title("o", "orphan #5")
    assert db.resolve_session_by_title("orphan") == "o"
    db.create_session("g", "cli")
    db.set_session_title("g", "gap #foo")
    assert db.resolve_session_by_title("gap") == "g"


def test_resolve_by_title_escapes_like_wildcards(db):
    db.create_session("w", "cli")
    db.set_session_title("w", "100xdone #2")
    assert db.resolve_session_by_title("100%done") is None
    assert db.resolve_session_by_title("100_done") is None


def test_get_next_title_in_lineage(db):
    assert db.get_next_title_in_lineage("my project") == "my project"
    assert db.get_next_title_in_lineage("x #0") == "x"
    db.create_session("a", "cli")
    db.set_session_title("a", "my project")
    assert db.get_next_title_in_lineage("my project") == "my project #2"
    for sid, title in (("b", "my project #2"), ("c", "my project #3")):
        db.create_session(sid, "cli")
        db.set_session_title(sid, title)
    assert db.get_next_title_in_lineage("my project") == "my project #4"
    assert db.get_next_title_in_lineage("my project #2") == "my project #4"
    for sid, title in (("g1", "gap"), ("g7", "gap #7"), ("gf", "gap #foo")):
        db.create_session(sid, "cli")
        db.set_session_title(sid, title)
    assert db.get_next_title_in_lineage("gap") == "gap #8"


def test_next_title_is_not_length_checked(db):
    base = "t" * 100
    db.create_session("a", "cli")
    db.set_session_title("a", base)
    nxt = db.get_next_title_in_lineage(base)
    assert nxt == base + " #2" and len(nxt) == 103
    db.create_session("b", "cli")
    with pytest.raises(TitleError, match="Title too long"):
        db.set_session_title("b", nxt)
