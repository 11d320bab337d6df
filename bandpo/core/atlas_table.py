"""The equivalence atlas's table, ``atlas.csv``: its columns, sources and slices.

The training stage measures it (`bandpo.train.atlas`: the clipping rules evaluated on a trainer's real rollouts)
and the report reads it (`bandpo.analysis.load.load_atlas`, rendered by `bandpo.report.atlas`) without importing
the trainer or torch, so the table's shape is defined here, where both can import it.

One row per (pair of rules, source, slice):

    pair, rule_a, rule_b      the pair's id and each rule's label (method, parameters, dual clip)
    source                    synthetic (a grid of (p, r, sign of A)) | real (the testbed's rollouts)
    slice                     all | adv>0 | adv<0 | p<0.2 | p>=0.2 (p: the token's old probability)
    tokens                    valid tokens with A != 0 in the slice (A = 0 tokens get no gradient from any rule)
    stopped_a, stopped_b      tokens each rule stops (d loss / d log pi = 0 while A != 0)
    stopped_both, stopped_only_a, stopped_only_b
    grad_differ               tokens where |g_a - g_b| > atol + rtol max(|g_a|, |g_b|), g = d loss / d log pi
    grad_max_abs_diff         max |g_a - g_b| over the slice (per-token loss, token-sum: g = dL_t / d log pi_t)
    predicted                 tokens inside the region where the derivation says the rules differ
    unexplained               tokens where the measured difference (a stop-set or gradient difference) and the
                              derived region disagree: a difference outside it, or none inside it
    batches                   mini-batches the real rows were measured on (0 for the synthetic grid)
"""

COLUMNS = ("pair", "rule_a", "rule_b", "source", "slice", "tokens", "stopped_a", "stopped_b", "stopped_both",
           "stopped_only_a", "stopped_only_b", "grad_differ", "grad_max_abs_diff", "predicted", "unexplained",
           "batches")  # fmt: skip
SOURCES = ("synthetic", "real")
STEPS = 6  # training steps whose mini-batches the atlas measures (fewer when the run itself has fewer)
SLICES = ("all", "adv>0", "adv<0", "p<0.2", "p>=0.2")
