"""Errors a feature-store user can catch by name."""


class StoreError(Exception):
    """Base class of every error the feature store raises on its own."""


class CorruptStoreError(StoreError):
    """A chunk failed its crc32c check, or metadata is unreadable.

    Raised instead of returning the damaged bytes as data.
    """

    def __init__(self, message, *, split=None, shard=None, array=None):
        super().__init__(message)
        self.split, self.shard, self.array = split, shard, array


class IncompleteStoreError(StoreError):
    """A split is read before every shard was written and marked done."""


class ShardClaimedError(StoreError):
    """Another writer owns this shard: two writers on one shard would lose data."""


class NotAStoreError(StoreError):
    """A path that is no feature store at all (a file): a usage mistake, like a path that does not exist."""
