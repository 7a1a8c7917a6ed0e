"""The PostgreSQL search query layer (backends/postgresql/fts/search.py) finds what FTS5 finds.

Rows are inserted directly into a SQLite head and a PostgreSQL head; each query is
sanitized and routed once (fts/query.py, shared), then run on SQLite through FTS5 MATCH /
LIKE and on PostgreSQL through the conditions the repository builds its statements
from (``query_pg.SEARCH``, ``dialect.like_nocase``). Membership must be equal; ranking
may differ.
"""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa

from hermes_store import migrate, schema
from hermes_store.backends.postgresql import engine as postgres
from hermes_store.backends.sqlite.engine import create_engine as sqlite_engine
from hermes_store.fts import query as fq
from hermes_store.backends.postgresql.fts import search as pq
from hermes_store.backends.sqlite.fts import search as fts5
from hermes_store.location import resolve
from hermes_store.sql.constructs import like_nocase
from hermes_store.sql.values import LIKE_ESCAPE, like_containing

M, S = schema.messages, schema.sessions

SESSIONS = [("s", "cli", None), ("c", "cron", None), ("d", "cli", {"_delegate_from": "s"})]
TOOL_BODY = "build log " + "x" * 8190 + " needlelate"
ROWS = [
    ("s", "user", "Deploy the docker build to production", {}),
    ("s", "user", "docker-compose up failed with exit code 137", {}),
    ("s", "assistant", "The build failed: missing snake_case_name in config", {}),
    ("s", "user", "my-app.config.ts was updated; see P2.2 notes", {}),
    ("s", "user", "Deploying dockerfiles is fun", {}),
    ("s", "assistant", "How to fix the Docker build? Use BuildKit.", {}),
    ("s", "tool", TOOL_BODY, {"tool_name": "shell"}),
    ("s", "assistant", None, {"tool_calls": '[{"name": "grep_search", "args": {"q": "docker"}}]'}),
    ("s", "user", "今天天气很好，我们去公园散步吧", {}),
    ("s", "user", "修改youer服务端配置", {}),
    ("s", "assistant", "数据库连接失败", {}),
    ("c", "user", "docker cron job ran 天气很好", {}),
    ("d", "user", "delegated docker work 服务端修改", {}),
    ("s", "user", "and or not are words here", {}),
    ("s", "user", "it's a user's \"quoted\" message", {}),
    ("s", "user", "price is 3.14 dollars, version 1.2.3", {}),
    ("s", "user", "exit codes and exit code 137 again", {}),
    ("s", "user", "a\x00json:[{\"type\": \"text\", \"text\": \"docker image\"}]", {}),
]
QUERIES = [
    "docker", "Docker build", '"docker build"', "dock*", "deploy*", "docker OR buildkit",
    "docker NOT compose", "docker AND build NOT production", "build OR docker NOT compose",
    "docker build OR exit code", "snake_case_name", "my-app.config.ts", "config", "P2.2",
    "needlelate", "grep", "grep_search", "and or", "137", "3.14", "1.2.3", '"exit code"*',
    '"exit cod"*', "天气很好", "服务端", "天气", "好", "修改youer", "youer", "it's", "user's",
    '"quoted" message', "image", "json", "nothingmatchesthis", "docker -compose", "(docker)",
    "修改YOUER", "数据库 NOT 失败", "服务端 OR 数据库",
    "build*  NOT  fail*",
]


def _fill(conn):
    for session_id, source, config in SESSIONS:
        conn.execute(S.insert().values(id=session_id, source=source, started_at=1.0,
                                       model_config=json.dumps(config) if config else None))
    for i, (session_id, role, content, extra) in enumerate(ROWS):
        conn.execute(M.insert().values(session_id=session_id, role=role, content=content,
                                       timestamp=float(i), **extra))


# --------------------------------------------------------------------------- SQLite side


def _sqlite_ids(conn, plan: fq.SearchPlan, window: int) -> set[int]:
    def match(table, expression):
        return set(conn.exec_driver_sql(
            f"SELECT rowid FROM {table} WHERE {table} MATCH ?", (expression,)).scalars())

    if plan.route == fq.ROUTE_LIKE:
        newest = conn.exec_driver_sql("SELECT max(id) FROM messages").scalar()
        any_term = sa.or_(*(sa.or_(M.c.content.contains(t, autoescape=True),
                                   M.c.tool_name.contains(t, autoescape=True),
                                   M.c.tool_calls.contains(t, autoescape=True))
                            for t in plan.like_terms))
        return set(conn.execute(sa.select(M.c.id).where(M.c.id > newest - window, any_term))
                   .scalars())
    table = fq.TRIGRAM_TABLE if plan.route == fq.ROUTE_TRIGRAM else fq.FTS_TABLE
    found = match(table, plan.match)
    if not found and plan.retry_trigram:
        found = match(fq.TRIGRAM_TABLE, plan.retry_trigram)
    return found


# --------------------------------------------------------------------------- PostgreSQL side


def _pg_ids(conn, plan: fq.SearchPlan, window: int) -> set[int]:
    # the conditions the repository's statements are built from (SEARCH, like_nocase)
    def match(index, expression):
        prepared = pq.SEARCH.prepare(index, expression)
        if prepared is None:
            return set()
        shape, values = prepared
        condition = pq.SEARCH.condition(index, M, shape)
        return set(conn.execute(sa.select(M.c.id).where(condition), values).scalars())

    if plan.route == fq.ROUTE_LIKE:
        newest = sa.select(sa.func.max(M.c.id)).scalar_subquery()
        any_term = sa.or_(*(like_nocase(column, like_containing(t), escape=LIKE_ESCAPE)
                            for t in plan.like_terms if t
                            for column in (M.c.content, M.c.tool_name, M.c.tool_calls)))
        return set(conn.execute(sa.select(M.c.id).where(M.c.id > newest - window, any_term))
                   .scalars())
    index = fq.TRIGRAM_TABLE if plan.route == fq.ROUTE_TRIGRAM else fq.FTS_TABLE
    found = match(index, plan.match)
    if not found and plan.retry_trigram:
        found = match(fq.TRIGRAM_TABLE, plan.retry_trigram)
    return found


@pytest.fixture(scope="module")
def sqlite_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("search") / "state.db"
    migrate.upgrade(path)
    engine = sqlite_engine(path)
    with engine.begin() as conn:
        _fill(conn)
    yield engine
    engine.dispose()


@pytest.fixture
def pg_store(pg_url):
    engine = postgres.create_engine(resolve(pg_url), poolclass=sa.pool.NullPool)
    with engine.begin() as conn:
        _fill(conn)
    yield engine
    engine.dispose()


def test_every_query_finds_the_same_messages_on_both_engines(sqlite_store, pg_store):
    differences = []
    found_any = 0
    with sqlite_store.connect() as lite, pg_store.connect() as pg:
        indexes = fts5.available_indexes(lite)
        assert pq.available_indexes(pg) == indexes == {fq.FTS_TABLE, fq.TRIGRAM_TABLE}
        for query in QUERIES:
            sanitized = fq.sanitize_fts5_query(query)
            plan = fq.plan_search(sanitized, indexes)
            if plan is None:
                continue
            want = _sqlite_ids(lite, plan, window=1000)
            got = _pg_ids(pg, plan, window=1000)
            found_any += bool(want)
            if want != got:
                differences.append(f"{query!r} ({plan.route}, {plan.match!r}): "
                                   f"SQLite {sorted(want)} PostgreSQL {sorted(got)}")
    assert differences == []
    assert found_any >= 30  # the corpus exercises the queries


def test_short_cjk_queries_scan_the_same_bounded_window(sqlite_store, pg_store):
    plan = fq.plan_search(fq.sanitize_fts5_query("天气"), {fq.FTS_TABLE, fq.TRIGRAM_TABLE})
    assert plan.route == fq.ROUTE_LIKE
    with sqlite_store.connect() as lite, pg_store.connect() as pg:
        for window in (1, 7, 8, 1000):
            assert _pg_ids(pg, plan, window) == _sqlite_ids(lite, plan, window)
        assert _pg_ids(pg, plan, 7) == {12}  # only the newest 7 ids are read


@pytest.mark.parametrize("query, expected", [
    ("docker", "'docker'"),
    ("Docker build", "('Docker' & 'build')"),
    ('"docker build"', "(('docker' <-> 'build'))"),
    ("dock*", "('dock':*)"),
    ('"exit code"*', "(('exit' <-> 'code':*))"),
    ("docker OR build NOT compose", "('docker') | ('build' & !'compose')"),
    ("a NOT b NOT c", "('a' & !'b' & !'c')"),
    ("snake_case_name", "(('snake' <-> 'case' <-> 'name'))"),
    ("it's", "('it' & 's')"),  # the sanitizer makes the quote a space: two terms
    ("x and or y", "('x' & 'and' & 'or' & 'y')"),  # lower-case operators are words to FTS5
])
def test_tsquery_text_follows_fts5_grammar(query, expected):
    text = pq.tsquery_text(fq.sanitize_fts5_query(query))
    assert text.replace("(", "").replace(")", "") == expected.replace("(", "").replace(")", "")


@pytest.mark.parametrize("query, expected", [
    ("docker", "'docker'"),
    ('"docker build"', "'docker' | 'build'"),  # a phrase is ranked by its words
    ("Docker build", "'Docker' | 'build'"),
    ('"exit code"*', "'exit' | 'code':*"),
    ("docker OR build NOT compose", "'docker' | 'build'"),  # a negated word is not ranked
    ("a NOT b OR c", "'a' | 'c'"),
    ("docker docker", "'docker'"),  # each word once
])
def test_a_match_is_ranked_by_the_or_of_the_querys_positive_words(query, expected):
    assert pq.rank_text(fq.sanitize_fts5_query(query)) == expected


@pytest.mark.parametrize("query, expected", [
    ('"docker build"', "('docker' & 'build')"),
    ('"exit code"*', "('exit' & 'code':*)"),
    ('"x y" NOT z OR w', "('x' & 'y' & !'z') | ('w')"),  # a negated word kept
    ('"a b" OR c NOT "d e"', "('a' & 'b') | ('c')"),  # a negated phrase left out
    ("snake_case_name", "('snake' & 'case' & 'name')"),
    ("docker", None), ("dock*", None),  # no phrase: the match itself is as cheap
    ('docker NOT "compose up"', None),
])
def test_a_phrases_candidates_hold_its_words_in_any_order(query, expected):
    assert pq.candidate_text(fq.sanitize_fts5_query(query)) == expected


def test_the_rank_keeps_the_matches_and_orders_short_messages_first(pg_store):
    """Ranked by its words' OR, normalized by length, over the query's matches only: a
    message that holds the phrase in few words comes first, and one that holds the
    words but not the phrase is not found."""
    rows = ["docker build " + "filler " * 40, "the docker build failed", "build a docker image"]
    with pg_store.connect() as pg:
        pg.execute(sa.text("CREATE TEMP TABLE t (id int, doc tsvector)"))
        for i, text in enumerate(rows):
            pg.execute(sa.text("INSERT INTO t VALUES (:i, to_tsvector('simple', :text))"),
                       {"i": i, "text": text})
        sanitized = fq.sanitize_fts5_query('"docker build"')
        found = pg.execute(sa.text(
            "SELECT id FROM t WHERE doc @@ to_tsquery('simple', :match) ORDER BY "
            "ts_rank(doc, to_tsquery('simple', :rank), :norm) DESC, id"),
            {"match": pq.tsquery_text(sanitized), "rank": pq.rank_text(sanitized),
             "norm": pq.RANK_NORMALIZATION}).scalars().all()
        pg.rollback()
    assert found == [1, 0]


def test_a_first_page_is_the_page_ranking_every_match_gives(pg_url):
    """The first page ranks only the matches that can reach it (``best_page``): it is
    the page ranking all of them gives (``limit=-1``, ranked whole), for words said in
    many short and long messages or in long ones only, prefixes, ORs, phrases (some of
    whose rows hold the words in another order) and source filters; and
    over text of words of a few bytes it is the page ``ts_rank`` alone gives (the bound
    of a long message never binds)."""
    from hermes_store import SessionDB

    filler = "log line of a long tool output\n" * 120  # stored out of line, compressed
    # (phrase's words, a third word, the first long row holding the phrase) by session
    phrases = {2: [("lily", "rose", "tulip", 0)], 3: [("iris", "fern", "moss", 60)]}
    with SessionDB(pg_url) as db:
        for i, source in enumerate(("cli", "telegram", "discord", "cron")):
            db.create_session(f"p{i}", source)
            db.append_messages(f"p{i}", [
                {"role": "tool", "content": f"docker kubectl {filler * (1 + n % 3)} "
                 + "kubectl " * (n % 5) + "docker compose up",
                 "tool_name": "terminal", "tool_call_id": f"c{i}{n}"} for n in range(60)] + [
                {"role": "user", "content": f"docker {'compose ' if n % 3 else ''}ps {n}"}
                for n in range(40)] + [
                # short candidates of the phrases that are no match: never on the page
                {"role": "user", "content": "compose docker"} for n in range(5)] + [
                {"role": "assistant", "content": "kubectl " * (1 + n % 6)
                 + "words " * (300 + 97 * (n % 11))} for n in range(40)] + [
                {"role": "user", "content": "proxy kube"} for n in range(5)] + [
                # zebra: the first pages (at the bound) hold long messages said to beat
                # the medium ones, which rank above them once the long ones are ranked
                {"role": "user", "content": "zebra zebra here"} for n in range(19 * (i == 0))] + [
                {"role": "assistant", "content": "zebra " + "plain words " * (180 + n)}
                for n in range(61 * (i == 0))] + [
                {"role": "user", "content": "a zebra among " + "some words " * 12}
                for n in range(3 * (i == 0))] + [
                # few candidates of a phrase, short and long, some no match
                {"role": "user", "content": f"ant bee {n}"} for n in range(3 * (i == 1))] + [
                {"role": "user", "content": f"bee ant {n}"} for n in range(3 * (i == 1))] + [
                {"role": "tool", "content": f"ant {'bee' if n else 'wasp'} {filler} bee",
                 "tool_name": "terminal", "tool_call_id": f"ab{n}"}
                for n in range(3 * (i == 1))] + [
                {"role": "assistant", "content": ("why does " * (n % 7)) + "kube-proxy "
                 + ("fail " if n % 2 else "docker ") + "nginx" * (n % 4 == 0)}
                for n in range(50)] + [
                # a phrase's long candidates, most no match, at bounds above the short
                # matches' ranks (its words said often): they fill the first pages (``hit``),
                # matches among them ("lily rose") or only the longest ones ("iris fern")
                {"role": "tool", "content": f"{a} {b} " * (n % 5 == 0 and n >= late)
                 + f"{b} {a} {c} " * 40 + "tool output line " * (130 + 7 * n),
                 "tool_name": "terminal", "tool_call_id": f"{a}{n}"}
                for a, b, c, late in phrases.get(i, ()) for n in range(70)] + [
                {"role": "user", "content": f"{a} {b} " + "and a few more words " * (20 + n)}
                for a, b, _, _ in phrases.get(i, ()) for n in range(25)])
        searches = [("docker", {}), ("kube*", {}), ("docker OR nginx", {}),
                    ('"docker compose"', {}), ("kube-proxy NOT fail", {}),
                    ('docker NOT "compose up"', {}), ("compose", {"limit": 7}),
                    ("docker", {"source_filter": ["telegram", "discord"],
                                "role_filter": ["user", "tool"]}),
                    ("proxy OR compose", {"exclude_sources": ["cron"], "limit": 50}),
                    # found in long messages only, or mostly: ranked again past the page
                    ("kubectl", {}), ('"compose up"', {}), ("line OR kube", {"limit": 30}),
                    ("zebra", {}), ('"kube proxy"', {}), ('"ant bee"', {"limit": 3}),
                    ('"lily rose"', {}), ('"lily rose"', {"limit": 5}),
                    ('"lily rose" OR zebra', {}),
                    ('"lily rose"', {"role_filter": ["tool"], "limit": 5}), ('"iris fern"', {})]
        for query, options in searches:
            page = [hit["id"] for hit in db.search_messages(query, **options)]
            every = [hit["id"] for hit in db.search_messages(query, **{**options, "limit": -1})]
            assert len(every) > len(page) > 0, query
            assert page == every[:options.get("limit", 20)], (query, options)
        # all of a phrase's matches on one page: the rows holding its words otherwise left out
        page = [hit["id"] for hit in db.search_messages('"ant bee"', limit=10)]
        assert page == [hit["id"] for hit in db.search_messages('"ant bee"', limit=-1)]
        assert len(page) == 5
        with db.engine.connect() as conn:
            for query in ("docker", "kube*", "kubectl", "docker OR nginx", '"compose up"'):
                sanitized = fq.sanitize_fts5_query(query)
                by_ts_rank = conn.execute(
                    sa.select(M.c.id).where(pq.matches(M, pq.tsquery(pq.tsquery_text(sanitized))))
                    .order_by(sa.func.ts_rank(pq.document(M), pq.tsquery(pq.rank_text(sanitized)),
                                              pq.RANK_NORMALIZATION).desc(), M.c.id).limit(20)
                ).scalars().all()
                assert [hit["id"] for hit in db.search_messages(query)] == by_ts_rank, query


def _substring_way(db, query: str, **options) -> int:
    """Which way the trigram route's first page was read (``pq._WHOLE``, ``_NARROW``,
    ``_EVERY``): the branch of the page's ``UNION ALL`` whose plan ran."""
    statements = []

    def record(conn, cursor, statement, parameters, context, executemany):
        if "t1" in statement:
            statements.append((statement, parameters))

    sa.event.listen(db.engine, "before_cursor_execute", record)
    try:
        db.search_messages(query, **options)
    finally:
        sa.event.remove(db.engine, "before_cursor_execute", record)
    (statement, parameters), = statements
    with db.engine.connect() as conn:
        cursor = conn.connection.dbapi_connection.cursor()
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + statement, parameters)
        plan = cursor.fetchone()[0]
        conn.rollback()

    def appends(node):
        if node["Node Type"] == "Append":
            yield node
        for child in node.get("Plans", ()):
            yield from appends(child)

    (union,) = appends(plan[0]["Plan"])
    ran = [i for i, branch in enumerate(union["Plans"])
           if any(inner["Actual Loops"] for inner in branch["Plans"]
                  if inner.get("Parent Relationship") == "Outer")]
    (way,) = ran
    return way


def test_a_substring_first_page_is_the_smallest_ids_of_every_match(pg_url):
    """The trigram route's first page (``_substring_page``) reads the first matches as
    stored, then the key's range up to the largest of their ids, or every match: each
    way, it is the page sorting every match gives — also where rows with small ids were
    moved to the end of the table (written again), so that the order they are stored in
    is not id order."""
    from hermes_store import SessionDB

    with SessionDB(pg_url) as db:
        with db.engine.begin() as conn:  # no vacuum makes room in the first pages for the
            # rows written again below
            conn.execute(sa.text("ALTER TABLE messages SET (autovacuum_enabled = off)"))
        db.create_session("a", "cli")
        db.append_messages("a", [
            {"role": "user" if n % 2 else "assistant",
             "content": f"note {n} " + "数据库 " * (n % 3 == 0) + "记忆断裂 " * (n % 60 == 7)
             + "甲乙丙丁 " * (n % 150 == 11) + "迁移中 " * (n % 9 == 0) + "服务器" * (n % 8 == 5)}
            for n in range(1200)])
        with db.engine.begin() as conn:
            first_ids = conn.execute(sa.text(
                "(SELECT id FROM messages WHERE content LIKE '%数据库%' ORDER BY id LIMIT 5) "
                "UNION ALL (SELECT id FROM messages WHERE content LIKE '%记忆断裂%' "
                "ORDER BY id LIMIT 3)")).scalars().all()
            # a row written again is stored past the others (an update could stay on its
            # page): the first matches as stored are not the first by id
            columns = ", ".join(c.name for c in M.c)
            conn.execute(sa.text(f"CREATE TEMP TABLE moved AS SELECT {columns} FROM messages "
                                 "WHERE id = ANY(:ids)"), {"ids": first_ids})
            conn.execute(sa.text("DELETE FROM messages WHERE id = ANY(:ids)"), {"ids": first_ids})
            conn.execute(sa.text(f"INSERT INTO messages ({columns}) SELECT {columns} FROM moved"))
            as_stored = conn.execute(sa.text(
                "SELECT id FROM messages WHERE content LIKE '%数据库%' ORDER BY ctid LIMIT 20"
            )).scalars().all()
            assert not set(first_ids) & set(as_stored) and len(as_stored) == 20
        searches = [("甲乙丙丁", {}, pq._WHOLE),
                    ("数据库", {}, pq._NARROW), ("数据库", {"limit": 7}, pq._NARROW),
                    # stored in id order: the first matches read are the page's, x its last id
                    ("服务器", {}, pq._NARROW),
                    ("数据库 NOT 迁移中", {}, pq._NARROW),
                    ("数据库", {"role_filter": ["user"]}, pq._NARROW),
                    ("记忆断裂", {}, pq._EVERY), ("记忆断裂 OR 甲乙丙丁", {"limit": 25}, pq._EVERY)]
        for query, options, way in searches:
            page = [hit["id"] for hit in db.search_messages(query, **options)]
            every = [hit["id"] for hit in db.search_messages(query, **{**options, "limit": -1})]
            assert every == sorted(every) and page == every[:options.get("limit", 20)], query
            assert bool(set(first_ids) & set(every[:5])) == (query not in ("甲乙丙丁", "服务器"))
            assert _substring_way(db, query, **options) == way, (query, options)


@pytest.mark.parametrize("query, operator", [
    ("数据库", "LIKE"), ("天气很好", "LIKE"), ("服务端Config", "ILIKE"), ("ÉTÉ服务端", "ILIKE")])
def test_a_substring_without_cased_letters_is_compared_as_bytes(query, operator):
    """ILIKE folds every candidate's text before comparing; a term that no case folding
    changes (CJK) is found alike by LIKE, which compares bytes."""
    plan = fq.plan_search(fq.sanitize_fts5_query(query), {fq.FTS_TABLE, fq.TRIGRAM_TABLE})
    assert plan.route == fq.ROUTE_TRIGRAM
    shape, _ = pq.SEARCH.prepare(fq.TRIGRAM_TABLE, plan.match)
    sql = str(pq.SEARCH.condition(fq.TRIGRAM_TABLE, M, shape)
              .compile(dialect=sa.dialects.postgresql.dialect()))
    assert f" {operator} " in sql and (operator == "ILIKE" or " ILIKE " not in sql)


def test_nothing_searchable_gives_no_tsquery():
    assert pq.tsquery_text("") is None
    assert pq.tsquery_text('"--"') is None


def test_every_word_snippet_is_the_one_fts5_writes(sqlite_store, pg_store):
    """PostgreSQL's word-route snippets (``word_snippet``, cut in Python from the row as
    it comes back from the server) are SQLite's ``snippet()``, row for row."""
    compared = []
    with sqlite_store.connect() as lite, pg_store.connect() as pg:
        for query in QUERIES:
            plan = fq.plan_search(fq.sanitize_fts5_query(query), {fq.FTS_TABLE, fq.TRIGRAM_TABLE})
            if plan is None or plan.route != fq.ROUTE_FTS:
                continue
            want = dict(lite.exec_driver_sql(
                "SELECT rowid, snippet(messages_fts, -1, '>>>', '<<<', '...', 40) "
                "FROM messages_fts WHERE messages_fts MATCH ?", (plan.match,)).all())
            rows = pg.execute(sa.select(M.c.id, M.c.role, M.c.content, M.c.tool_name,
                                        M.c.tool_calls).where(M.c.id.in_(list(want)))
                              ).mappings().all()
            assert {row["id"] for row in rows} == set(want), query
            for row in rows:
                got = pq.word_snippet(plan.match, dict(row))
                assert got == want[row["id"]], (query, row["id"])
                compared.append(got)
    assert len(compared) >= 30 and sum(">>>" in s for s in compared) >= 30


def test_a_snippet_is_cut_from_the_stored_text_read_back_unescaped(pg_store):
    with pg_store.connect() as conn:
        row = conn.execute(sa.select(M.c.role, M.c.content, M.c.tool_name, M.c.tool_calls)
                           .where(M.c.content.contains("image"))).mappings().one()
    assert row["content"].startswith("a\x00json:")  # the NUL codec undone
    # as FTS5 writes it: the piece holding the NUL is cut there
    assert pq.word_snippet("image", dict(row)) == 'a>>>image<<<"}]'
    assert pq.word_snippet("text", dict(row)) == 'a>>>text<<<", ">>>text<<<": "docker image"}]'


def _timeless(hit: dict) -> dict:
    """A hit without its clock readings (each store stamped its own rows)."""
    return {k: v for k, v in hit.items() if k not in ("timestamp", "session_started")}


def test_search_answers_the_same_on_both_engines(tmp_path, pg_url):
    """Through SessionDB: every hit of every query, snippet and context included, is the
    same on both engines (order aside: the ranks differ)."""
    from hermes_store import SessionDB

    answers = []
    for where in (tmp_path / "state.db", pg_url):
        with SessionDB(where) as db:
            for session_id, source, config in SESSIONS:
                db.create_session(session_id, source, model_config=config)
            for session_id, role, content, extra in ROWS:
                db.append_message(session_id, role=role, content=content, **extra)
            answers.append({query: {hit["id"]: _timeless(hit) for hit in
                                    db.search_messages(query, limit=-1)} for query in QUERIES})
    lite, pg = answers
    assert sum(len(hits) for hits in lite.values()) >= 60
    for query in QUERIES:
        assert pg[query] == lite[query], query
