"""Open a store as a macOS process would and report the durability pragmas of the
store's own connection (issue 31, row 11; upstream #30636).

    python3 darwin_pragmas.py PATH PLATFORM

``PLATFORM`` ("darwin" or "native") is put in ``sys.platform`` before the package is
imported, so the engine takes the path it takes on that platform. Prints one JSON
line: the pragmas, those of one of the agent's own databases after the shim's
``apply_wal_with_fallback``, and the id of one message the store acknowledged.
"""

from __future__ import annotations

import sys
import sysconfig

path, platform = sys.argv[1], sys.argv[2]
# The interpreter's build configuration is a module named after the real platform:
# loaded first (libraries read it at import), then the platform is the one asked for.
sysconfig.get_config_vars()
if platform != "native":
    sys.platform = platform

from _common import say  # noqa: E402

from hermes_store import SessionDB  # noqa: E402

PRAGMAS = ("checkpoint_fullfsync", "fullfsync", "synchronous")

with SessionDB(path) as db:
    db.create_session("s", "cli")
    message_id = db.append_message("s", "user", "survives a power cut")
    engine = next(v for v in vars(db).values() if type(v).__name__ == "Engine")
    with engine.connect() as conn:
        pragmas = {name: conn.exec_driver_sql(f"PRAGMA {name}").scalar() for name in PRAGMAS}

# The agent's own databases get the same list through the shim's WAL helper.
from hermes_store.agent.health import apply_wal_with_fallback  # noqa: E402
from hermes_store.backends.sqlite.library import dbapi  # noqa: E402

own = dbapi().connect(f"{path}.kanban.db")
apply_wal_with_fallback(own, db_label="kanban.db")
agents = {name: own.execute(f"PRAGMA {name}").fetchone()[0] for name in PRAGMAS}
own.close()
say(platform=sys.platform, pragmas=pragmas, agents=agents, message_id=message_id)
