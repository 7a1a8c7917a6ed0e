"""What ``db copy`` reports, and the errors it raises."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ..errors import CopyError, CopyMismatchError


@dataclass
class TableReport:
    name: str
    copied: int = 0
    source_rows: int | None = None
    destination_rows: int | None = None
    source_hash: str | None = None
    destination_hash: str | None = None

    @property
    def ok(self) -> bool:
        return (self.source_rows == self.destination_rows
                and self.source_hash == self.destination_hash)

    def as_dict(self) -> dict:
        return {**asdict(self), "ok": self.ok}


@dataclass
class CopyReport:
    source: str
    destination: str
    #: the destination was created (missing file, empty database)
    created: bool = False
    #: this run continued an interrupted copy
    resumed: bool = False
    tables: list[TableReport] = field(default_factory=list)
    #: the highest message id ever handed out, on each side (ids are never reused)
    source_id_high_water: int | None = None
    destination_id_high_water: int | None = None
    load_seconds: float = 0.0
    finish_seconds: float = 0.0
    verify_seconds: float = 0.0
    seconds: float = 0.0
    verified: bool = False
    #: the destination still holds a progress record (a copy that did not finish)
    unfinished: bool = False
    #: a file destination: the session rows whose system prompt the copy put back inline
    #: for pre-v25 readers (``copy._share_prompts_inline``); None for a server
    inline_prompts: int | None = None

    @property
    def ok(self) -> bool:
        return self.verified and not self.unfinished and all(t.ok for t in self.tables) and (
            self.destination_id_high_water or 0) >= (self.source_id_high_water or 0)

    @property
    def mismatched(self) -> list[str]:
        return [t.name for t in self.tables if not t.ok]

    def table(self, name: str) -> TableReport:
        for item in self.tables:
            if item.name == name:
                return item
        item = TableReport(name)
        self.tables.append(item)
        return item

    @property
    def messages_per_second(self) -> float | None:
        """Messages copied by this run per second of the whole run (load, index
        builds and verification included)."""
        copied = sum(t.copied for t in self.tables if t.name == "messages")
        return round(copied / self.seconds, 1) if copied and self.seconds else None

    def as_dict(self) -> dict:
        return {
            "source": self.source,
            "destination": self.destination,
            "created": self.created,
            "resumed": self.resumed,
            "tables": [t.as_dict() for t in self.tables],
            "copied_rows": sum(t.copied for t in self.tables),
            "source_id_high_water": self.source_id_high_water,
            "destination_id_high_water": self.destination_id_high_water,
            "load_seconds": round(self.load_seconds, 3),
            "finish_seconds": round(self.finish_seconds, 3),
            "verify_seconds": round(self.verify_seconds, 3),
            "seconds": round(self.seconds, 3),
            "messages_per_second": self.messages_per_second,
            "verified": self.verified,
            "unfinished": self.unfinished,
            "inline_prompts": self.inline_prompts,
            "mismatched": self.mismatched,
            "ok": self.ok,
        }


def mismatch_message(report: CopyReport) -> str:
    parts = []
    for t in report.tables:
        if t.ok:
            continue
        if t.source_rows != t.destination_rows:
            parts.append(f"{t.name}: {t.source_rows} rows in the source, "
                         f"{t.destination_rows} in the destination")
        else:
            parts.append(f"{t.name}: same row count ({t.source_rows}), different content")
    if (report.destination_id_high_water or 0) < (report.source_id_high_water or 0):
        parts.append(f"messages id counter: {report.destination_id_high_water} in the "
                     f"destination, below the source's {report.source_id_high_water}")
    return (f"the copy {report.source} -> {report.destination} does not match: "
            f"{'; '.join(parts)}. Did something write to either side during the copy? "
            "Stop the writers and run `hermes-store db copy SRC DST --resume` again")


__all__ = ["CopyError", "CopyMismatchError", "CopyReport", "TableReport", "mismatch_message"]
