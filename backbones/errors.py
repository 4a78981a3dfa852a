"""What can go wrong with a backbone's weights; no torch here, so a command line can name these before it loads one."""
from __future__ import annotations


class WeightsNotFoundError(FileNotFoundError):
    """No weights where the registry, ``--weights``, ``$PRIVLIN_WEIGHTS_DIR`` or the Hugging Face cache says."""


class CheckpointMismatchError(ValueError):
    """The checkpoint's keys or shapes do not fit the architecture (never loaded partially)."""

    def __init__(self, message, *, missing=(), unexpected=(), mismatched=()):
        super().__init__(message)
        self.missing, self.unexpected, self.mismatched = list(missing), list(unexpected), list(mismatched)
