"""Fixtures for the head-schema tests."""

from __future__ import annotations

import pytest

from head_helpers import build_head
from hermes_store.engine import writer


@pytest.fixture
def head_engine(tmp_path):
    """A fresh head file; the engine begins every transaction with BEGIN IMMEDIATE."""
    engine = build_head(tmp_path / "state.db")
    yield writer(engine)
    engine.dispose()
