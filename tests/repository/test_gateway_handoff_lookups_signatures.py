"""The gateway, handoff and lookup methods have upstream 0.19.0's signatures.

Recorded from ``inspect.signature`` of upstream's ``SessionDB`` (annotations dropped:
only names, kinds and defaults are part of the contract). Return shapes are checked
by the behaviour tests of each concern.
"""

from __future__ import annotations

import inspect

import pytest

from hermes_store import SessionDB

UPSTREAM_0_19_0 = {
    "save_gateway_routing_entry": "(self, session_key, entry_json, *, scope='')",
    "load_gateway_routing_entries": "(self, *, scope='')",
    "replace_gateway_routing_entries": "(self, entries, *, scope='')",
    "delete_gateway_routing_entries": "(self, session_keys, *, scope='')",
    "record_gateway_session_peer": "(self, session_id, *, source, user_id=None, "
    "session_key=None, chat_id=None, chat_type=None, thread_id=None, display_name=None, "
    "origin_json=None)",
    "find_latest_gateway_session_for_peer": "(self, *, source, user_id=None, "
    "session_key=None, chat_id=None, chat_type=None, thread_id=None)",
    "find_session_by_origin": "(self, *, platform, chat_id, thread_id=None, user_id=None)",
    "list_gateway_sessions": "(self, *, platform=None, active_only=True)",
    "request_handoff": "(self, session_id, platform)",
    "claim_handoff": "(self, session_id)",
    "complete_handoff": "(self, session_id)",
    "fail_handoff": "(self, session_id, error)",
    "get_handoff_state": "(self, session_id)",
    "list_pending_handoffs": "(self)",
    "search_sessions_by_id": "(self, query, limit=20, include_archived=True)",
    "distinct_session_cwds": "(self, include_archived=False)",
    "get_resume_conversations": "(self, session_id)",
    "list_cron_job_runs": "(self, job_id, limit=20, offset=0)",
    "get_ancestor_display_prefix": "(self, session_id)",
}


def bare_signature(fn) -> str:
    sig = inspect.signature(fn)
    params = [p.replace(annotation=inspect.Parameter.empty) for p in sig.parameters.values()]
    return str(sig.replace(parameters=params, return_annotation=inspect.Signature.empty))


@pytest.mark.parametrize("name", sorted(UPSTREAM_0_19_0))
def test_signature_matches_upstream(name):
    assert bare_signature(getattr(SessionDB, name)) == UPSTREAM_0_19_0[name]
