"""Stage 2, models: the tiny base models built and pretrained here (`tiny`), a hub snapshot or a package-index
model (`pypi`) downloaded, and what reads them fast: the lean forward pass (`fastlm`), the suite's one sampler
(`sampling`) and AdamW (`optim`) (``python -m bandpo.models``)."""
