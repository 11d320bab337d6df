"""Stage 3, training: the local trainer (``python -m bandpo.train``): its settings (`settings`), the loop (`loop`)
and the mechanism probe it measures (`probe`)."""
