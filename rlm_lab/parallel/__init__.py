"""Intra-model parallelism on ``torch.distributed``.

The mechanism, one small module per parallelism, each a function applied to a model:
``data_parallel`` (DDP), ``fsdp`` (ZeRO-1 via ZeroRedundancyOptimizer, ZeRO-2/3 via FSDP2),
``tensor_parallel`` (TP and SP), ``pipeline_parallel`` (PP), ``context_parallel`` (ring attention),
``expert_parallel`` (EP), composed by ``parallelize`` in one fixed order; ``mesh`` (layouts, their
validation, the DeviceMesh), ``launch`` (processes and their failures), ``comm_counter`` (what a rank
sends) and ``predict`` (a layout's collectives from the formulas). ``cli`` is ``rlm-lab parallel``.

The harness that measures a layout (verify against one process, count, record, predict its step time; the
PP, CP and EP measurements; the end-to-end Trainer runs) is ``rlm_lab.parallel.bench``; chapter 4's experiment
(its layouts, runs, comparison and report) is ``rlm_lab.chapters.ch04_parallelism``.
"""
