"""Streaming export and batched, idempotent import of sessions and their messages.

Export never holds more than one page of rows: sessions are read with keyset paging on
``(started_at, id)`` and each session's messages with keyset paging on ``id``, all inside
one read transaction so the export is a consistent snapshot even while writers run.
Columns are reflected from the database, so a store that has not been upgraded exports
faithfully too (nothing is written to it).

The native format (``hermes_store_export`` = 1) carries column values exactly as stored
(message content keeps its ``"\\x00json:"`` sentinel, ``tool_calls`` stays JSON text,
BLOBs become ``{"$base64": ...}``), so export -> import reproduces rows exactly.

JSONL, one record per line::

    {"hermes_store_export": 1, "schema_version": 30, "exported_at": "..."}
    {"session": {...every column...}, "system_prompt": {...} | null, "model_usage": [...]}
    {"message": {...every column...}}            # the session's messages, by id
    ...
    {"end": {"sessions": N, "messages": M}}      # a missing trailer = a truncated file

JSON: the header keys plus ``"sessions": [{"session": ..., "system_prompt": ...,
"model_usage": [...], "messages": [...]}, ...]`` and ``"end"``.

Import also reads upstream Hermes exports: one ``export_session()`` dict, a list of them
(``export_all()``), or JSONL with one such dict per line. Those are checked and written
by the code behind ``SessionDB.import_sessions`` (``repository.importing``: the same
rules and rows, without its size caps), and every session of either format is written
by its ``SessionWriter``.

Import validates the whole file first (nothing is written when any record is bad), then
inserts in batches of whole sessions. A session whose id already exists is skipped with
its messages, so re-importing the same file adds nothing.

The package: ``formats`` (constants, encodings, opening the store), ``export``, ``files``
(reading and validating an import file), ``importer`` (writing it).
"""

from ..repository.message_rows import CONTENT_JSON_PREFIX
from ..errors import ImportFileError
from .export import (
    ExportCounts,
    decode_content,
    export_header,
    iter_export,
    stored_schema_version,
    write_export,
)
from .files import ImportReport
from .formats import EXPORT_PAGE, FORMAT_KEY, FORMAT_VERSION, IMPORT_BATCH, KEEP_CHECKED_MESSAGES
from .importer import import_file

__all__ = [
    "CONTENT_JSON_PREFIX",
    "EXPORT_PAGE",
    "FORMAT_KEY",
    "FORMAT_VERSION",
    "IMPORT_BATCH",
    "ImportFileError",
    "ImportReport",
    "KEEP_CHECKED_MESSAGES",
    "ExportCounts",
    "decode_content",
    "export_header",
    "import_file",
    "iter_export",
    "stored_schema_version",
    "write_export",
]
