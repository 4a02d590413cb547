"""The README's first command: DFPO trained on a real pretrained model through verl's whole trainer, on CPU.

``python -m quickstart`` (``scripts/quickstart.sh`` sets up the environment first) runs
:mod:`quickstart.pipeline`: the data and the model of :mod:`cpu_examples`, a DFPO run and a GSPO
run through ``python -m dfpo.main``, held-out accuracy before and after, and the figures.
"""
