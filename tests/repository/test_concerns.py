"""``SessionDB`` gets its concerns on first use (``hermes_store.repository.concerns``):
a process that only reads a session never imports the other fourteen modules, and
every way of reaching a method — instance, class, ``dir``, ``inspect``, a subclass,
several threads at once — finds the class whole, guarded, in its usual MRO.

Laziness is a property of a fresh process, so most checks run in a child."""

from __future__ import annotations

import inspect
import json
import pkgutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import hermes_store.repository
from hermes_store import SessionDB, StoreClosedError
from hermes_store.repository.concerns import CONCERNS, EAGER, load

REPO = Path(__file__).resolve().parents[2]
LATER_MODULES = sorted(f"hermes_store.repository.{module}" for module, _ in CONCERNS[EAGER:])


#: what every child starts with: which later concern modules it has imported so far
PRELUDE = f"""
import sys
def later_loaded():
    return sorted(m for m in sys.modules if m in {set(LATER_MODULES)!r})
"""


def _child(code: str, *args) -> dict:
    """Run ``code`` in a fresh interpreter; its last line of output, as JSON."""
    run = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(code),
                          *map(str, args)],
                         capture_output=True, text=True, cwd=REPO, timeout=120)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.fixture
def store_file(tmp_path):
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.create_session("s1", "cli", model="m")
        db.append_message("s1", role="user", content="the docker build fails")
    return path


def test_reading_a_session_imports_no_later_concern(store_file):
    found = _child("""
        import json, sys
        from hermes_store import SessionDB
        db = SessionDB(sys.argv[1])
        row = db.get_session("s1")
        before = later_loaded()
        hits = db.search_messages("docker")       # a later concern: the class assembles
        db.close()
        print(json.dumps({"row": row["id"], "before": before, "after": later_loaded(),
                          "hits": len(hits)}))
    """, store_file)
    assert found["row"] == "s1"
    assert found["before"] == []
    assert found["after"] == LATER_MODULES
    assert found["hits"] == 1


def test_the_assembled_class_resolves_every_name_as_a_class_built_whole():
    whole = type("Whole", load(CONCERNS), {})
    SessionDB.assemble()
    assert SessionDB.__mro__[1:1 + len(CONCERNS)] == load(CONCERNS)
    names = {name for klass in whole.__mro__[:-1] for name in vars(klass)
             if not (name.startswith("__") and name.endswith("__"))}
    for name in sorted(names):
        ours = inspect.getattr_static(SessionDB, name)
        expected = inspect.getattr_static(whole, name)
        # public methods carry the API guard (store._guarded) around the same function
        assert getattr(ours, "_api_guard_of", ours) is expected, name


def test_every_concern_mixin_of_the_package_is_listed():
    listed = {(module, name) for module, name in CONCERNS}
    found = set()
    for info in pkgutil.iter_modules(hermes_store.repository.__path__):
        module = __import__(f"hermes_store.repository.{info.name}", fromlist=["_"])
        for name, value in vars(module).items():
            if (name.endswith("Mixin") and inspect.isclass(value)
                    and value.__module__ == module.__name__):
                found.add((info.name, name))
    assert found == listed


def test_class_level_lookups_dir_and_signatures_see_every_method_before_any_use():
    found = _child("""
        import inspect, json
        from hermes_store import SessionDB
        before = later_loaded()
        looked = {
            "hasattr": hasattr(SessionDB, "search_messages"),
            "signature": str(inspect.signature(SessionDB.get_messages_as_conversation)),
        }
        print(json.dumps({"looked": looked, "before": before, "after": later_loaded(),
                          "dir": dir(SessionDB)}))
    """)
    assert found["looked"]["hasattr"] is True
    assert found["looked"]["signature"].startswith("(self, session_id")
    assert (found["before"], found["after"]) == ([], LATER_MODULES)
    public = {name for klass in load(CONCERNS) for name in vars(klass) if not name.startswith("_")}
    assert public <= set(found["dir"])


def test_dunder_probes_and_a_store_dir_behave(store_file):
    found = _child("""
        import copy, json, sys
        from hermes_store import SessionDB
        probes = [getattr(SessionDB, n, None) is None
                  for n in ("__deepcopy__", "__getstate_probe__", "__wrapped__")]
        untouched = later_loaded()
        db = SessionDB(sys.argv[1])
        listed = dir(db)                          # an instance's dir assembles too
        db.close()
        print(json.dumps({"probes": probes, "untouched": untouched,
                          "listed": "search_messages" in listed, "after": later_loaded()}))
    """, store_file)
    assert found["probes"] == [True, True, True]
    assert found["untouched"] == []
    assert found["listed"] is True
    assert found["after"] == LATER_MODULES


def test_a_subclass_gets_the_whole_class_and_super_reaches_later_concerns(store_file):
    found = _child("""
        import json, sys
        from hermes_store import SessionDB

        class Traced(SessionDB):
            def search_messages(self, query, **kwargs):
                return ["traced"] + super().search_messages(query, **kwargs)

        with Traced(sys.argv[1]) as db:
            hits = db.search_messages("docker")
        print(json.dumps({"first": hits[0], "found": hits[1]["session_id"]}))
    """, store_file)
    assert found == {"first": "traced", "found": "s1"}


def test_threads_that_first_use_later_concerns_at_once_assemble_once(store_file):
    found = _child("""
        import json, sys, threading
        import hermes_store.repository.concerns as concerns
        from hermes_store import SessionDB
        loads = []
        real_load = concerns.load
        def counted(which):
            loads.append(len(which))
            return real_load(which)
        concerns.load = counted
        db = SessionDB(sys.argv[1])
        start = threading.Barrier(6)
        calls = [lambda: db.search_messages("docker"), lambda: db.get_messages("s1"),
                 lambda: db.get_session_title("s1"), lambda: db.message_count("s1"),
                 lambda: db.get_messages_as_conversation("s1"),
                 lambda: db.list_sessions_rich(limit=5)]
        results, errors = [None] * 6, []
        def run(i):
            start.wait()
            try:
                results[i] = calls[i]()
            except Exception as exc:
                errors.append(repr(exc))
        threads = [threading.Thread(target=run, args=(i,)) for i in range(6)]
        for t in threads: t.start()
        for t in threads: t.join()
        db.close()
        bases = [b.__name__ for b in SessionDB.__bases__]
        print(json.dumps({"loads": loads, "errors": errors, "bases": bases,
                          "hits": len(results[0]), "messages": len(results[1]),
                          "count": results[3]}))
    """, store_file)
    assert found["errors"] == []
    assert found["loads"] == [len(CONCERNS) - EAGER]
    assert found["bases"] == [name for _, name in CONCERNS] + ["Assembled"]
    assert (found["hits"], found["messages"], found["count"]) == (1, 1, 1)


def test_later_methods_carry_the_api_guard(store_file):
    db = SessionDB(store_file)
    db.close()
    with pytest.raises(StoreClosedError):
        db.search_messages("docker")
    with pytest.raises(StoreClosedError):
        db.set_session_title("s1", "never")


def test_a_missing_attribute_is_still_an_attribute_error(store_file):
    with SessionDB(store_file) as db:
        with pytest.raises(AttributeError, match="no attribute 'search_mesages'"):
            db.search_mesages("docker")
        assert getattr(db, "not_a_method", "absent") == "absent"
    with pytest.raises(AttributeError, match="no attribute 'not_a_method'"):
        SessionDB.not_a_method
