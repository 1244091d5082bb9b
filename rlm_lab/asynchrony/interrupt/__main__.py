"""``python -m rlm_lab.asynchrony.interrupt --size cpu --out DIR``: the measurement of :mod:`.cost`."""

from .cost import main

raise SystemExit(main())
