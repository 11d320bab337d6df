"""The statistics home: every test, design, power and sample-size calculation the benchmark decides with. Pure
numpy and scipy, on the floor just above `bandpo.core`, so that every stage that decides uses one package: the run
plan's check of a design, the DAG's looks (`bandpo.decide.looks`), the report (`bandpo.analysis`), ``rank`` and the
recipe check of speed-ups. The rule itself: docs/statistics.md, "The verdict rule and seeds until decided".

    rule      the verdict rule's two words, `decide` (a sequential design on the pairs run so far) and
              `fixed_n_decision` (the single look of a secondary), their tests from a summary (`one_sided_tests`,
              `rule_verdict`), Holm's adjustment of a family (`holm`), `t_interval` (the estimate's interval),
              and the descriptive four verdicts of the random-reward control (`paired_tests`, `four_verdict`)
    design    `SequentialDesign`: a look every k pairs up to n_max, Lan-DeMets spending of alpha and beta, the
              boundaries on the paired t statistic (`boundaries`), `plan_design`
    power     the exact power and minimum detectable difference of the paired t test, and `pairs_needed`: the one
              sample-size function (the rule's single look, or the power table's two-sided yardstick)
    simulate  the realised error rates and expected pairs (`operating_characteristics`) and the stability of a
              verdict (`stability`): the probability that two independent reruns give the same one
    resample  the seeded percentile bootstrap, the IQM and the probability of improvement (rliable's statistics)
"""
