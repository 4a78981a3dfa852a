"""``python -m privlin.audit``: :func:`privlin.audit.cli.main`."""
from .cli import main

raise SystemExit(main())
