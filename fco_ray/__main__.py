"""`python -m fco_ray ...` is `fco-ray ...` (e.g. as a `ray job submit` entrypoint)."""
from .cli import main

raise SystemExit(main())
