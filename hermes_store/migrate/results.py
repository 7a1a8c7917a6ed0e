"""What a drift check reports (``migrate.check``), on either engine."""

from __future__ import annotations

from dataclasses import dataclass

from .topics import TopicsCheck


@dataclass(frozen=True)
class CheckResult:
    revision: str | None
    head: str
    drift: list[str]
    #: the Telegram DM topic branch (absent until a user opts in)
    telegram_topics: TopicsCheck | None = None
    #: objects of the full-text layout that are missing or invalid (the comparison
    #: behind ``drift`` leaves the layout out; PostgreSQL checks it from the catalog)
    full_text: tuple[str, ...] = ()

    @property
    def at_head(self) -> bool:
        return self.revision == self.head

    @property
    def ok(self) -> bool:
        topics_ok = self.telegram_topics is None or self.telegram_topics.ok
        return self.at_head and not self.drift and not self.full_text and topics_ok


__all__ = ["CheckResult"]
