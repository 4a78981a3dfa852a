"""``python -m privlin.audit``: :func:`privlin.audit.cli.main`."""
from .cli import main

if __name__ == "__main__":
    raise SystemExit(main())
