"""Stage 1, data: the generated tiny-math testbed with its probe variant, and the paper's real data sets normalised
to one JSONL schema (``python -m bandpo.data``)."""
