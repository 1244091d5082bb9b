"""RL post-training frameworks: the registry of their knobs (:mod:`.registry`) and config importers (:mod:`.importers`)."""
