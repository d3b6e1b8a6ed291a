"""The A/B bench: one request stream through several arms (:mod:`.arms`: a policy and
its engine settings), run by :mod:`.runner` on the simulator or on :mod:`.engines`; what
the numbers say (:mod:`.stats`), what a reader sees (:mod:`.report`, written by
:mod:`.output`), load sweeps (:mod:`.sweep`) and capacity plans (:mod:`.plan`)."""
