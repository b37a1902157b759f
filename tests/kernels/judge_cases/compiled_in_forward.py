import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """A PyTorch-level rewrite that leaves a library worker thread alive (not candidate code)."""

    def __init__(self, scale):
        super().__init__()
        self.scale = scale
        from concurrent.futures import ThreadPoolExecutor

        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="library-pool")

    def forward(self, x, y):
        self._pool.submit(lambda: None)  # starts the pool's worker, which then waits for work
        return torch.clamp_min(torch.mm(x, y), 0) * self.scale
