"""schedkit-ray: schedkit's ``route_request`` as a Ray Serve request router.

- ``router``: ``SchedkitRouter``, the request router (imports Ray);
- ``app``, ``replica``: the Ray Serve application of simulated replicas;
- ``cli``: ``python -m schedkit_ray serve``;
- ``policy``, ``views``, ``prefix``: the policy's facade and views (no Ray).

Nothing here imports Ray until one of ``router``, ``app`` or ``replica`` is imported.
"""

from __future__ import annotations

__all__: list[str] = []
