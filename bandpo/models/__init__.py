"""Stage 2, models: the tiny base models built and pretrained here (`tiny`), a hub snapshot (`hub`) or a
package-index model (`pypi`) downloaded (``python -m bandpo.models``). What runs a model (the sampler, the lean
forward pass, the optimiser) is the shared runtime, `bandpo.runtime`."""
