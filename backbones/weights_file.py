"""Where a backbone's weights file is: ``--weights``, ``$PRIVLIN_WEIGHTS_DIR`` or the bundled folder.

No torch here: ``featurize`` finds (or names the missing) file before it loads torch, so a wrong path is answered
at once; :mod:`backbones.checkpoints` reads the file it finds.
"""
from __future__ import annotations

import os
from pathlib import Path

from .errors import WeightsNotFoundError
from .registry import WEIGHTS_DIR_ENV, BackboneConfig

BUNDLED_DIR = Path(__file__).resolve().parent / "weights"


def resolve_weights(config: BackboneConfig, weights: str | os.PathLike | None = None) -> Path | None:
    """The weights file for ``config``: ``weights`` if given, else ``$PRIVLIN_WEIGHTS_DIR/<file>``, else bundled.

    Returns None for backbones without weights (``pixels``).

    Raises
    ------
    WeightsNotFoundError
        Naming the file and the places it was looked for.
    """
    if config.weights_format == "none":
        if weights is not None:
            raise ValueError(f"backbone {config.name!r} takes no weights, got --weights {weights}")
        return None
    if weights is not None:
        path = Path(weights).expanduser()
        if not path.is_file():
            raise WeightsNotFoundError(f"weights file {str(path)!r} for backbone {config.name!r} does not exist")
        return path
    looked = []
    env_dir = os.environ.get(WEIGHTS_DIR_ENV)
    if env_dir:
        path = Path(env_dir).expanduser() / config.weights_file
        if path.is_file():
            return path
        looked.append(str(path))
    if config.bundled:
        path = BUNDLED_DIR / config.weights_file
        if path.is_file():
            return path
        looked.append(str(path))
    where = f"looked in: {', '.join(looked)}" if looked else f"${WEIGHTS_DIR_ENV} is not set"
    raise WeightsNotFoundError(
        f"no weights for backbone {config.name!r}: put {config.weights_file!r} in the directory named by "
        f"${WEIGHTS_DIR_ENV}, or pass --weights PATH ({where}). Weights are never downloaded; "
        f"the file comes from {config.weights_source or 'its publisher'}.")
