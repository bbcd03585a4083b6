"""Best-first exploration of a token tree whose nodes have thousands of children.

Exact Φ and the exact terminal laws expand prefixes most-probable first. Pushing every child of
every expanded prefix onto a heap costs memory per *child* (a free-text state admits ~10⁴
tokens, so 10⁵ expansions would hold 10⁹ heap entries). Here each expanded prefix keeps its
children sorted by log-weight and only its best unexpanded child sits in the heap; popping it
puts the next sibling in. The pop order is the same global best-first order, the heap holds one
entry per expanded prefix, and the unexplored mass is kept per prefix as a suffix log-sum.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["BestFirstFrontier"]


@dataclass
class _Siblings:
    prefix: tuple[int, ...]
    state: Hashable
    base: float  # log-weight of the prefix
    tokens: np.ndarray  # children, most probable first
    log_weights: np.ndarray  # their log-weights relative to the prefix, descending
    suffix: np.ndarray  # suffix[i] = logsumexp(log_weights[i:]), suffix[n] = −inf
    next: int = 0


class BestFirstFrontier:
    """The unexpanded children of expanded prefixes, popped in order of path log-weight.

    Example:
        >>> import numpy as np
        >>> from hf_fvo.phi.frontier import BestFirstFrontier
        >>> f = BestFirstFrontier()
        >>> f.add((), "s0", 0.0, np.array([7, 8]), np.log(np.array([0.25, 0.75])))
        >>> f.pop()[:2]  # the more probable child first
        (-0.2876..., (8,))
        >>> round(float(np.exp(f.log_mass())), 2), len(f)
        (0.25, 1)
    """

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int]] = []
        self._nodes: dict[int, _Siblings] = {}
        self._ids = 0

    def __len__(self) -> int:
        """Prefixes with unexpanded children."""
        return len(self._nodes)

    def add(
        self,
        prefix: tuple[int, ...],
        state: Hashable,
        base: float,
        tokens: np.ndarray,
        log_weights: np.ndarray,
    ) -> None:
        """Register the children of ``prefix`` (log-weights relative to it; −inf ones dropped)."""
        keep = np.isfinite(log_weights)
        if not keep.any():
            return
        order = np.argsort(-log_weights[keep], kind="stable")
        tokens, log_weights = tokens[keep][order], log_weights[keep][order]
        suffix = np.append(np.logaddexp.accumulate(log_weights[::-1])[::-1], -math.inf)
        node_id = self._ids
        self._ids += 1
        self._nodes[node_id] = _Siblings(prefix, state, base, tokens, log_weights, suffix)
        heapq.heappush(self._heap, (-(base + float(log_weights[0])), node_id, node_id))

    def pop(self) -> tuple[float, tuple[int, ...], Any, int]:
        """The best unexpanded child: (its path log-weight, its prefix, the parent's state, the
        token)."""
        _, _, node_id = heapq.heappop(self._heap)
        node = self._nodes[node_id]
        i = node.next
        node.next += 1
        if node.next < len(node.tokens):
            weight = node.base + float(node.log_weights[node.next])
            heapq.heappush(self._heap, (-weight, self._ids, node_id))
            self._ids += 1
        else:
            del self._nodes[node_id]
        token = int(node.tokens[i])
        return node.base + float(node.log_weights[i]), (*node.prefix, token), node.state, token

    def log_mass(self) -> float:
        """log of the total weight of every unexpanded child (−inf when empty)."""
        if not self._nodes:
            return -math.inf
        parts = np.fromiter(
            (n.base + n.suffix[n.next] for n in self._nodes.values()),
            dtype=np.float64,
            count=len(self._nodes),
        )
        return float(np.logaddexp.reduce(parts))
