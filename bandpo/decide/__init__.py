"""The decisions the DAG feeds back into its own jobs, made from the scores of the jobs before them:

    selection  an experiment's ``select`` rule: the setting it picks from its axis's scores, written as the settings
               file that experiment's training jobs read (``--set-file``), beside the table the rule read
    rank       a new method entry ranked against the published runs without rerunning them: whether the base
               models built here are the published ones (``base-check``, which decides whether GRPO must be trained
               again), then the entry paired with GRPO's runs (``rank``)
    looks      a sequential primary's look: the verdict rule on the seeds run so far, which decides whether the DAG
               trains the next look's seeds (workflow/rules/looks.smk, a Snakemake checkpoint)
    cli        ``python -m bandpo.decide select|base-check|rank|look`` (workflow/rules/report.smk, rank.smk, looks.smk)

They read files only, like the report (`bandpo.analysis` computes their statistics), and import no method
registry and no torch.
"""
