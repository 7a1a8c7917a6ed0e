"""Scratch (issue 19): where a cold start goes, as differences of whole-process wall times
(children in turn, medians over runs): exit-time collection, imports above SQLAlchemy,
open + first read.  python startup_phases.py STORE SESSION_ID [RUNS]"""
import os, statistics, subprocess, sys, time
store, session = sys.argv[1], sys.argv[2]
runs = int(sys.argv[3]) if len(sys.argv) > 3 else 15
py = sys.executable
OURS = ("from hermes_store import SessionDB\ndb = SessionDB({p!r})\nrow = db.get_session({s!r})\n"
        "db.close()\n").format(p=store, s=session)
children = {
    "import sqlalchemy": "import sqlalchemy",
    "import sqlalchemy, os._exit": "import sqlalchemy, os; os._exit(0)",
    "import sqlalchemy.dialects.sqlite": "import sqlalchemy.dialects.sqlite",
    "import hermes_store.store": "from hermes_store import SessionDB",
    "import hermes_store.store, os._exit": "from hermes_store import SessionDB; import os; os._exit(0)",
    "ours": OURS,
    "ours, os._exit": OURS + "import os; os._exit(0)",
    "cli": None,
}
env = dict(os.environ); env.pop("PYTHONDONTWRITEBYTECODE", None)
def cmd(name):
    if name == "cli":
        return [py, "-m", "hermes_store", "--db", store, "sessions", "show", session, "--json"]
    return [py, "-c", children[name]]
def wall(name):
    t = time.perf_counter()
    subprocess.run(cmd(name), env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t
for name in children: wall(name)
samples = {name: [] for name in children}
order = list(children)
for i in range(runs):
    order = order[1:] + order[:1]
    for name in order:
        samples[name].append(wall(name))
ref = statistics.median(samples["import sqlalchemy"])
for name, s in samples.items():
    m = statistics.median(s)
    print(f"{name:40s} {m*1e3:7.1f} ms  {m/ref:5.2f}× the import-sqlalchemy process")
