"""``python -m hermes_store``: the same CLI as the ``hermes-store`` console script."""

from .cli import main

if __name__ == "__main__":
    main()
