"""The operations a file store has and a server does not (``Backend.files``): a
consistent online backup, salvage of a damaged file, healing duplicated FTS schema rows,
and what SQLite says of a file's health. The CLI's ``db backup``, ``recover``,
``maintenance repair`` and ``doctor`` use them through the backend."""

from __future__ import annotations


class SQLiteFiles:
    def backup(self, source, dest, **options):
        from .backup import backup

        return backup(source, dest, **options)

    def recover(self, source, output, **options):
        from .recovery import recover

        return recover(source, output, **options)

    def repair(self, path, **options):
        from .repair import repair

        return repair(path, **options)

    def health(self, path, *, quick: bool = False):
        from .backup import file_health

        return file_health(path, quick=quick)

    def journal_mode(self, path):
        from .backup import journal_mode

        return journal_mode(path)


FILES = SQLiteFiles()

__all__ = ["FILES", "SQLiteFiles"]
