"""The verdict rule every comparison with the control uses (docs/statistics.md, "The verdict rule and seeds until
decided"): is the treatment better than the control by at least the margin? Pure numpy and scipy, on the floor just
above `bandpo.core`, so that every stage that decides uses one module: the run plan's check of a design, the DAG's
looks (`bandpo.decide.looks`), the report (`bandpo.analysis`), ``rank`` and the recipe check of speed-ups.

    design    `SequentialDesign`: a look every k pairs up to n_max, Lan-DeMets spending of alpha and beta, the
              boundaries on the paired t statistic (`boundaries`), `plan_design`
    rule      the two words and `decide` (a sequential design on the pairs run so far), `fixed_n_decision` (the
              single look of a secondary), `t_interval` (the estimate's interval)
    simulate  the realised error rates and expected pairs (`operating_characteristics`) and the stability of a
              verdict (`stability`): the probability that two independent reruns give the same one
"""
