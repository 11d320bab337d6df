"""Stage 3, training with verl, and everything the suite knows of verl: the policy losses verl ships as methods
of the registry (`losses`, loaded by `bandpo.methods.registry.load_builtin_methods`), the registry's methods as
verl policy losses (`plugin`, verl's entry point), the command of verl's trainer (`command`), its CPU platform and
rollout server (`cpu`), its parquet data (`data`) and the merge of its checkpoint into the run contract (`merge`).
Inside this package ``import verl`` is verl itself."""
