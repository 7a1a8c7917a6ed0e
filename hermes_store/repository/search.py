"""Placeholder: the search concern of SessionDB is being written (see docs/architecture.md)."""

from .base import RepositoryBase


class SearchMixin(RepositoryBase):
    pass
