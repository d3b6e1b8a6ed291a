"""What schedkit's tests and benchmarks drive LMDeploy with; LMDeploy's engine process never
imports it.

``modelless`` builds LMDeploy's real ``Scheduler`` without a model (as LMDeploy's own
scheduler tests do) and checks its KV blocks; ``contract`` (the contract suite's driver)
drives that scheduler the way LMDeploy's engine loop does. They load the bench's request
helpers and numpy; the runtime next to this package (``schedkit_lmdeploy.patches`` and
what it imports) loads none of them, and none of this (``tests/test_units.py`` checks both
in a fresh interpreter).
"""
