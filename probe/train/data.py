"""The training data path: the whole store resident on the device as uint8, batches by index.

A batch is ``torch.randint`` over image indices with a seeded ``torch.Generator`` on the data's device
(i.i.d. with replacement, as disentanglement_lib's input pipeline draws uniformly over the factor grid),
one gather from the resident tensor and one uint8 -> float conversion on the device. No per-item Python,
no worker processes, no host-to-device copies after loading.
"""

from __future__ import annotations

import numpy as np
import torch

from probe.models.base import Batch


class ResidentData:
    """Images [N, C, H, W] uint8 and factors [N, K] int64 held on ``device``."""

    def __init__(self, store, device: torch.device, *, load_block: int = 8192):
        self.store = store
        self.device = torch.device(device)
        n = store.num_images
        h, w, c = store.image_shape
        self.images = torch.empty((n, c, h, w), dtype=torch.uint8, device=self.device)
        for start in range(0, n, load_block):  # block-wise: never two full copies in host memory
            block = np.asarray(store.images[start:start + load_block])
            self.images[start:start + block.shape[0]] = torch.from_numpy(block).to(self.device).permute(0, 3, 1, 2)
        self.factors = torch.as_tensor(store.factors, dtype=torch.long, device=self.device)
        self.strides = torch.as_tensor(store.state_space.strides, dtype=torch.long, device=self.device)
        self.num_images = n

    def to_float(self, images: torch.Tensor) -> torch.Tensor:
        return images.float().div_(255.0)

    def sample(self, batch_size: int, generator: torch.Generator, pair_sampler=None) -> Batch:
        index = torch.randint(self.num_images, (batch_size,), generator=generator, device=self.device)
        factors = self.factors[index]
        batch = Batch(x=self.to_float(self.images[index]), index=index, factors=factors)
        if pair_sampler is not None:
            next_factors = pair_sampler.sample_next(factors, generator)
            if next_factors.shape != factors.shape:
                raise ValueError(f"pair sampler returned shape {tuple(next_factors.shape)}, expected {tuple(factors.shape)}")
            next_factors = next_factors.to(device=self.device, dtype=torch.long)
            # C-order ravel (store grid "C": image i has factors unravel_index(i, factor_sizes))
            next_index = (next_factors * self.strides).sum(1)
            batch.x_next = self.to_float(self.images[next_index])
        return batch

