"""The export format's constants and encodings, and how a tool opens the store it
reads or writes (a ``SessionDB``, an ``Engine``, a path or a URL)."""

from __future__ import annotations

import base64
import json
import os
from typing import IO, Any

from sqlalchemy.engine import Engine

from .. import location
from ..backends.base import get
from ..errors import HermesStoreError, StoreReadOnlyError

FORMAT_KEY = "hermes_store_export"
FORMAT_VERSION = 1

#: rows fetched per keyset page on export
EXPORT_PAGE = 500
#: messages per transaction on import (a session is never split across transactions)
IMPORT_BATCH = 2000
#: rows per executemany on import
INSERT_CHUNK = 500
#: an upstream-format file of at most this many messages is read and checked once, its
#: checked rows kept from the validation pass for the writes (~20 MB); a bigger one is
#: read twice, so an import's memory stays flat whatever the file's size
KEEP_CHECKED_MESSAGES = 10_000


# --------------------------------------------------------------------------- helpers

def _to_json_value(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"$base64": base64.b64encode(bytes(value)).decode("ascii")}
    return value


def from_json_value(value: Any) -> Any:
    if isinstance(value, dict) and set(value) == {"$base64"}:
        return base64.b64decode(value["$base64"])
    return value


_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def _dumps(record: Any) -> str:
    return _ENCODER.encode(record)  # one encoder for every line, not one per call


def _write_line(out: IO[str], text: str, fallback: Any) -> None:
    try:
        out.write(text)
    except UnicodeEncodeError:
        # A lone surrogate cannot be written as UTF-8; the escaped form round-trips.
        out.write(json.dumps(fallback, ensure_ascii=True, separators=(",", ":")))


class OpenedTarget:
    """An Engine for whatever the caller handed us, disposed only if we created it."""

    def __init__(self, target: Any, *, read_only: bool) -> None:
        self.owned = False
        if isinstance(target, Engine):
            self.engine = target
        elif isinstance(getattr(target, "engine", None), Engine):  # a SessionDB
            if not read_only and getattr(target, "read_only", False):
                raise StoreReadOnlyError(getattr(target, "db_path", None))
            self.engine = target.engine
        elif isinstance(target, (str, os.PathLike)):
            where = location.resolve(target)  # a URL is never taken for a path
            if where.is_file and not where.path.exists():
                raise HermesStoreError(f"{where.path} does not exist: nothing to read")
            self.engine = get(where.backend).tool_engine(where, read_only=read_only)
            self.owned = True
        else:
            raise TypeError(f"expected an Engine, a SessionDB, a path or a URL, got {type(target).__name__}")

    def close(self) -> None:
        if self.owned:
            self.engine.dispose()
