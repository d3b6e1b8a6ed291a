"""schedkit policies inside LMDeploy's PyTorch-engine scheduler (``schedkit-lmdeploy``).

``schedkit_lmdeploy.patches.install(scheduler, facade)`` puts a policy into one LMDeploy
``Scheduler``; ``activate_from_environ()`` does so for every scheduler an engine process
builds when ``SCHEDKIT_CONFIG``/``SCHEDKIT_POLICY`` selects a policy (``schedkit serve
lmdeploy`` sets them). Importing this package imports neither LMDeploy nor torch.
"""

# schedkit serves the names of the adapter's moved modules (``schedkit_lmdeploy.contract``
# is ``schedkit_lmdeploy.harness.contract``: ``schedkit._moved``) once it is imported;
# importing it here makes them work in a fresh interpreter too.
import schedkit  # noqa: F401
