"""What ``import hermes_store`` gives a user (issue 33): every public name, light to import."""

from __future__ import annotations

import inspect
import subprocess
import sys

import hermes_store
from hermes_store import errors


def test_every_error_the_package_raises_is_a_public_name():
    defined = {name for name, obj in vars(errors).items()
               if inspect.isclass(obj) and issubclass(obj, Exception)
               and obj.__module__ == errors.__name__}
    assert defined <= set(hermes_store.__all__)
    for name in defined:
        assert getattr(hermes_store, name) is getattr(errors, name)
        assert issubclass(getattr(errors, name), errors.HermesStoreError)


def test_the_store_its_policy_and_the_library_choice_are_public_names():
    for name in ("SessionDB", "RetryPolicy", "use_sqlite_library", "default_db_path",
                 "hermes_home"):
        assert name in hermes_store.__all__ and getattr(hermes_store, name) is not None
    assert hermes_store.RetryPolicy().checkpoint_every == 50


def test_importing_the_package_imports_neither_sqlalchemy_nor_a_backend():
    code = ("import sys, hermes_store\n"
            "print(sorted(m for m in sys.modules if m.startswith(('sqlalchemy', "
            "'hermes_store.backends', 'hermes_store.store'))))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"
