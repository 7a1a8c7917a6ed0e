"""The engines behind the store, one package each (decisions D17, D21).

``base.py`` holds the interface (``Backend`` and its facets), the contract constants and
the registry (``base.get``: a store's backend, resolved once when it opens, then carried
on its engines: ``base.backend_of``); ``sqlite/`` and ``postgresql/`` implement it side by
side, with the same module names for the same concerns (``docs/architecture.md``, "The
two engines as one table"), and never import each other.
"""
