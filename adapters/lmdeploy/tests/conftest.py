"""The LMDeploy adapter's tests run LMDeploy's real ``Scheduler`` model-less on CPU
(``schedkit_lmdeploy.harness``): LMDeploy's engine has no CPU backend, so nothing here
loads a model. Warnings LMDeploy's imports print (torch version pins) are harmless."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
