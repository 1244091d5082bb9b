"""The book's chapters, one package each: ``chNN_slug/`` with its modules cases -> run -> compare -> report.

A chapter package reads the committed records and asks the predictor; the mechanisms it measures live in the
layers below (``rlm_lab.LAYERS``).
"""
