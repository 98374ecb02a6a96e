"""An embedder that counts: the hash embedder, with how many texts it was given."""

from __future__ import annotations

import numpy as np

from dmf_hybrid import HashEmbedder


class CountingEmbedder(HashEmbedder):
    """The hash embedder, counting the texts it embeds (what a real model would have
    computed: a restore, an import or a relay that embeds nothing again shows 0)."""

    def __init__(self) -> None:
        super().__init__()
        self.texts = 0

    def embed(self, texts: list[str]) -> np.ndarray:
        self.texts += len(texts)
        return super().embed(texts)
