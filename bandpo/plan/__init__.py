"""The run plan: the workflow config read once into every job of the DAG. `validate` checks and completes the config
(schema, cross references, the method registry), `sweep` lists the runs, slots and folders it describes, `runs`
builds each job's typed settings and writes the spec file its job reads, `budget` estimates a run's cost, `run_lock`
clears the lock files of a killed run. It stands above the stages whose jobs it plans (train, verl, score), whose
settings dataclasses it builds."""
