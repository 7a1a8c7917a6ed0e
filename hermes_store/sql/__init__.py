"""The portable SQL the repository is built from, below it and beside the engine core:

* ``constructs`` — SQL constructs each engine compiles its own way (``json_text``, the
  upsert, ``keep_ids_ahead``…); each backend registers its compilations in its own
  ``constructs.py``;
* ``prebuilt`` — statements compiled once per dialect and run through the driver door;
* ``values`` — the values every statement shares (surrogate scrubbing, hashes).

The engine packages compile these; the repository writes its queries with them.
"""
