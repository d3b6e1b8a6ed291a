"""schedkit policies inside LMDeploy's PyTorch-engine scheduler (``schedkit-lmdeploy``).

``schedkit_lmdeploy.patches.install(scheduler, facade)`` puts a policy into one LMDeploy
``Scheduler``; ``activate_from_environ()`` does so for every scheduler an engine process
builds when ``SCHEDKIT_CONFIG``/``SCHEDKIT_POLICY`` selects a policy (``schedkit serve
lmdeploy`` sets them). Importing this package imports neither LMDeploy nor torch.
"""
