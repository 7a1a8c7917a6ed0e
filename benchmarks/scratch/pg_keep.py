"""Scratch (issue 19): keep a PostgreSQL server with the benchmark's settings running,
with the 10k and 100k databases filled as bench_pg_search fills them, and the cached
SQLite stores beside them, for experiments. Writes $HERMES_SCRATCH_PG (default
/tmp/speed/pg.json: the port, each database's URL and SQLite file). Stop it: kill the
pid written there (the server goes with it).

    nohup python benchmarks/scratch/pg_keep.py > pg_keep.log 2>&1 &
"""
import json, os, sys, time, signal
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _pg, _stores
from support.postgres import PostgresServer, find_bindir
INFO = Path(os.environ.get("HERMES_SCRATCH_PG", "/tmp/speed/pg.json"))
INFO.parent.mkdir(parents=True, exist_ok=True)
srv = PostgresServer(find_bindir(), settings=_pg.DEPLOYMENT_SETTINGS, tcp_port=_pg._free_port())
srv.start()
info = {"pid": os.getpid(), "base": str(srv.base), "port": srv.port}
for n in (10_000, 100_000):
    name = f"search_{n//1000}k"
    url = srv.create_database(name)
    _pg.fill(url, n, log=print)
    lite = _stores.store("head", n, log=print)
    info[name] = {"url": url, "sqlite": str(lite)}
    INFO.write_text(json.dumps(info, indent=1))
    print("ready", name, flush=True)
signal.signal(signal.SIGTERM, lambda *a: (srv.stop(), sys.exit(0)))
while True:
    time.sleep(3600)
