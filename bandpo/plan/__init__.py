"""Stage 0, the plan: the workflow config validated (`validate`), the sweep it describes listed for the rules
(`sweep`), each rule's command line and environment (`jobs`), the DAG's cost model (`budget`) and stale lock
files (`run_lock`). It sits on the top floor but one: validating a config asks every stage below whether it
knows the settings."""
