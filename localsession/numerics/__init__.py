"""The pure math both engines use: losses, the optimizer, datum parsing and sampling filters.

Nothing here touches a model. The torch engine (:mod:`localsession.engine`) and the fakes'
numeric engine (:mod:`fakes.engine`) both import these modules, so neither engine depends on
the other. :mod:`.inputs` is torch-free (the checks on an op's inputs, shared with the fakes'
light engine); :mod:`.losses`, :mod:`.optim`, :mod:`.datums`, :mod:`.filters` and
:mod:`.adamw` import torch only.
"""
