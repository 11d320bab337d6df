"""The ground floor: what every stage shares. File writes that a crash cannot leave half done (`files`,
`atomic_dir`), settings given by name on a command line (`options`), where a number came from (`provenance`), the
CPU kernels every job runs (`numerics`), the run-output contract every trainer writes (`run_contract`), the
training protocol both trainers share (`protocol`) and the equivalence atlas's table that its measurement writes and
the report reads (`atlas_table`). Nothing here imports another stage."""
