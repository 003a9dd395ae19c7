"""The pure math every engine uses: losses, the optimizer, sampling filters and input checks.

Nothing here touches a model or builds a batch: each engine prepares its own tensors (the
torch engine in engine/batch.py, engine/train_step.py) and calls these functions on them;
the shapes are in each function's comments (``[B, T]``: datums × positions). The torch
engine (:mod:`localsession.engine`) and the fakes' numeric engine (:mod:`fakes.engine`)
both import these modules, so neither engine depends on the other. :mod:`.inputs` is
torch-free (the checks on an op's inputs, shared with the fakes' light engine);
:mod:`.losses`, :mod:`.sequence_losses`, :mod:`.optim`, :mod:`.adamw`, :mod:`.flat_group`
and :mod:`.filters` import torch only; :mod:`.dro_loss` and :mod:`.prefix_groups` nothing.
"""
