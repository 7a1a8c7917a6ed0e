"""Display-order triggers: a re-recorded message keeps the place of its first visible copy."""

from __future__ import annotations

# head_engine is a fixture: importing it makes it available to this module's tests
from support.head import add_message, add_session, head_engine
from hermes_store.backends.sqlite.display_order import DISPLAY_TRIGGERS
from hermes_store.display_order import drop_display_triggers
from hermes_store.fts import maintenance

SAME = b"identity-1"
OTHER = b"identity-2"


def _orders(conn) -> dict[int, int | None]:
    return dict(conn.exec_driver_sql("SELECT id, display_order FROM messages").all())


def _set(conn, mid, **values):
    assignments = ", ".join(f"{k} = ?" for k in values)
    conn.exec_driver_sql(f"UPDATE messages SET {assignments} WHERE id = ?", (*values.values(), mid))


def test_a_row_without_peers_is_ordered_by_its_id(head_engine):
    with head_engine.begin() as conn:
        add_session(conn, "s")
        plain = add_message(conn, "s", "no identity")
        unique = add_message(conn, "s", "own identity", display_identity=SAME)
        assert _orders(conn) == {plain: plain, unique: unique}


def test_a_visible_peer_lends_its_order_to_a_new_copy(head_engine):
    with head_engine.begin() as conn:
        add_session(conn, "s")
        add_session(conn, "t")
        first = add_message(conn, "s", "hi", display_identity=SAME)
        between = add_message(conn, "s", "other", display_identity=OTHER)
        copy = add_message(conn, "s", "hi", display_identity=SAME)
        elsewhere = add_message(conn, "t", "hi", display_identity=SAME)  # other session
        assert _orders(conn) == {first: first, between: between, copy: first, elsewhere: elsewhere}


def test_only_visible_peers_count_and_compacted_is_visible(head_engine):
    with head_engine.begin() as conn:
        add_session(conn, "s")
        hidden = add_message(conn, "s", "a", display_identity=SAME, active=0)
        after_hidden = add_message(conn, "s", "a", display_identity=SAME)
        add_session(conn, "t")
        compacted = add_message(conn, "t", "b", display_identity=SAME, active=0, compacted=1)
        after_compacted = add_message(conn, "t", "b", display_identity=SAME)
        orders = _orders(conn)
    assert orders[hidden] == hidden
    assert orders[after_hidden] == after_hidden
    assert orders[after_compacted] == compacted


def test_an_explicit_order_is_kept(head_engine):
    with head_engine.begin() as conn:
        add_session(conn, "s")
        mid = add_message(conn, "s", "placed", display_order=7)
        assert _orders(conn) == {mid: 7}


def test_visibility_flips_reorder_the_peers(head_engine):
    with head_engine.begin() as conn:
        add_session(conn, "s")
        a = add_message(conn, "s", "x", display_identity=SAME)
        b = add_message(conn, "s", "x", display_identity=SAME)
        assert _orders(conn) == {a: a, b: a}

        _set(conn, a, active=0)               # the first copy disappears (rewind)
        assert _orders(conn)[b] == b
        c = add_message(conn, "s", "x", display_identity=SAME)
        assert _orders(conn)[c] == b

        _set(conn, a, active=1)               # ...and comes back: everyone follows it
        assert _orders(conn) == {a: a, b: a, c: a}

        _set(conn, a, active=0, compacted=1)  # folded into a summary: still visible
        assert _orders(conn) == {a: a, b: a, c: a}


def test_changing_what_identity_is_made_of_clears_it_for_recomputation(head_engine):
    with head_engine.begin() as conn:
        add_session(conn, "s")
        a = add_message(conn, "s", "x", display_identity=SAME)
        b = add_message(conn, "s", "x", display_identity=SAME)
        unrelated = add_message(conn, "s", "y", display_identity=OTHER)

        _set(conn, b, token_count=12)         # not an identity field: nothing happens
        _set(conn, a, content="x", role="user")  # no real change: nothing happens
        assert _orders(conn) == {a: a, b: a, unrelated: unrelated}

        _set(conn, a, content="x edited")
        rows = dict((r[0], r[1:]) for r in conn.exec_driver_sql(
            "SELECT id, display_identity, display_order FROM messages").all())
        assert rows[a] == (None, None)
        assert rows[b] == (None, None)
        assert rows[unrelated] == (OTHER, unrelated)
        assert maintenance.integrity_check(conn) == []


def test_deleting_a_visible_row_reorders_its_remaining_peers(head_engine):
    with head_engine.begin() as conn:
        add_session(conn, "s")
        a = add_message(conn, "s", "x", display_identity=SAME)
        b = add_message(conn, "s", "x", display_identity=SAME)
        c = add_message(conn, "s", "x", display_identity=SAME)
        conn.exec_driver_sql("DELETE FROM messages WHERE id = ?", (a,))
        assert _orders(conn) == {b: b, c: b}

        _set(conn, c, active=0)
        _set(conn, b, display_order=99)  # a marker the delete trigger would overwrite
        conn.exec_driver_sql("DELETE FROM messages WHERE id = ?", (c,))  # invisible: no-op
        assert _orders(conn) == {b: 99}


def test_drop_display_triggers_removes_exactly_them(head_engine):
    with head_engine.begin() as conn:
        before = set(conn.exec_driver_sql("SELECT name FROM sqlite_master WHERE type='trigger'").scalars())
        drop_display_triggers(conn)
        after = set(conn.exec_driver_sql("SELECT name FROM sqlite_master WHERE type='trigger'").scalars())
        assert before - after == set(DISPLAY_TRIGGERS)
        add_session(conn, "s")
        mid = add_message(conn, "s", "unordered")
        assert _orders(conn) == {mid: None}
