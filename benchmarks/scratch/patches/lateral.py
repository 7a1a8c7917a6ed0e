import sys
root = sys.argv[1]
def edit(path, pairs):
    p = f"{root}/{path}"
    s = open(p).read()
    for old, new in pairs:
        assert old in s, (path, old[:80])
        s = s.replace(old, new)
    open(p, "w").write(s)

edit("hermes_store/repository/search.py", [
('''def _with_neighbours(from_clause):
    """``from_clause`` (which holds ``messages``) joined to each hit's neighbours."""
    return (from_clause.outerjoin(_PREV, _PREV.c.id == _PREV_ID)
            .outerjoin(_NEXT, _NEXT.c.id == _NEXT_ID))
''', '''def _with_neighbours(from_clause):
    """``from_clause`` (which holds ``messages``) joined to each hit's neighbours."""
    return (from_clause.outerjoin(_PREV, _PREV.c.id == _PREV_ID)
            .outerjoin(_NEXT, _NEXT.c.id == _NEXT_ID))


def _neighbour_row(before: bool) -> sa.Lateral:
    """The message just before (after) the hit, as a LATERAL subquery of its role and
    content: one index probe per neighbour, where ``_with_neighbours`` probes for the
    id and then reads the row by its key."""
    probe = M.alias("probe")
    position = sa.tuple_(probe.c.timestamp, probe.c.id)
    hit = sa.tuple_(M.c.timestamp, M.c.id)
    if before:
        nearer, order = position < hit, (probe.c.timestamp.desc(), probe.c.id.desc())
    else:
        nearer, order = position > hit, (probe.c.timestamp.asc(), probe.c.id.asc())
    return (sa.select(probe.c.role, probe.c.content)
            .where(probe.c.session_id == M.c.session_id, nearer)
            .order_by(*order).limit(1).lateral("prev_message" if before else "next_message"))


_PREV_ROW = _neighbour_row(True)
_NEXT_ROW = _neighbour_row(False)
_LATERAL_CONTEXT_COLUMNS = (
    _PREV_ROW.c.role.label("prev_role"), _PREV_ROW.c.content.label("prev_content"),
    _NEXT_ROW.c.role.label("next_role"), _NEXT_ROW.c.content.label("next_content"),
)


def _context(sql: fq.Fts5Search):
    """(the context columns, the join that brings them) for the engine: LATERAL where
    it has it (``sql.lateral_context``), else the probe-for-id joins."""
    if not sql.lateral_context:
        return _CONTEXT_COLUMNS, _with_neighbours
    return _LATERAL_CONTEXT_COLUMNS, lambda from_clause: (
        from_clause.outerjoin(_PREV_ROW, sa.true()).outerjoin(_NEXT_ROW, sa.true()))
'''),
# _ranked page-first branch
('''    return Prebuilt(
        sa.select(*columns, page.c.page_rank.label("rank"))
        .select_from(_with_neighbours(page.join(M, M.c.id == page.c.page_id)
                                      .join(S, S.c.id == M.c.session_id)))
        .order_by(page.c.page_rank, page.c.page_id)
    )''', '''    context, joined = _context(sql)
    columns = (*_RESULT_COLUMNS, *_snippet(sql, index, form), M.c.content, *context)
    return Prebuilt(
        sa.select(*columns, page.c.page_rank.label("rank"))
        .select_from(joined(page.join(M, M.c.id == page.c.page_id)
                            .join(S, S.c.id == M.c.session_id)))
        .order_by(page.c.page_rank, page.c.page_id)
    )'''),
# _by_time
('''    return Prebuilt(
        sa.select(*_RESULT_COLUMNS, *_snippet(sql, index, form), M.c.content,
                  *_CONTEXT_COLUMNS)
        .select_from(_with_neighbours(page.join(M, M.c.id == page.c.page_id)
                                      .join(S, S.c.id == M.c.session_id)))
        .order_by(page.c.page_time.desc() if newest else page.c.page_time.asc(),''', '''    context, joined = _context(sql)
    return Prebuilt(
        sa.select(*_RESULT_COLUMNS, *_snippet(sql, index, form), M.c.content, *context)
        .select_from(joined(page.join(M, M.c.id == page.c.page_id)
                            .join(S, S.c.id == M.c.session_id)))
        .order_by(page.c.page_time.desc() if newest else page.c.page_time.asc(),'''),
])
edit("hermes_store/fts/query_pg.py", [
('''    page_size_in_sql = True
''', '''    page_size_in_sql = True
    #: each hit's neighbours as LATERAL subqueries of their rows
    #: (``repository.search._context``)
    lateral_context = True
'''),
])
edit("hermes_store/fts/query.py", [
('''    page_size_in_sql = False
''', '''    page_size_in_sql = False
    #: whether each hit's neighbours are LATERAL subqueries (SQLite has no LATERAL)
    lateral_context = False
'''),
])
print("ok")
