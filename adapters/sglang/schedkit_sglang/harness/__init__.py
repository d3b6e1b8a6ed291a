"""What schedkit's tests and bench drive SGLang with; a served SGLang never imports it.

``contract`` is the contract suite's driver (with its ``schedkit_contract`` SGLang plugin,
installed only for the engines the driver starts) and ``real`` the real-engine bench arm
(``--engine sglang``, the ``schedkit.engines`` entry point). They load the bench, the
workload model and the contract suite; the runtime next to this package (the ``schedkit``
SGLang plugin, ``patches`` and what they import) loads none of them, and none of this
(``tests/test_units.py`` checks both in a fresh interpreter).
"""
