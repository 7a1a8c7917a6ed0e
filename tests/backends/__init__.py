"""Tests of hermes_store/backends/: the engine table (here), each engine's own
behaviour in sqlite/ and postgresql/ (packages, so that the two can use the same module
names, as hermes_store/backends/{sqlite,postgresql}/ do)."""
