"""The chapters' own packages, one per chapter (``chNN_name/``: cases -> run -> compare -> report), at the
chapters' layer of :data:`rlm_lab.LAYERS`: each uses the mechanisms below it and is used only by entry points
and notebooks."""
