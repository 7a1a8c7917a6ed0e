"""A page's numbers (LIMIT, OFFSET) of listings, transcripts and searches
(``Prebuilt(paging=…)``): every page is the slice of the whole result that SQLite's
reading of the numbers gives (a negative LIMIT: no limit; a negative OFFSET: none),
whether the backend writes the numbers into the SQL (SQLite: 3.53 plans a bound LIMIT
far worse) or binds them (PostgreSQL), and the same statement serves many pages.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from hermes_store.backends.base import backend_of
from support.repository import backend, db, db_path, db_target  # noqa: F401

PAGES = [(3, 0), (3, 3), (3, 7), (0, 0), (-1, 0), (-1, 4), (5, -2), (100, 8)]


def _sliced(whole: list, limit: int, offset: int) -> list:
    start = max(offset, 0)
    return whole[start:] if limit < 0 else whole[start:start + limit]


@pytest.fixture
def filled(db):
    for i in range(10):
        db.create_session(f"s{i}", "cli")
        db._write(lambda conn, i=i: conn.execute(
            sa.text("UPDATE sessions SET started_at = :t WHERE id = :s"),
            {"t": 1000.0 + i, "s": f"s{i}"}))
    for i in range(12):
        db.append_message("s0", "user", f"paging needle {i}")
    return db


def _statements(db) -> list[str]:
    seen: list[str] = []
    sa.event.listen(db.engine, "before_cursor_execute",
                    lambda conn, cursor, statement, *rest: seen.append(statement))
    return seen


def test_listing_pages_are_slices_of_the_whole_listing(filled):
    whole = [row["id"] for row in filled.list_sessions_rich(limit=None)]
    assert whole == [f"s{i}" for i in range(9, -1, -1)]
    for limit, offset in PAGES:
        page = [row["id"] for row in filled.list_sessions_rich(limit=limit, offset=offset)]
        assert page == _sliced(whole, limit, offset), (limit, offset)


def test_transcript_pages_are_slices_of_the_whole_transcript(filled):
    whole = [m["id"] for m in filled.get_messages("s0")]
    assert len(whole) == 12
    for limit, offset in PAGES:
        page = [m["id"] for m in filled.get_messages("s0", limit=limit, offset=offset)]
        assert page == _sliced(whole, limit, offset), (limit, offset)


def test_search_pages_are_slices_of_the_whole_result(filled):
    whole = [hit["id"] for hit in filled.search_messages("needle", limit=50)]
    assert len(whole) == 12
    for limit, offset in [(3, 0), (3, 3), (4, 9), (50, 5)]:
        page = [hit["id"] for hit in filled.search_messages("needle", limit=limit, offset=offset)]
        assert page == _sliced(whole, limit, offset), (limit, offset)


def test_where_the_backend_writes_page_numbers_in_they_are_in_the_sql(filled):
    seen = _statements(filled)
    filled.list_sessions_rich(limit=3, offset=2)
    filled.list_sessions_rich(limit=4, offset=0)
    listings = [s for s in seen if "FROM sessions" in s and "ORDER BY sessions.started_at DESC" in s]
    assert len(listings) == 2
    if backend_of(filled.engine).pages_in_sql:
        assert "LIMIT 3 OFFSET 2" in listings[0] and "LIMIT 4 OFFSET 0" in listings[1]
    else:  # bound: one text for every page
        assert listings[0] == listings[1]
    assert all("__hermes_page_" not in s for s in seen)  # no template mark reaches a server


def test_a_page_number_that_is_not_a_plain_integer_is_bound_as_before(filled):
    """Only plain integers are written in; anything else (an IntEnum here) goes through
    Core, bound, where the driver judges it — the page is the same."""
    import enum

    class Size(enum.IntEnum):
        TWO = 2

    seen = _statements(filled)
    pages = [row["id"] for row in filled.list_sessions_rich(limit=Size.TWO, offset=1)]
    assert pages == ["s8", "s7"]
    listing = [s for s in seen if "ORDER BY sessions.started_at DESC" in s][-1]
    assert "LIMIT 2" not in listing and "__hermes_page_" not in listing
