"""Shared test set-up."""

import torch

# One intra-op thread: on a loaded 2-core machine, torch's thread pool spins and small
# tensor ops get ~100x slower; one thread also makes float reductions reproducible.
torch.set_num_threads(1)
