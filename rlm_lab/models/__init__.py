"""Tiny decoder-only models built offline (see ``zoo``) and their character tokenizer."""

from .tokenizer import ALPHABET, char_tokenizer
from .zoo import ZOO, ZooSpec, build_model, check_model, count_parameters, describe, load, make_config, save

__all__ = [
    "ALPHABET", "ZOO", "ZooSpec", "build_model", "char_tokenizer", "check_model", "count_parameters",
    "describe", "load", "make_config", "save",
]
