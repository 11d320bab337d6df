"""The shared runtime below the stages: what the models, train, score and verl stages run a model with. The lean
forward pass of the tiny Llamas and their loading without transformers (`fastlm`), the sampler's attention step
in C (`ckernel`), the suite's one sampler (`sampling`), AdamW without ``torch.optim`` (`optim`) and the
learning-rate schedule of pretraining and RL (`schedule`). It imports no stage, only `bandpo.core`."""
