"""Placeholder: the messages concern of SessionDB is being written (see docs/architecture.md)."""

from .base import RepositoryBase


class MessagesMixin(RepositoryBase):
    pass
