"""Chapter 9: the practical guidelines as claims that can fail, each judged from the records and the predictor at
build time, the advisor's decision map, and the results page (every taxonomy item, predicted against measured).

Modules, in order: :mod:`.cases` (the guideline registry ``data/guidelines/``, the taxonomy items, the grid),
:mod:`.run` (evidence read from the records, predictions at scale, the decision grid), :mod:`.compare` (the
verdicts, computed from intervals only) and :mod:`.report` (tables, figures, the closing list). Everything this
chapter takes from other chapters and from the cost model is imported in :mod:`.upstream`, and only there;
:mod:`.history` keeps the verdicts before issue 36's interval rules for the closing note's before/after table.
"""
