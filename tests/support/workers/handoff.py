"""Process entry point for the handoff claim race (importable by spawned children)."""

from __future__ import annotations

from hermes_store import SessionDB


def claim_each(path: str, session_ids: list[str], barrier, results) -> None:
    """Claim every handoff in turn, meeting the other claimer at ``barrier`` before each
    claim so both ask for the same handoff at the same moment; report what was won."""
    db = SessionDB(path)
    won = []
    for session_id in session_ids:
        barrier.wait(60)
        won.append(db.claim_handoff(session_id))
    db.close()
    results.put(won)
