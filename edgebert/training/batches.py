"""Which examples each optimizer step trains on: an endless, seeded, resumable stream of indices.

``ShuffledBatches`` draws ``batch_size`` example indices per step from a fresh permutation per epoch
(seeded by seed and epoch); ``LengthGroupedBatches`` also sorts chunks of that permutation by length,
so a batch pads little. Every example drawn has a key (its position in the stream) that a task may use
to seed per-example randomness (e.g. MLM masking). The position is the whole resume state.
"""

from __future__ import annotations

import numpy as np

from edgebert.errors import CheckpointError, ConfigError


class ShuffledBatches:
    """Endless stream of example indices, a fresh permutation per epoch (seeded by seed and epoch).

    ``next_batch`` returns the next ``batch_size`` indices (a batch may span two epochs) and their
    keys (positions in the stream). The position is the whole state: resume by loading it.
    """

    def __init__(self, num_examples: int, batch_size: int, seed: int):
        if num_examples < 1:
            raise ConfigError("there are no training examples")
        self.num_examples, self.batch_size, self.seed = num_examples, batch_size, seed
        self.position = 0  # examples drawn so far
        self._perm_epoch, self._perm = -1, np.arange(0)

    def _permutation(self, epoch: int) -> np.ndarray:
        if epoch != self._perm_epoch:
            self._perm = np.random.default_rng([self.seed, epoch]).permutation(self.num_examples)
            self._perm_epoch = epoch
        return self._perm

    @property
    def epoch(self) -> float:
        return self.position / self.num_examples

    def next_batch(self) -> tuple[list[int], list[int]]:
        indices, keys = [], []
        for _ in range(self.batch_size):
            epoch, offset = divmod(self.position, self.num_examples)
            indices.append(int(self._permutation(epoch)[offset]))
            keys.append(self.position)
            self.position += 1
        return indices, keys

    def state_dict(self) -> dict[str, int]:
        return {"position": self.position, "num_examples": self.num_examples}

    def load_state_dict(self, state: dict[str, int]) -> None:
        if int(state["num_examples"]) != self.num_examples:
            raise CheckpointError(
                f"the checkpoint was trained on {state['num_examples']} examples, this run has "
                f"{self.num_examples}", "resume with the same data and settings")
        self.position = int(state["position"])


class LengthGroupedBatches(ShuffledBatches):
    """``ShuffledBatches`` whose per-epoch order puts examples of similar length next to each other.

    The epoch's permutation (seeded by seed and epoch, as the base class) is cut into chunks of
    ``batch_size * group_size`` examples, each sorted by length (longest first). Still a pure
    function of (seed, epoch), so the stream position remains the whole resume state.
    """

    def __init__(self, lengths: np.ndarray, batch_size: int, seed: int, group_size: int = 50):
        super().__init__(len(lengths), batch_size, seed)
        self.lengths = np.asarray(lengths)
        self.chunk = max(1, batch_size * group_size)

    def _permutation(self, epoch: int) -> np.ndarray:
        if epoch != self._perm_epoch:
            perm = np.random.default_rng([self.seed, epoch]).permutation(self.num_examples)
            for start in range(0, len(perm), self.chunk):
                part = perm[start:start + self.chunk]
                perm[start:start + self.chunk] = part[np.argsort(-self.lengths[part], kind="stable")]
            self._perm, self._perm_epoch = perm, epoch
        return self._perm
