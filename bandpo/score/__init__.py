"""Stage 4, scoring: lm-eval runs a checkpoint on the task YAMLs of `lm_eval_tasks` with k samples per problem
(``python -m bandpo.score``; `evaluate`) and its aggregated file is read back (`lm_eval_results`)."""
