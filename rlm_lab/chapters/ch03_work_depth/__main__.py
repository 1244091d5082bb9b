"""``python -m rlm_lab.chapters.ch03_work_depth --size cpu``: make chapter 3's records (see :func:`.run.main`)."""

from .run import main

raise SystemExit(main())
