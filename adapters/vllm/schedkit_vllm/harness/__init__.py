"""What schedkit's tests and bench drive vLLM with; vLLM's engine process never imports it.

``contract`` (the contract suite's driver), ``twin`` (``--engine vllm-twin``: the real
scheduler with the cost model as clock), ``modelless`` (vLLM's scheduler built without a
model or workers) and ``real`` (``--engine vllm``: the real-engine bench arm). They load
the simulator, the bench and the workload model; the runtime next to this package
(``schedkit_vllm.Scheduler`` and what it imports) loads none of them, and none of this
(``tests/test_units.py`` checks both in a fresh interpreter).
"""
