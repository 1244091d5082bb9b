"""``python -m rlm_lab.chapters.ch02_anatomy --size cpu``: make chapter 2's records (see :func:`.run.main`)."""

from .run import main

raise SystemExit(main())
