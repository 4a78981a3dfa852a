"""Checkpoints in the ViP release layout, and the encoder export the registry loads.

A training checkpoint is ``{"model": MAE state dict (encoder keys as timm ViT,
decoder_* and mask_token), "optimizer", "step", "rng", "accountant", "config",
"history"}``: everything to resume the run. No secret key, sampler seed or
noise state is ever in it. A DP run's holds nothing computed from private
images but the weights and the optimizer state: no generator state (its masks
are keyed by the public seed and the step, so no stream carries the sample
sizes) and no loss history (``None``: its losses are noise-free). A
non-private run's holds its public generator states and its loss history.
The weights before the end are as private as the data; what gets released is
:func:`export_encoder`'s ``{"model": encoder only}``.

Writes are atomic and durable (temporary file, fsync, ``os.replace``): a
crash leaves the previous checkpoint intact, and a failed write (a full disk)
leaves no temporary file and raises :class:`CheckpointWriteError` naming the
file. Every file carries a sha256 of its content
(``"sha256"`` over the whole training checkpoint, ``"tensor_sha256"`` over an
exported encoder's tensors, :func:`backbones.checkpoints.tensor_sha256`),
verified on every load: a damaged file is an error naming it, never weights.
"""
from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os

import torch

from ..checkpoints import sha256_file, tensor_sha256
from .errors import CheckpointWriteError
from .model import MAEConfig, MaskedAutoencoder, encoder_state_dict

__all__ = ["CheckpointWriteError", "remove_stale_temporaries", "save_checkpoint", "load_checkpoint", "export_encoder",
           "load_mae_weights", "sha256_file", "tensor_sha256", "STEP_JOURNAL", "write_step_journal",
           "read_step_journal"]

#: File name, in a DP run's ``--out``, of its step journal (:func:`write_step_journal`).
STEP_JOURNAL = "dp_steps.json"


def _atomic_write(path: str, write) -> None:
    """Write ``path`` atomically and durably: ``write(f)`` into a temporary file beside it, fsync, ``os.replace``,
    fsync the folder.

    A crash leaves the previous file intact; a failed write (a full disk) removes the temporary file and raises
    :class:`CheckpointWriteError` naming ``path``, so repeated attempts leave nothing behind.
    """
    folder = os.path.dirname(os.path.abspath(path))
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        os.makedirs(folder, exist_ok=True)
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        cause = _os_error(e)  # torch.save reports a failed write as a RuntimeError raised while handling it
        if cause is None:
            raise
        reason = cause.strerror or str(cause) or type(cause).__name__
        raise CheckpointWriteError(cause.errno, f"cannot write {path}: {reason} (any previous file there is "
                                                f"intact)") from None
    with contextlib.suppress(OSError):  # the rename itself onto the disk (best effort: not every file system can)
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _os_error(e: BaseException | None, depth: int = 0) -> OSError | None:
    """The OSError in ``e``'s chain of causes (itself first), or None."""
    if e is None or depth > 8:
        return None
    if isinstance(e, OSError):
        return e
    return _os_error(e.__cause__, depth + 1) or _os_error(e.__context__, depth + 1)


def remove_stale_temporaries(path: str) -> list[str]:
    """Delete the ``<path>.tmp<PID>`` files of writers that were killed mid-write (their PID runs no more).

    A kill -9 cannot clean up after itself; a run calls this at its start so that kills do not pile temporary
    files up. A live writer's file (another process, or this one) is left alone. Returns the paths removed.
    """
    removed = []
    for tmp in glob.glob(glob.escape(path) + ".tmp*"):
        pid = tmp[len(path) + len(".tmp"):]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:  # no such process: the writer is gone
            with contextlib.suppress(FileNotFoundError):
                os.remove(tmp)
                removed.append(tmp)
        except PermissionError:  # alive, another user's
            pass
    return removed


def _atomic_save(obj, path: str) -> None:
    """``torch.save`` through :func:`_atomic_write`."""
    _atomic_write(path, lambda f: torch.save(obj, f))


def save_checkpoint(path: str, *, model: MaskedAutoencoder, optimizer, step: int, rng: dict,
                    accountant: dict | None, config: dict, history: list | None) -> None:
    """Write a resumable checkpoint atomically.

    Parameters
    ----------
    rng : dict[str, torch.Tensor]
        ``torch.Generator.get_state()`` of the run's public generators carried across steps (none in a DP run).
    history : list or None
        ``[step, mean loss, epsilon]`` rows of a non-private run; None for a DP run (noise-free losses are
        statistics of private images).
    accountant : dict or None
        :class:`backbones.mae.dp.DPAccountantState` as a dict (None when non-private).
    config : dict
        Training settings, including ``"mae"`` (the :class:`MAEConfig` fields).
    """
    payload = {"model": _cpu(model.state_dict()), "optimizer": _cpu(optimizer.state_dict()), "step": int(step),
               "rng": rng, "accountant": accountant, "config": config, "history": history}
    payload["sha256"] = tensor_sha256(payload)
    _atomic_save(payload, path)


def _cpu(tree):
    if isinstance(tree, torch.Tensor):
        return tree.detach().cpu()
    if isinstance(tree, dict):
        return {k: _cpu(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_cpu(v) for v in tree]
    return tree


def _read(path: str):
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no checkpoint at {path!r}")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # truncated, not a zip, pickle with code in it
        raise ValueError(f"{path!r} is damaged or not a weights-only torch file ({type(e).__name__}: "
                         f"{str(e).splitlines()[0][:160]})") from None


def load_checkpoint(path: str) -> dict:
    """Load a training checkpoint written by :func:`save_checkpoint`, verifying its sha256.

    Raises
    ------
    FileNotFoundError
        No file at ``path``.
    ValueError
        The file is damaged (unreadable, or its content does not match its sha256) or carries no sha256.
    """
    ck = _read(path)
    if not isinstance(ck, dict) or "sha256" not in ck:
        raise ValueError(f"{path!r} carries no sha256 (not a DP-MAE training checkpoint, or written before "
                         f"checkpoints had one): cannot verify it")
    recorded = ck.pop("sha256")
    if tensor_sha256(ck) != recorded:
        raise ValueError(f"{path!r} is damaged: its content does not match the sha256 stored in it")
    return ck


def load_mae_weights(model: MaskedAutoencoder, path: str) -> list[str]:
    """Initialize ``model`` from a ViP-layout file (full MAE or encoder only).

    Returns the keys left at their fresh initialization (the decoder, when the
    file holds an encoder only). Encoder keys must all be present and match.
    """
    raw = _read(path)
    if isinstance(raw, dict) and "optimizer" in raw:  # a training checkpoint
        raw = load_checkpoint(path)
    elif isinstance(raw, dict) and "tensor_sha256" in raw and tensor_sha256(raw.get("model")) != raw["tensor_sha256"]:
        raise ValueError(f"{path!r} is damaged: the sha256 of its tensors does not match the one stored in it")
    state = raw.get("model", raw) if isinstance(raw, dict) else raw
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ValueError(f"{path!r} does not hold a MAE or encoder state dict")
    own = model.state_dict()
    missing_encoder = [k for k in encoder_state_dict(own) if k not in state]
    if missing_encoder:
        raise KeyError(f"{path!r} lacks encoder keys {missing_encoder[:5]}...")
    cast = {k: v.to(own[k].dtype) for k, v in state.items() if k in own}
    bad = [k for k, v in cast.items() if v.shape != own[k].shape]
    if bad:
        raise ValueError(f"{path!r} does not match the architecture: shape mismatch for {bad[:5]}")
    model.load_state_dict(cast, strict=False)
    return [k for k in own if k not in state]


def export_encoder(model: MaskedAutoencoder, path: str, dtype: torch.dtype = torch.float16,
                   provenance: dict | None = None) -> str:
    """Write ``{"model": encoder state dict, "tensor_sha256": ...}`` (ViP release layout) and its provenance JSON.

    The file loads with ``torch.load(weights_only=True)`` and, cast to float32,
    into ``timm VisionTransformer(**cfg.timm_kwargs())`` with ``strict=True``;
    :func:`backbones.checkpoints.read_checkpoint` verifies ``tensor_sha256``.

    Returns
    -------
    str
        The sha256 of the written file (also stored in ``<path>.json`` / ``<stem>.json``).
    """
    enc = {k: v.detach().to("cpu", dtype).clone() for k, v in encoder_state_dict(model.state_dict()).items()}
    _atomic_save({"model": enc, "tensor_sha256": tensor_sha256(enc)}, path)
    digest = sha256_file(path)
    if provenance is not None:
        meta = dict(provenance)
        meta.update(file=os.path.basename(path), sha256=digest, tensor_sha256=tensor_sha256(enc),
                    dtype=str(dtype).replace("torch.", ""),
                    layout="ViP release: {'model': encoder keys in timm VisionTransformer layout}",
                    timm_kwargs=model.cfg.timm_kwargs())
        text = json.dumps(meta, indent=2, sort_keys=True) + "\n"
        _atomic_write(os.path.splitext(path)[0] + ".json", lambda f: f.write(text.encode()))
    return digest


def write_step_journal(path: str, noisy_steps: int, changed_files_read: bool) -> None:
    """Record, durably, how many noisy steps a DP run has begun: written BEFORE each step draws its noise.

    A checkpoint holds the weights of step k, but a run that stops at step j > k (a non-finite noisy update, an
    error, a kill) has released j noisy updates (the stop itself says something about the last one); a run resumed
    from the checkpoint redoes steps k+1..j with fresh noise. Its accountant counts every step this journal names,
    so the epsilon reported after a resume is that of all noisy steps ever taken, never fewer (a step killed
    before its noise was drawn is counted too: the safe side). The journal holds two public values and its sha256:
    ``noisy_steps`` and ``changed_files_read`` (whether a training image read during the run differed from the
    pre-flight, :class:`backbones.mae.data.FolderImages`); no key, seed or generator state.
    """
    body = {"noisy_steps": int(noisy_steps), "changed_files_read": bool(changed_files_read)}
    doc = dict(body, sha256=hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest())
    text = json.dumps(doc, sort_keys=True) + "\n"
    _atomic_write(path, lambda f: f.write(text.encode()))


def read_step_journal(path: str) -> dict:
    """The ``{"noisy_steps", "changed_files_read"}`` of :func:`write_step_journal`, verified.

    Raises
    ------
    FileNotFoundError
        No journal at ``path`` (the steps taken since the checkpoint cannot be counted).
    ValueError
        The journal is damaged (unreadable, fields missing or of the wrong type, or its sha256 does not match).
    """
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no step journal at {path!r}: the noisy steps this DP run took after its last "
                                f"checkpoint cannot be counted, so it cannot be resumed (start a new --out; count the "
                                f"stopped run's whole planned budget as spent)")
    try:
        with open(path, "rb") as f:
            doc = json.loads(f.read().decode())
        body = {"noisy_steps": doc["noisy_steps"], "changed_files_read": doc["changed_files_read"]}
        ok = (type(body["noisy_steps"]) is int and body["noisy_steps"] >= 0
              and type(body["changed_files_read"]) is bool
              and doc["sha256"] == hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest())
    except (OSError, ValueError, KeyError, TypeError):
        ok = False
    if not ok:
        raise ValueError(f"{path!r} is damaged (the step journal of a DP run: unreadable, or its content does not "
                         f"match its sha256): its noisy steps cannot be counted")
    return body


def config_from_dict(d: dict) -> MAEConfig:
    return MAEConfig(**d)
