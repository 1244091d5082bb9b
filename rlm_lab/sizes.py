"""The three run sizes every notebook and command accepts: one parameter, same code.

- ``smoke``: CI, seconds per notebook on 2 CPU cores.
- ``cpu``: minutes on a laptop (2+ cores).
- ``gpu``: Colab / one H100 / a multi-GPU box.
"""

import os

from .errors import unknown

SIZES = ("smoke", "cpu", "gpu")
ENV_VAR = "RLM_SIZE"


def check_size(size: str) -> str:
    if size not in SIZES:
        raise unknown("size", size, SIZES)
    return size


def size_from_env(default: str = "smoke") -> str:
    """The size a notebook runs at: ``$RLM_SIZE`` if set, else ``default``."""
    return check_size(os.environ.get(ENV_VAR, default))
