"""schedkit policies inside SGLang's scheduler (``schedkit-sglang``).

The ``schedkit`` SGLang plugin (``schedkit_sglang.plugin:load``) puts the policies that
``SCHEDKIT_CONFIG``/``SCHEDKIT_POLICY`` select into every scheduler process SGLang starts
(``schedkit serve sglang`` sets them). Importing this package imports neither SGLang nor
torch.
"""

# schedkit serves the names of the adapter's moved modules (``schedkit_sglang.real`` is
# ``schedkit_sglang.harness.real``: ``schedkit._moved``) once it is imported; importing it
# here makes them work in a fresh interpreter too.
import schedkit  # noqa: F401
