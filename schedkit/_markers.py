from __future__ import annotations

import pluggy

from schedkit.hookspecs import PROJECT

hookimpl = pluggy.HookimplMarker(PROJECT)
