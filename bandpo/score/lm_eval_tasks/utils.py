"""Hooks of the suite's lm-eval tasks (referenced as ``!function utils.<name>`` by the YAMLs in this folder).

The logic lives in `bandpo.score.evaluate` (tested there); this file only re-exports it, because lm-eval resolves
``!function`` against a ``utils.py`` next to the YAML.
"""

from bandpo.data.tiny_math import answer_line_shots
from bandpo.score.evaluate import keep_all_samples, probe_docs, process_results, rest_docs

__all__ = ["answer_line_shots", "keep_all_samples", "probe_docs", "process_results", "rest_docs"]
