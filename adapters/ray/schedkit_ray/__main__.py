"""``python -m schedkit_ray serve ...`` (``schedkit_ray.cli``)."""

from __future__ import annotations

import sys

from schedkit_ray.cli import main

sys.exit(main())
