"""The ground floor: what every stage shares. File writes that a crash cannot leave half done (`files`,
`atomic_dir`), settings given by name on a command line (`options`), where a number came from (`provenance`), the
CPU kernels every job runs (`numerics`), the run-output contract every trainer writes (`run_contract`), the
equivalence atlas's table that its measurement writes and the report reads (`atlas_table`) and the learning-rate
schedule (`schedule`). Nothing here imports another stage."""
