"""BandPO-Bench: ratio-clipping methods for LLM reinforcement learning, benchmarked reproducibly."""

__version__ = "0.1.0"
