"""Chapter 7's sizes: how many prompts, rows and repeats each technique's measurement uses, from the one
registry (``rlm_lab.sizes``, field ``long_tail``)."""

from __future__ import annotations

from ...sizes import get


def params(size: str) -> dict:
    return dict(get(size).long_tail)
