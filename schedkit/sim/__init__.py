"""The simulated engine: continuous batching with vLLM V1's scheduling semantics
(:mod:`.engine`, its requests, waiting queue and view in :mod:`.request`, :mod:`.waiting`,
:mod:`.view`), its KV cache (:mod:`.kv`), step times (:mod:`.cost`), and a cluster of
replicas behind a router (:mod:`.cluster`)."""
