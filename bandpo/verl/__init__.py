"""Stage 3, training with verl: the methods as verl policy losses (`plugin`), the command of verl's trainer
(`command`), its CPU platform and rollout server (`cpu`), its parquet data (`data`) and the merge of its
checkpoint into the run contract (`merge`). Inside this package ``import verl`` is verl itself."""
