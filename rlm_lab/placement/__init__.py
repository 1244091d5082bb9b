"""Placements of the models of an RL step on devices (spec) and their Ray runtime."""
