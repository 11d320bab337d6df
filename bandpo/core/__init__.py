"""The ground floor: what every stage shares. File writes that a crash cannot leave half done (`files`,
`atomic_dir`), settings given by name on a command line (`options`), where a number came from (`provenance`), the
CPU kernels every job runs (`numerics`) and the run-output contract every trainer writes (`run_contract`). Nothing
here imports another stage."""
