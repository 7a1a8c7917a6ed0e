"""Processes the tests start: scripts run by path (``python support/workers/x.py``,
with ``_common.py`` beside them) and modules whose functions a spawned child imports
(``concurrency``, ``handoff``, ``cleanup``)."""
