"""Import concern: ``import_sessions``, and the code every import runs.

``import_sessions(sessions)`` takes what ``export_session``/``export_all`` return (a list
of session dicts, each with its ``messages``) and answers as upstream 0.19.0 does:

* not a list → ``InvalidArgumentError("sessions must be a list")`` (a ``ValueError``);
  more than 500 entries → ``"sessions must contain at most 500 entries"``;
* every entry is checked by upstream's rules, in upstream's order, with its caps (≤ 10,000
  messages and ≤ 5 MiB per session, ≤ 50,000 messages and ≤ 25 MiB in all). **Any**
  error and nothing is written: ``{"ok": False, "imported": 0, "skipped": 0,
  "detached": 0, "errors": [{"index", "error", "session_id"?}, …]}`` with upstream's
  texts;
* otherwise one write unit: sessions whose id exists are skipped; new ones keep their
  history (times, model, prompt, tokens and costs, title, archived) but not the live
  runtime state (gateway routing, handoff, rewind), and their counters are recounted
  from the messages inserted; a parent link is restored when the parent exists (in the
  store or the payload) and no cycle results, else the child is detached and counted.
  ``{"ok": True, "imported", "skipped", "detached", "imported_ids", "skipped_ids",
  "errors": []}``.

Where 0.19.0 raised from inside its transaction, an entry is refused up front instead,
in ``errors``: content or a JSON field that cannot be stored, a count beyond 64 bits.
A title another session already holds (0.19.0: ``IntegrityError``) is imported as
``"<title> (imported)"`` (``"(imported 2)"``, …), as ``hermes-store sessions import``
always did. Lone surrogates are replaced by U+FFFD, as on every write.

``hermes_store.transfer`` (``hermes-store sessions import``) runs the same code:
``ImportChecker`` for upstream-shaped entries and ``SessionWriter`` for every insert of
either file format, so a session is checked and written the same way whichever way it
comes through. Only the transaction boundaries differ: the CLI streams files of any size
and commits whole sessions in batches, so the caps (which bound one payload held in
memory and one write unit) are the API's alone.
"""

from __future__ import annotations

import json
import math
import time
from typing import Any, Iterable, NamedTuple

import sqlalchemy as sa

from .. import schema, unit_locks
from ..errors import InvalidArgumentError
from .base import RepositoryBase
from ..sql.constructs import keep_ids_ahead
from .message_rows import INSERT_MESSAGE, bulk_rows
from .system_prompts import keeps_prompts_inline, store_prompt
from ..sql.values import scrub_surrogates

S = schema.sessions
M = schema.messages
P = schema.system_prompts
U = schema.session_model_usage


class ImportLimits(NamedTuple):
    """Caps on one import; None = no cap."""

    sessions: int | None = None
    messages_per_session: int | None = None
    total_messages: int | None = None
    session_bytes: int | None = None
    total_bytes: int | None = None


#: upstream 0.19.0's caps of ``import_sessions``
UPSTREAM_LIMITS = ImportLimits(
    sessions=500,
    messages_per_session=10_000,
    total_messages=50_000,
    session_bytes=5 * 1024 * 1024,
    total_bytes=25 * 1024 * 1024,
)
NO_LIMITS = ImportLimits()

#: session columns kept from an entry as text (upstream's list)
_SESSION_TEXT = (
    "source", "user_id", "model", "system_prompt", "end_reason", "cwd", "git_branch",
    "git_repo_root", "billing_provider", "billing_base_url", "billing_mode", "cost_status",
    "cost_source", "pricing_version", "title",
)
_SESSION_COUNTERS = ("input_tokens", "output_tokens", "cache_read_tokens",
                     "cache_write_tokens", "reasoning_tokens", "api_call_count")
_SESSION_REALS = ("ended_at", "estimated_cost_usd", "actual_cost_usd")
#: message fields that must be text when present (upstream's list)
_MESSAGE_TEXT = (
    "tool_call_id", "tool_name", "effect_disposition", "finish_reason", "reasoning",
    "reasoning_content", "platform_message_id", "message_id",
)
#: JSON fields an export carries as text; decoded so they are stored once-encoded
_MESSAGE_JSON_TEXT = ("reasoning_details", "codex_reasoning_items", "codex_message_items")
_INT64 = (-(2 ** 63), 2 ** 63 - 1)
_INSERT_MESSAGE_KEYS = set(INSERT_MESSAGE.column_keys)


# --------------------------------------------------------------------------- values

def _text_or_none(value: Any, name: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise ValueError(f"{name} must be a string")


def _json_object_or_none(value: Any, name: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except (ValueError, RecursionError):
            raise ValueError(f"{name} must be valid JSON") from None
        if not isinstance(parsed, dict):
            raise ValueError(f"{name} must be a JSON object")
        return value
    if not isinstance(value, dict):
        raise ValueError(f"{name} must be a JSON object")
    try:
        return json.dumps(value)
    except (TypeError, ValueError, RecursionError):
        raise ValueError(f"{name} must be JSON serializable") from None


def _in_int64(value: int, name: str) -> int:
    if not _INT64[0] <= value <= _INT64[1]:
        raise ValueError(f"{name} is out of range")
    return value


def _int_or_none(value: Any, name: str) -> int | None:
    if value is None:
        return None
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"{name} must be an integer") from None
    return _in_int64(number, name)


def _int_or_zero(value: Any, name: str) -> int:
    """A counter: anything unreadable counts 0, as upstream; beyond 64 bits an error."""
    if value is None:
        return 0
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        return 0
    return _in_int64(number, name)


def _real_or_none(value: Any) -> float | None:
    try:
        number = float(value) if value is not None else None
    except (TypeError, ValueError, OverflowError):
        return None
    # NaN/inf would be stored as NULL and break NOT NULL started_at
    return number if number is not None and math.isfinite(number) else None


def _json_text_decoded(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except (ValueError, RecursionError):
        return value


def import_error(index: int, session_id: str, error: str) -> dict[str, Any]:
    """One entry of ``errors`` (upstream's shape: ``session_id`` only when known)."""
    item: dict[str, Any] = {"index": index, "error": error}
    if session_id:
        item["session_id"] = session_id
    return item


# --------------------------------------------------------------------------- checking

class PreparedSession(NamedTuple):
    """A checked entry, ready to be written (rows built before any write unit, so a
    retried unit writes exactly the same rows)."""

    index: int
    session_id: str
    row: dict[str, Any]  # sessions columns; no parent, no prompt
    prompt: str | None
    parent: str | None
    messages: list[dict[str, Any]]


class ImportChecker:
    """Upstream's rules for one entry after another, with the running caps.

    ``check(index, raw)`` returns a ``PreparedSession`` or an error dict. Entries are
    checked in order; duplicates and the totals count only entries that passed (bytes
    count from the size check on, as upstream's do).
    """

    def __init__(self, limits: ImportLimits = UPSTREAM_LIMITS) -> None:
        self.limits = limits
        self.seen: set[str] = set()
        self.total_messages = 0
        self.total_bytes = 0

    @staticmethod
    def _over(value: int, cap: int | None) -> bool:
        return cap is not None and value > cap

    def check(self, index: int, raw: Any) -> PreparedSession | dict[str, Any]:
        limits = self.limits
        if not isinstance(raw, dict):
            return import_error(index, "", "session must be an object")
        sid = str(raw.get("id") or "").strip()
        if not sid:
            return import_error(index, "", "session id is required")
        if sid in self.seen:
            return import_error(index, sid, "duplicate session id")
        messages = raw.get("messages") or []
        if not isinstance(messages, list):
            return import_error(index, sid, "messages must be a list")
        if self._over(len(messages), limits.messages_per_session):
            return import_error(index, sid, "messages exceeds the per-session import limit")
        if any(not isinstance(m, dict) for m in messages):
            return import_error(index, sid, "messages must contain only objects")
        if limits.session_bytes is not None or limits.total_bytes is not None:
            error = self._size_error(index, sid, raw)
            if error is not None:
                return error
        try:
            prepared = _prepare(index, sid, raw, messages)
        except ValueError as exc:
            return import_error(index, sid, str(exc))
        self.total_messages += len(prepared.messages)
        if self._over(self.total_messages, limits.total_messages):
            return import_error(index, sid, "messages exceeds the total import limit")
        self.seen.add(sid)
        return prepared

    def _size_error(self, index: int, sid: str, raw: dict) -> dict[str, Any] | None:
        """Upstream's byte caps, on the entry's JSON text. Without caps (a file import,
        whose entries were parsed from JSON) the text is not built at all: the fields
        that are stored are encoded, and refused if unstorable, by ``_prepare``."""
        limits = self.limits
        try:
            text = json.dumps(raw, ensure_ascii=False, separators=(",", ":"))
        except (TypeError, ValueError, RecursionError):
            return import_error(index, sid, "session must be JSON serializable")
        # surrogatepass: a lone surrogate is scrubbed on write, not a reason to refuse
        size = len(text.encode("utf-8", "surrogatepass"))
        if self._over(size, limits.session_bytes):
            return import_error(index, sid, "session exceeds the import size limit")
        self.total_bytes += size
        if self._over(self.total_bytes, limits.total_bytes):
            return import_error(index, sid, "import exceeds the total size limit")
        return None


def _prepare(index: int, sid: str, raw: dict, messages: list[dict]) -> PreparedSession:
    """The rows of one entry; ``ValueError`` with upstream's text for a bad field."""
    model_config = _json_object_or_none(raw.get("model_config"), "model_config")
    parent = _text_or_none(raw.get("parent_session_id"), "parent_session_id")
    text = {name: _text_or_none(raw.get(name), name) for name in _SESSION_TEXT}
    clean = []
    for position, message in enumerate(messages):
        role = message.get("role")
        if not isinstance(role, str) or not role:
            raise ValueError(f"messages[{position}].role must be a non-empty string")
        for name in _MESSAGE_TEXT:
            _text_or_none(message.get(name), name)
        decoded = dict(message)
        decoded["token_count"] = _int_or_none(message.get("token_count"), "token_count")
        for name in _MESSAGE_JSON_TEXT:
            decoded[name] = _json_text_decoded(message.get(name))
        clean.append(decoded)
    rows, tool_calls = bulk_rows(sid, clean)  # append's encoding; raises for unstorable
    started = _real_or_none(raw.get("started_at"))
    row = {
        "id": sid,
        **{name: scrub_surrogates(text[name]) for name in _SESSION_TEXT
           if name not in ("source", "system_prompt")},
        "source": scrub_surrogates(text["source"] or "import"),
        "model_config": scrub_surrogates(model_config),
        "started_at": started if started is not None else time.time(),
        **{name: _real_or_none(raw.get(name)) for name in _SESSION_REALS},
        **{name: _int_or_zero(raw.get(name), name) for name in _SESSION_COUNTERS},
        "message_count": len(rows),
        "tool_call_count": tool_calls,
        "archived": 1 if raw.get("archived") else 0,
    }
    parent = (parent or "").strip() or None
    return PreparedSession(index, sid, row, scrub_surrogates(text["system_prompt"]),
                           scrub_surrogates(parent), rows)


def check_entries(entries: list, limits: ImportLimits) -> tuple[list[PreparedSession], list[dict]]:
    """Every entry checked: the prepared sessions, and the errors (empty when all pass)."""
    checker = ImportChecker(limits)
    prepared, errors = [], []
    for index, raw in enumerate(entries):
        result = checker.check(index, raw)
        (errors if isinstance(result, dict) else prepared).append(result)
    return prepared, errors


# --------------------------------------------------------------------------- writing

class ImportTally:
    """What one writer did (a plain class: a dataclass would cost every cold start)."""

    __slots__ = ("imported_ids", "skipped_ids", "detached", "retitled", "renumbered",
                 "messages_added", "messages_skipped")

    def __init__(self) -> None:
        self.imported_ids: list[str] = []
        self.skipped_ids: list[str] = []
        self.detached = self.retitled = self.renumbered = 0
        self.messages_added = self.messages_skipped = 0


def _exists(conn: sa.Connection, sid: str) -> bool:
    return conn.execute(sa.select(S.c.id).where(S.c.id == sid)).first() is not None


class SessionWriter:
    """Writes imported sessions inside the caller's write unit(s).

    Sessions are inserted without their parent; ``link_parents`` restores the links at
    the end (upstream's rule: the parent exists and no cycle results, else the child is
    detached), so the order of the entries does not matter. A session whose id exists
    is skipped whole.
    """

    def __init__(self) -> None:
        self.tally = ImportTally()
        self._links: dict[str, str] = {}  # child -> parent, not yet linked, in order
        self._inline: bool | None = None  # keeps_prompts_inline, read on first use

    # -- sessions

    def add_session(
        self,
        conn: sa.Connection,
        values: dict[str, Any],
        *,
        prompt: str | None = None,
        prompt_row: dict | None = None,
        usage: Iterable[dict] = (),
        parent: str | None = None,
    ) -> bool:
        """Insert one session row (``values``: sessions columns) unless its id exists.

        The prompt is ``prompt`` (text, de-duplicated into ``system_prompts``) or, for a
        native export, the ``system_prompt_hash`` in ``values`` with ``prompt_row`` (the
        ``system_prompts`` row it names). True when inserted.
        """
        sid = values["id"]
        if _exists(conn, sid):
            self.tally.skipped_ids.append(sid)
            return False
        values = {**values, "parent_session_id": None}
        if prompt is not None:
            values["system_prompt_hash"] = store_prompt(conn, prompt)
        elif values.get("system_prompt_hash"):
            self._keep_prompt(conn, values, prompt_row)
        if values.get("system_prompt_hash") and values.get("system_prompt") is None \
                and self._keeps_prompts_inline(conn):  # a file shared with pre-v25 readers
            values["system_prompt"] = conn.execute(
                sa.select(P.c.prompt).where(P.c.hash == values["system_prompt_hash"])
            ).scalar()
        self._unique_title(conn, values)
        conn.execute(sa.insert(S), values)
        for row in usage:
            conn.execute(sa.insert(U), {**row, "session_id": sid})
        if parent:
            self._links[sid] = parent
        self.tally.imported_ids.append(sid)
        return True

    def _keeps_prompts_inline(self, conn: sa.Connection) -> bool:
        if self._inline is None:
            self._inline = keeps_prompts_inline(conn)
        return self._inline

    def add_prepared(self, conn: sa.Connection, prepared: PreparedSession) -> bool:
        """A checked upstream-format entry: its session and messages."""
        if not self.add_session(conn, prepared.row, prompt=prepared.prompt,
                                parent=prepared.parent):
            self.tally.messages_skipped += len(prepared.messages)
            return False
        self.add_messages(conn, prepared.messages)
        return True

    def _keep_prompt(self, conn: sa.Connection, values: dict, prompt_row: dict | None) -> None:
        digest = values["system_prompt_hash"]
        if conn.execute(sa.select(P.c.hash).where(P.c.hash == digest)).first() is not None:
            return
        if prompt_row and prompt_row.get("hash") == digest and isinstance(prompt_row.get("prompt"), str):
            conn.execute(sa.insert(P), {"hash": digest, "prompt": prompt_row["prompt"]})
        else:
            values["system_prompt_hash"] = None  # the prompt text itself is not there

    def _unique_title(self, conn: sa.Connection, values: dict) -> None:
        """Titles are unique: a taken one becomes "<title> (imported)", "(imported 2)", …"""
        title = values.get("title")
        if title is None:
            return
        candidate, n = title, 1
        while conn.execute(sa.select(S.c.id).where(S.c.title == candidate)).first() is not None:
            candidate = f"{title} (imported)" if n == 1 else f"{title} (imported {n})"
            n += 1
        if candidate != title:
            values["title"] = candidate
            self.tally.retitled += 1

    # -- messages

    def add_messages(self, conn: sa.Connection, rows: list[dict]) -> None:
        """Insert message rows (``session_id`` set). A row's ``id`` is kept when free,
        else the row gets a new one; kept ids go first, so renumbered rows get ids above
        them and keep their order."""
        if not rows:
            return
        wanted = [r["id"] for r in rows if r.get("id") is not None]
        taken = set()
        if wanted:
            taken = set(conn.execute(sa.select(M.c.id).where(M.c.id.in_(wanted))).scalars())
        keep, renumber = [], []
        for row in rows:
            if row.get("id") is None or row["id"] in taken:
                if "id" in row:
                    row = {k: v for k, v in row.items() if k != "id"}
                    self.tally.renumbered += 1
                renumber.append(row)
            else:
                taken.add(row["id"])
                keep.append(row)
        for group in _runs(keep):
            self._insert_messages(conn, group)
        if keep:  # kept ids must stay below every id generated from now on
            keep_ids_ahead(conn, M.c.id)
        for group in _runs(renumber):
            self._insert_messages(conn, group)
        self.tally.messages_added += len(rows)

    @staticmethod
    def _insert_messages(conn: sa.Connection, group: list[dict]) -> None:
        if group[0].keys() == _INSERT_MESSAGE_KEYS:  # append's rows: the prebuilt INSERT
            INSERT_MESSAGE.execute_many(conn, group)
        else:
            conn.execute(sa.insert(M), group)

    # -- parents

    def link_parents(self, conn: sa.Connection, *, final: bool = True) -> None:
        """Restore the parent links of the sessions inserted so far, in order.

        A link whose parent exists is restored unless it would close a cycle (then the
        child is detached: only the closing edge is dropped, so later children can still
        attach to it). A link whose parent does not exist is detached when ``final``,
        else kept for a later call (a batched import whose parent comes later).
        """
        # A cycle needs an edge into the child: a child nothing points to is linked
        # without walking up from its parent (a superset of targets is still exact).
        targets = set(self._links.values())
        for child, parent in list(self._links.items()):
            if not _exists(conn, parent):
                if final:
                    del self._links[child]
                    self.tally.detached += 1
                continue
            pointed_at = child in targets or conn.execute(
                sa.select(S.c.id).where(S.c.parent_session_id == child).limit(1)).first()
            if pointed_at and self._would_cycle(conn, child, parent):
                del self._links[child]
                self.tally.detached += 1
                continue
            conn.execute(sa.update(S).where(S.c.id == child).values(parent_session_id=parent))
            del self._links[child]

    def _would_cycle(self, conn: sa.Connection, child: str, parent: str) -> bool:
        seen = {child}
        current: str | None = parent
        while current:
            if current in seen:
                return True
            seen.add(current)
            if current in self._links:  # a link still to restore counts as well
                current = self._links[current]
                continue
            current = conn.execute(
                sa.select(S.c.parent_session_id).where(S.c.id == current)
            ).scalar()
        return False


def _runs(rows: list[dict]) -> list[list[dict]]:
    """Consecutive rows with the same keys (one executemany each, order kept). Missing
    keys are not filled with NULL: that would defeat the columns' server defaults."""
    runs: list[list[dict]] = []
    for r in rows:
        if runs and runs[-1][0].keys() == r.keys():
            runs[-1].append(r)
        else:
            runs.append([r])
    return runs


# --------------------------------------------------------------------------- the API

class ImportMixin(RepositoryBase):
    # upstream's names for its caps (class attributes, so a deployment can change them)
    _IMPORT_MAX_SESSIONS = UPSTREAM_LIMITS.sessions
    _IMPORT_MAX_MESSAGES_PER_SESSION = UPSTREAM_LIMITS.messages_per_session
    _IMPORT_MAX_TOTAL_MESSAGES = UPSTREAM_LIMITS.total_messages
    _IMPORT_MAX_SESSION_BYTES = UPSTREAM_LIMITS.session_bytes
    _IMPORT_MAX_TOTAL_BYTES = UPSTREAM_LIMITS.total_bytes

    def import_sessions(self, sessions: list[dict[str, Any]]) -> dict[str, Any]:
        """Import ``export_session``/``export_all`` dicts, all or nothing (see the
        module docstring for the rules, caps and answers)."""
        if not isinstance(sessions, list):
            raise InvalidArgumentError("sessions must be a list")
        if len(sessions) > self._IMPORT_MAX_SESSIONS:
            raise InvalidArgumentError(
                f"sessions must contain at most {self._IMPORT_MAX_SESSIONS} entries")
        limits = ImportLimits(
            sessions=self._IMPORT_MAX_SESSIONS,
            messages_per_session=self._IMPORT_MAX_MESSAGES_PER_SESSION,
            total_messages=self._IMPORT_MAX_TOTAL_MESSAGES,
            session_bytes=self._IMPORT_MAX_SESSION_BYTES,
            total_bytes=self._IMPORT_MAX_TOTAL_BYTES,
        )
        prepared, errors = check_entries(sessions, limits)
        if errors:
            return {"ok": False, "imported": 0, "skipped": 0, "detached": 0, "errors": errors}

        def unit(conn: sa.Connection) -> ImportTally:
            writer = SessionWriter()  # inside the unit: a retried unit starts afresh
            for entry in prepared:
                writer.add_prepared(conn, entry)
            writer.link_parents(conn)
            return writer.tally

        # ids, titles and parent links checked against the whole store: runs alone
        tally = self._write(unit, locks=unit_locks.STORE)
        return {
            "ok": True,
            "imported": len(tally.imported_ids),
            "skipped": len(tally.skipped_ids),
            "detached": tally.detached,
            "imported_ids": tally.imported_ids,
            "skipped_ids": tally.skipped_ids,
            "errors": [],
        }
