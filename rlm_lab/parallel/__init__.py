"""Intra-model parallelism on ``torch.distributed``: one small module per parallelism."""
