"""Upstream's own tests of ``hermes_state`` pass on hermes_store (issue 32, item 1).

hermes-agent 0.19.0's sdist ships 490 tests of its ``hermes_state`` module. They run here
in the suite's agent venv with ``hermes-store agent enable`` on, so ``import hermes_state``
is ``hermes_store.agent.hermes_state`` (``support/upstream_suite.py``: the cached sdist,
the extraction into a scratch folder, the run). Every test passes except the ones that
cannot pass on any module but upstream's own, because they patch or read its module
globals or ``SessionDB``'s private attributes: ``support.upstream_suite.UPSTREAM_ONLY``
lists them, one reason each (with ``BY_DESIGN``: upstream behaviour the store does not
share on purpose, and ``NOT_YET``: waiting for a change elsewhere), and ``docs/agent.md``
("Upstream's own tests") mirrors the lists. A listed test that passes fails the run too,
so the lists stay true.
"""

from __future__ import annotations

import pytest
from support import upstream_suite
from support.agent import agent_env, require_agent_venv

#: slow: the run takes about half a minute, and the first one builds the agent venv
#: (minutes, once)
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

DOCS = upstream_suite.agent_venv.ROOT / "docs" / "agent.md"


def test_upstream_tests_of_hermes_state_pass_on_the_store(tmp_path):
    sdist = upstream_suite.require_sdist()
    venv = require_agent_venv()
    home = tmp_path / "home"
    home.mkdir()
    outcomes, run = upstream_suite.run_upstream_suite(venv.python, agent_env(home), sdist,
                                                      tmp_path / "suite")
    listed = upstream_suite.listed()
    by_test = {o.test: o for o in outcomes}
    assert len(outcomes) == upstream_suite.UPSTREAM_TEST_COUNT, run.stdout[-3000:]
    assert not set(listed) - set(by_test), "listed tests upstream's suite does not have"

    failed = [f"{o.test}: {o.message}" for o in outcomes if not o.passed and o.test not in listed]
    assert not failed, "upstream tests that fail on hermes_store:\n" + "\n".join(failed)
    now_passing = [test for test in listed if by_test[test].passed]
    assert not now_passing, ("listed as not passing, but passing (take them off the list in "
                             "support/upstream_suite.py and docs/agent.md):\n"
                             + "\n".join(now_passing))
    assert sum(o.passed for o in outcomes) >= 426


@pytest.mark.timeout(60)
def test_the_list_of_tests_that_cannot_pass_is_in_the_docs():
    """docs/agent.md names every listed test under its group, with the group's count
    (fast: no venv, no sdist)."""
    text = DOCS.read_text(encoding="utf-8")
    start = text.index("## Upstream's own tests")
    end = text.find("\n## ", start + 1)
    section = text[start:end if end != -1 else None]
    for group, entries in upstream_suite.groups().items():
        assert f"{group} ({len(entries)})" in section, group
        for test, _reason in entries:
            assert f"`{test.rsplit('::', 1)[1]}`" in section, test
