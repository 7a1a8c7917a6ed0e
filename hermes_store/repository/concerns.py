"""The concerns ``SessionDB`` is made of, and how it gets them: the first at import, the
others on first use.

``SessionDB`` (``hermes_store.store``) is one mixin per concern (this package's other
modules). A process that opens a store and reads a session — every CLI run, cron job and
subprocess — touches one of them, ``sessions``, and should not pay at start-up for
importing the other fourteen (and what only they import: the search parser, the
transcript shaping, the Telegram tables). So ``SessionDB`` is created with the mixins of
``CONCERNS[:EAGER]`` as its bases, and the first time anything looks for a name it does
not have, every other concern is imported and becomes a base, in ``CONCERNS`` order:
the class then has exactly the method resolution order it would have had if built
whole.

"Looks for a name" is every way Python has: an instance attribute
(``db.search_messages``), a class attribute (``SessionDB.search_messages``, which
``monkeypatch`` and ``inspect`` use), ``dir()`` of either, and a subclass being created
(``super()`` and the MRO do not ask ``__getattr__``, so a subclass gets a whole class).
Dunder names never assemble: no concern defines one, and ``copy``, ``pickle`` and
friends probe for them. Assembly runs once per process, under a lock, and the hook
``on_assembly`` sees the new concerns *before* they become bases, so ``store`` can put
its API guard on their public methods with no moment at which an unguarded method is
visible to another thread.
"""

from __future__ import annotations

import importlib
import threading
from typing import Callable, Sequence

from ..startup import collector_paused

#: (module of this package, mixin class), in method-resolution order
CONCERNS: tuple[tuple[str, str], ...] = (
    ("sessions", "SessionsMixin"),
    ("titles", "TitlesMixin"),
    ("lineage", "LineageMixin"),
    ("usage", "UsageMixin"),
    ("portability", "PortabilityMixin"),
    ("cleanup", "CleanupMixin"),
    ("importing", "ImportMixin"),
    ("meta", "MetaMixin"),
    ("maintenance", "MaintenanceMixin"),
    ("messages", "MessagesMixin"),
    ("search", "SearchMixin"),
    ("gateway", "GatewayMixin"),
    ("handoff", "HandoffMixin"),
    ("lookups", "LookupsMixin"),
    ("telegram", "TelegramTopicsMixin"),
)

#: how many of ``CONCERNS`` the class is created with (the rest come on first use)
EAGER = 1


def load(concerns: Sequence[tuple[str, str]]) -> tuple[type, ...]:
    """The mixin classes of ``concerns`` (their modules imported)."""
    return tuple(getattr(importlib.import_module(f"{__package__}.{module}"), name)
                 for module, name in concerns)


class AssembledOnUse(type):
    """Metaclass of a class whose later concerns become bases on first use (see the
    module docstring).

    The root class is created with ``later=`` (the concerns still to add) and
    ``on_assembly=`` (called with the class and the method resolution order it is about
    to have, before the new mixins become bases); its subclasses need neither."""

    def __new__(mcls, name, bases, namespace, *, later: Sequence[tuple[str, str]] = (),
                on_assembly: Callable[[type, tuple[type, ...]], None] | None = None):
        for base in bases:  # a subclass is built on a whole class (see the docstring)
            if isinstance(base, AssembledOnUse):
                base.assemble()
        cls = super().__new__(mcls, name, bases, namespace)
        if later:
            cls._later = tuple(later)
            cls._on_assembly = on_assembly
            cls._assembly_lock = threading.Lock()
        return cls

    def assemble(cls) -> bool:
        """Give the class every concern. False when it already had them as the call
        began: a name it could not find then is truly missing; True when the call
        assembled the class or waited for another thread that did (look again)."""
        root = next((k for k in cls.__mro__ if "_later" in k.__dict__), None)
        if root is None or not root._later:
            return False
        with root._assembly_lock:
            if not root._later:  # another thread did it while this one waited
                return True
            with collector_paused():  # as for the store's own import (startup.py)
                mixins = load(root._later)
            own = tuple(b for b in root.__bases__ if b is not Assembled)
            bases = own + mixins + (Assembled,)
            if root._on_assembly is not None:
                # the MRO the class is about to have (``Assembled`` adds no names)
                mro = (root,) + type("_", own + mixins, {}).__mro__[1:]
                root._on_assembly(root, mro)
            root.__bases__ = bases
            root._later = ()
            # a class with __getattr__ reaches every attribute through a slower slot:
            # once the class is whole, no hook has a use
            for owner in (Assembled, AssembledOnUse):
                for hook in ("__getattr__", "__dir__"):
                    if hook in owner.__dict__:
                        delattr(owner, hook)
        return True

    def __getattr__(cls, name: str):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        if not cls.assemble():
            raise AttributeError(f"type object {cls.__name__!r} has no attribute {name!r}")
        return getattr(cls, name)

    def __dir__(cls):
        cls.assemble()
        return super().__dir__()


class Assembled(metaclass=AssembledOnUse):
    """The instance side of ``AssembledOnUse``: a missing attribute or ``dir()`` of an
    instance assembles its class first."""

    __slots__ = ()

    def __getattr__(self, name: str):
        cls = type(self)
        if name.startswith("__") and name.endswith("__") or not cls.assemble():
            raise AttributeError(f"{cls.__name__!r} object has no attribute {name!r}")
        return object.__getattribute__(self, name)

    def __dir__(self):
        type(self).assemble()
        return super().__dir__()
