"""The simulated KV cache: paged blocks with prefix caching (:mod:`.cache`), their records (:mod:`.blocks`), and eviction in a policy's ``eviction_key`` order (:mod:`.evict_keys`)."""
