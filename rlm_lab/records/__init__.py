"""Run records: one folder per run with ``record.json`` (status, config, provenance, results) and
``metrics.jsonl``. ``files`` (atomic writes, JSONL), ``provenance``, ``lock`` (one writer per folder),
``read`` (which records count as finished runs), ``lifecycle`` (:class:`RunRecord`).
``rlm_lab.record`` is the public face of this package."""
