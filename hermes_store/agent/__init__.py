"""Hermes Agent itself on hermes_store (issue 16, decision D15).

``hermes_store.agent.hermes_state`` is the module agent 0.19.0 imports as
``hermes_state`` once the switch is on; the core package never imports this subpackage.
See ``README.md`` beside this file and ``docs/agent.md``.
"""
