"""rlm_lab: predict, measure and compare RL post-training of small reasoning language models.

The package is the tested truth behind the book: notebooks import it and stay thin.
Heavy dependencies (torch, transformers, trl) are imported inside the modules that need them,
so `rlm_lab.cost` and the plotting code stay importable and fast on any machine.
"""

__version__ = "0.1.0"
