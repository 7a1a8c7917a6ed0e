"""The one-step creation wired into SessionDB's open and migrate.upgrade (pre-issue-18
layout; measured as a variant)."""
import sys
root = sys.argv[1]
def edit(path, pairs):
    p = f"{root}/{path}"
    s = open(p).read()
    for old, new in pairs:
        assert old in s, (path, old[:80])
        s = s.replace(old, new, 1)
    open(p, "w").write(s)

# the lock moves to the Alembic-free module; migrate keeps the name
LOCK = '''

@contextlib.contextmanager
def migration_lock(path: str | os.PathLike) -> Iterator[None]:
    """Serialize schema changes of one file across processes (migrations, the one-step
    creation, schema repair).

    Alembic decides which steps to run from the version it read before the first
    step's transaction, so two processes upgrading at once would both try to apply
    the same step. An advisory lock on ``<db>.migrate.lock`` makes the second wait,
    then find the work done. (The database file itself cannot be flock()ed safely:
    closing any descriptor of it drops SQLite's own POSIX locks.)
    """
    try:
        import fcntl
    except ImportError:  # Windows: SQLite's BEGIN IMMEDIATE is the only guard
        yield
        return
    lock_path = Path(f"{path}.migrate.lock")
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:  # read-only directory: nothing will be written anyway
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
'''
edit("hermes_store/revisions.py", [
    ("import functools\n", "import contextlib\nimport functools\n"),
    ("from pathlib import Path\n", "from pathlib import Path\nfrom typing import Iterator\n"),
    ("    newest = head()\n    return stamps == [(newest,)] and versions == [(int(newest),)]\n",
     "    newest = head()\n    return stamps == [(newest,)] and versions == [(int(newest),)]\n" + LOCK),
])
p = f"{root}/hermes_store/migrate.py"
s = open(p).read()
i = s.index("@contextlib.contextmanager\ndef migration_lock(path: Path)")
j = s.index("# --------------------------------------------------------------------------- adoption")
s = s[:i] + s[j:]
s = s.replace("from .revisions import migrations_dir\n", "from .revisions import migration_lock, migrations_dir\n")
s = s.replace('''    p = target.path
    state = inspect_file(p)
    if state.kind == "alembic" and _is_at(state.revision, revision):
        return state.revision
    with sqlite_errors(p):
        command.upgrade(config(p, progress=progress), revision)
    return inspect_file(p).revision
''', '''    p = target.path
    state = inspect_file(p)
    if state.kind == "alembic" and _is_at(state.revision, revision):
        return state.revision
    if state.kind in ("missing", "empty") and state.writable and _is_at(head(), revision):
        # a new file: the head schema in one step (D18), not thirty revisions
        from . import head_create

        if state.kind == "missing":
            head_create.create_private_file(p)
        with sqlite_errors(p):
            if head_create.create_file(p):
                if progress is not None:
                    progress(head(), head_create.PROGRESS)
                return head()
    with sqlite_errors(p):
        command.upgrade(config(p, progress=progress), revision)
    return inspect_file(p).revision
''')
open(p, "w").write(s)

edit("hermes_store/head_create.py", [
    ("import sqlite3\n", "import os\nimport sqlite3\nfrom pathlib import Path\n"),
    ("from . import head_schema\n", '''from . import head_schema
from .revisions import migration_lock

#: what ``migrate.upgrade``'s ``progress`` hears for the one step
PROGRESS = "head schema created in one step"


def create_private_file(path: Path) -> bool:
    """Create an empty database file readable by its owner only (with its folder,
    0700); False when it exists already (another process made it meanwhile)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def create_file(path: Path, conn: sqlite3.Connection | None = None, *,
                busy_timeout: float = 1.0) -> bool:
    """Give the empty file at ``path`` the head schema in one step, under the migration
    lock; False (nothing written) when it has any object already. ``conn``: a
    connection to it to use (the store's engine's, so the file is not opened twice),
    else one of its own, in WAL mode as the engine would set it."""
    with migration_lock(path):
        if conn is not None:
            return create(conn)
        from .engine import apply_journal_mode

        own = sqlite3.connect(path, isolation_level=None, timeout=busy_timeout)
        try:
            own.execute("PRAGMA synchronous=FULL")
            apply_journal_mode(own)
            return create(own)
        finally:
            own.close()
'''),
])

edit("hermes_store/store.py", [
    ("from . import revisions, schema\n", "from . import head_create, revisions, schema\n"),
    ('''            _create_private_file(path)
        elif not self.read_only:
            _make_private(path)
        probe_or_heal(path, read_only=self.read_only)  # heals only duplicated FTS schema rows
        ensure_schema(path, auto_upgrade=auto_upgrade, read_only=self.read_only)
        engine = create_engine(path, read_only=self.read_only, busy_timeout=retry.busy_timeout)
''', '''            _create_private_file(path)
        elif not self.read_only:
            _make_private(path)
        probe_or_heal(path, read_only=self.read_only)  # heals only duplicated FTS schema rows
        engine = None
        if not self.read_only and auto_upgrade and path.stat().st_size == 0:
            # a new file: the head schema in one step, on the store's own connection (D18)
            engine = create_engine(path, busy_timeout=retry.busy_timeout)
            with engine.connect() as conn:
                created = head_create.create_file(path, conn.connection.dbapi_connection)
            if not created:  # someone else's objects meanwhile: the usual path
                engine.dispose()
                engine = None
        if engine is None:
            ensure_schema(path, auto_upgrade=auto_upgrade, read_only=self.read_only)
            engine = create_engine(path, read_only=self.read_only,
                                   busy_timeout=retry.busy_timeout)
'''),
])
print("ok")
