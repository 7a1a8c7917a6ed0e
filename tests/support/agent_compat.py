"""Shared pieces of the ``test_compat_*`` tests: agent 0.19.0's own source (statements
and functions read out of the unpacked wheel, never copied), one data set written the
same way into upstream's store and ours, and the side-by-side comparison.

The wheel is the one ``tests/support/upstream_state.py`` finds or fetches; upstream's
``hermes_state`` is imported from it for the side-by-side runs.
"""

from __future__ import annotations

import ast
import textwrap
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import sqlalchemy as sa

from support.upstream_state import load_hermes_state, require_upstream_dir

#: the agent's files that send raw SQL through SessionDB._conn / _execute_write (survey)
RAW_SQL_FILES = (
    "agent/insights.py",
    "hermes_cli/web_server.py",
    "hermes_cli/main.py",
    "hermes_cli/cli_agent_setup_mixin.py",
    "tools/session_search_tool.py",
    "gateway/platforms/api_server.py",
)
#: the functions where a plain ``conn`` is the store's raw connection
_CONN_FUNCTIONS = {
    ("hermes_cli/web_server.py", "_session_latest_descendant"),
    ("tools/session_search_tool.py", "_scroll"),
    ("gateway/platforms/api_server.py", "_atomic"),
}


def agent_root() -> Path:
    return require_upstream_dir()


def agent_source(rel: str) -> str:
    return (agent_root() / rel).read_text(encoding="utf-8")


@dataclass(frozen=True)
class Found:
    file: str
    function: str
    line: int
    sql: str

    @property
    def key(self) -> str:
        return f"{self.file}:{self.function}:{' '.join(self.sql.split())[:60]}"


def _class_constants(tree: ast.Module) -> dict[str, str]:
    """String constants assigned in class bodies (insights' prebuilt query texts)."""
    values: dict[str, str] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        namespace: dict = {}
        for stmt in node.body:
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 \
                    and isinstance(stmt.targets[0], ast.Name):
                try:
                    exec(compile(ast.Module([stmt], []), "<class body>", "exec"), {}, namespace)
                except Exception:
                    continue
        values.update({k: v for k, v in namespace.items() if isinstance(v, str)})
    return values


def _receiver_is_raw(call: ast.Call, file: str, function: str) -> bool:
    receiver = ast.unparse(call.func.value)
    if receiver == "self._conn":  # the store's only in insights (self._conn = db._conn)
        return file == "agent/insights.py"
    if receiver.endswith("._conn"):  # db._conn, self._session_db._conn, SessionDB()._conn
        return True
    return receiver == "conn" and (file, function) in _CONN_FUNCTIONS


def raw_statements() -> list[Found]:
    """Every statement agent 0.19.0 sends through the store's raw connection, read out
    of its source: ``….execute(<text>, …)`` on ``X._conn`` (or ``conn`` where that is
    the store's), the text a literal or one of the class's query constants."""
    found: list[Found] = []
    for rel in RAW_SQL_FILES:
        tree = ast.parse(agent_source(rel))
        constants = _class_constants(tree)

        def visit(node, function):
            for child in ast.iter_child_nodes(node):
                name = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else function
                if isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute) \
                        and child.func.attr in ("execute", "executemany") and child.args \
                        and _receiver_is_raw(child, rel, function):
                    first = child.args[0]
                    if isinstance(first, ast.Constant) and isinstance(first.value, str):
                        sql = first.value
                    elif isinstance(first, ast.Attribute) and first.attr in constants:
                        sql = constants[first.attr]
                    else:
                        raise AssertionError(f"{rel}:{child.lineno}: a statement the survey "
                                             f"cannot read: {ast.unparse(first)}")
                    found.append(Found(rel, function, child.lineno, sql))
                visit(child, name)

        visit(tree, "<module>")
    return found


def agent_function(rel: str, name: str, namespace: dict):
    """The agent's own function ``name`` (nested anywhere in ``rel``), defined in
    ``namespace`` (its free names); returns it."""
    source = agent_source(rel)
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
            text = textwrap.dedent(ast.get_source_segment(source, node, padded=True))
            exec(compile(text, f"{rel}:{name}", "exec"), namespace)
            return namespace[name]
    raise AssertionError(f"{name} not found in {rel}")


# --------------------------------------------------------------------------- the data set

DAY = 86400.0
#: fixed start times, so that results do not depend on when the test runs
T0 = 1_764_000_000.0  # 2025-11-24
STARTS = {"s-cli": T0, "s-tg": T0 + DAY, "s-root": T0 + 2 * DAY, "s-child": T0 + 2 * DAY + 600,
          "s-cron": T0 + 3 * DAY, "s-api": T0 + 3 * DAY + 60}
CUTOFFS = (0.0, T0 + DAY / 2, T0 + 10 * DAY)


def _call(name: str, arguments: dict, call_id: str) -> dict:
    import json

    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)}}


def populate(db) -> None:
    """The same calls on upstream's SessionDB and ours: sessions of three sources, tool
    calls (by name and in assistant JSON), skill loads, a compression chain, titles,
    aux usage, CJK text; distinct token totals so that every ORDER BY is total."""
    db.create_session("s-cli", "cli", model="anthropic/claude-x", system_prompt="You are Hermes.",
                      cwd="/work/app")
    db.append_message("s-cli", "user", "Fix the Docker build")
    db.append_message("s-cli", "assistant", None,
                      tool_calls=[_call("terminal", {"command": "docker build ."}, "c1")])
    db.append_message("s-cli", "tool", "built", tool_call_id="c1")
    db.append_message("s-cli", "assistant", None,
                      tool_calls=[_call("skill_view", {"name": "docker"}, "c2"),
                                  _call("read_file", {"path": "Dockerfile"}, "c3")])
    db.append_message("s-cli", "assistant", "修好了 — the build passes")
    db.update_token_counts("s-cli", input_tokens=1200, output_tokens=300,
                           model="anthropic/claude-x", billing_provider="openrouter",
                           estimated_cost_usd=0.012, api_call_count=3)
    db.record_auxiliary_usage("s-cli", "vision", model="google/gemini-y",
                              billing_provider="openrouter", input_tokens=50, output_tokens=5,
                              estimated_cost_usd=0.001)
    db.end_session("s-cli", "user_exit")

    db.create_session("s-tg", "telegram", model="openai/gpt-x", user_id="42",
                      system_prompt="You are Hermes on Telegram.")
    db.append_message("s-tg", "user", "日本語で要約して")
    db.append_message("s-tg", "assistant", None,
                      tool_calls=[_call("skill_manage", {"name": "summaries", "action": "edit"}, "t1")])
    db.append_message("s-tg", "tool", "saved", tool_name="skill_manage", tool_call_id="t1")
    db.append_message("s-tg", "tool", "done", tool_name="terminal", tool_call_id="t2")
    db.append_message("s-tg", "tool", "done again", tool_name="terminal", tool_call_id="t3")
    db.update_token_counts("s-tg", input_tokens=800, output_tokens=150, model="openai/gpt-x",
                           billing_provider="openai", estimated_cost_usd=0.004,
                           actual_cost_usd=0.005, api_call_count=2)

    db.create_session("s-root", "cli", model="anthropic/claude-x")
    db.append_message("s-root", "user", "plan the release")
    db.append_message("s-root", "assistant", "step 1")
    db.update_token_counts("s-root", input_tokens=90, output_tokens=10, model="anthropic/claude-x",
                           api_call_count=1)
    db.end_session("s-root", "compression")
    db.create_session("s-child", "cli", model="anthropic/claude-x", parent_session_id="s-root")
    db.append_message("s-child", "user", "go on")
    db.append_message("s-child", "assistant", "step 2")
    db.set_session_title("s-root", "Release plan")

    db.create_session("s-cron", "cron")
    db.append_message("s-cron", "user", "nightly summary")


def pin_times(run) -> None:
    """Give every time column a fixed value: ``run(sql, params)`` runs a statement on
    the store (upstream's ``_conn`` or our engine), ``?`` placeholders."""
    for sid, started in STARTS.items():
        run("UPDATE sessions SET started_at = ? WHERE id = ?", (started, sid))
        run("UPDATE sessions SET ended_at = ? WHERE id = ? AND ended_at IS NOT NULL",
            (started + 3600, sid))
        run("UPDATE session_model_usage SET first_seen = ?, last_seen = ? WHERE session_id = ?",
            (started + 10, started + 20, sid))
    run("UPDATE messages SET timestamp = (SELECT started_at FROM sessions s "
        "WHERE s.id = messages.session_id) + id", ())


def pin_ours(db) -> None:
    """``pin_times`` on our store through its engine (not through the code under test)."""
    def run(sql, params):
        names = iter(range(len(params)))
        text = "".join(f":p{next(names)}" if ch == "?" else ch for ch in sql)
        with db.engine.begin() as conn:
            conn.execute(sa.text(text), {f"p{i}": v for i, v in enumerate(params)})

    pin_times(run)


def upstream_store(path: Path):
    """Upstream's SessionDB on a fresh file, populated and pinned."""
    hs = load_hermes_state()
    db = hs.SessionDB(db_path=path)
    populate(db)

    def run(sql, params):
        db._conn.execute(sql, params)
        db._conn.commit()

    pin_times(run)
    return db


def our_store(target):
    from hermes_store.agent import hermes_state as ours

    db = ours.SessionDB(target)
    populate(db)
    pin_ours(db)
    return db


# --------------------------------------------------------------------------- comparing

def plain(value):
    """A result as plain data: rows as dicts, ``Row``/``sqlite3.Row`` alike."""
    if hasattr(value, "keys") and not isinstance(value, dict):
        return {k: plain(value[k]) for k in value.keys()}
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(plain(v) for v in value)
    return value


def assert_same(ours, theirs, where: str = "") -> None:
    """Equal, and of the same types: an ``int`` where upstream has an ``int`` (never a
    ``Decimal`` or ``bool``). One difference is allowed, and only for PostgreSQL's
    ``coalesce(sum(real), 0)`` over no rows: ``0.0`` where SQLite gives ``0``."""
    ours, theirs = plain(ours), plain(theirs)
    assert ours == theirs, where
    _same_types(ours, theirs, where)


def _same_types(a, b, where):
    if isinstance(b, dict):
        for k in b:
            _same_types(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(b, (list, tuple)):
        for i, (x, y) in enumerate(zip(a, b)):
            _same_types(x, y, f"{where}[{i}]")
    else:
        assert not isinstance(a, (Decimal, bool)) or type(a) is type(b), where
        if type(a) is not type(b):
            assert a == b == 0 and {type(a), type(b)} == {int, float}, \
                f"{where}: {a!r} ({type(a).__name__}) vs {b!r} ({type(b).__name__})"
