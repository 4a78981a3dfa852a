"""Checksummed attributes: a group's attributes carry the sha256 of their own canonical JSON.

Attributes hold the layout (``n_rows``...) and the provenance a reader trusts. zarr stores them as plain JSON
with no checksum, so one flipped bit (``n_rows`` 300 -> 200) would silently drop rows; sealed, it is an error.
"""
from __future__ import annotations

import hashlib
import json

from .errors import CorruptStoreError

SEAL_KEY = "attrs_sha256"


def _digest(attrs: dict) -> str:
    body = {k: v for k, v in attrs.items() if k != SEAL_KEY}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def sealed(attrs: dict) -> dict:
    """``attrs`` (as JSON would give them back) plus their seal."""
    plain = json.loads(json.dumps({k: v for k, v in attrs.items() if k != SEAL_KEY}))
    return {**plain, SEAL_KEY: _digest(plain)}


def check(attrs: dict, where: str, **names) -> None:
    """Raise :class:`CorruptStoreError` naming ``where`` unless ``attrs`` match their seal.

    Empty attributes pass: a root group another writer created a moment ago holds nothing yet.
    """
    if not attrs:
        return
    if SEAL_KEY not in attrs:
        raise CorruptStoreError(f"{where}: attributes have no checksum ({SEAL_KEY} missing)", **names)
    if attrs[SEAL_KEY] != _digest(attrs):
        raise CorruptStoreError(f"{where}: attributes fail their checksum (metadata damaged)", **names)
