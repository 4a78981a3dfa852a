"""DP-MAE's own error types, free of torch so the command line can name them as user errors before torch loads."""
from __future__ import annotations

__all__ = ["CheckpointWriteError", "UnsupportedModuleError"]


class CheckpointWriteError(OSError):
    """A checkpoint, export or provenance file could not be written (disk full, no permission, I/O error).

    Its message names the file; the previous file at that path, if any, is intact and no temporary file is left.
    """


class UnsupportedModuleError(NotImplementedError):
    """The fast path does not know how to clip a module's per-example gradients."""
