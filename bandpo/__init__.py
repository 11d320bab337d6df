"""BandPO-Bench: ratio-clipping methods for LLM reinforcement learning, benchmarked reproducibly.

Importing the package fixes the numerics of the process before any of its modules imports torch
(`bandpo.core.numerics`: the same seed gives the same bits on any x86-64 CPU with AVX2; ``BANDPO_NUMERICS=native``
opts out).
"""

from bandpo.core import numerics as _numerics

_numerics.apply()

__version__ = "0.1.0"
