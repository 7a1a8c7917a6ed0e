"""Scratch (issue 19): cold start of package variants side by side (children in turn,
order rotating; medians), against a process that only imports SQLAlchemy.
    python startup_ab.py STORE SESSION RUNS VARIANT_DIR...   (a variant dir holds hermes_store/)"""
import os, statistics, subprocess, sys, time
store, session, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
variants = sys.argv[4:]
py = sys.executable
OURS = ("from hermes_store import SessionDB\ndb = SessionDB({p!r})\nrow = db.get_session({s!r})\n"
        "db.close()\n").format(p=store, s=session)
base_env = dict(os.environ); base_env.pop("PYTHONDONTWRITEBYTECODE", None)
sides = {"sqlalchemy": ([py, "-c", "import sqlalchemy"], None)}
for v in variants:
    name = os.path.basename(v.rstrip("/"))
    sides[f"{name}: library"] = ([py, "-c", OURS], v)
    sides[f"{name}: cli"] = ([py, "-m", "hermes_store", "--db", store, "sessions", "show", session, "--json"], v)
def wall(name):
    cmd, path = sides[name]
    env = dict(base_env)
    if path: env["PYTHONPATH"] = path
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, cwd="/tmp")
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 0, cmd
    wall_s = time.perf_counter() - t
    cpu[name].append(usage.ru_utime + usage.ru_stime)
    return wall_s
cpu = {name: [] for name in sides}
for name in sides: wall(name); wall(name)
cpu = {name: [] for name in sides}
samples = {name: [] for name in sides}
order = list(sides)
for i in range(runs):
    order = order[1:] + order[:1]
    for name in order:
        samples[name].append(wall(name))
ref = statistics.median(samples["sqlalchemy"])
# per-run ratios against the reference of the same run (paired)
for name, s in samples.items():
    paired = statistics.median(a / b for a, b in zip(s, samples["sqlalchemy"]))
    c = statistics.median(cpu[name]); cref = statistics.median(cpu["sqlalchemy"])
    print(f"{name:28s} wall {statistics.median(s)*1e3:7.1f} ms  {statistics.median(s)/ref:5.2f}× (paired {paired:4.2f}×)   cpu {c*1e3:6.1f} ms  {c/cref:5.2f}×")
