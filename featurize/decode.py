"""Any image PIL opens, as 8-bit RGB with its intended brightness.

``Image.convert("RGB")`` clips wide integer modes instead of scaling them: a 16-bit PNG (mode ``I;16``) or PGM
(mode ``I``) comes out almost all white, a float TIFF (mode ``F``) with values in [0, 1] all black. Those modes
are scaled here; every other mode PIL knows (1, L, P, LA, PA, La, RGB, RGBA, RGBa, RGBX, CMYK, YCbCr, LAB, HSV)
goes through PIL's own conversion, alpha dropped as torchvision's loader does.

The decode paths of a featurize job (:data:`DECODE_MODES`) live here too. ``draft`` decodes a JPEG at the
smallest DCT scale that still covers the size it is resized to (an ImageNet-size image going to a 32 px model
decodes at 1/8), then resizes it to exactly that size; ``device`` leaves baseline JPEGs' decoding and resizing
to the job's device in batches (nvJPEG on CUDA) and sends everything else through PIL in draft mode. Both keep
the backbone's geometry (:func:`backbones.preprocessing.geometry_transform`): resize the shorter side, centre
crop; the pixels differ from a full PIL decode only by what the decoders and filters differ by (measured in
BENCHMARKS.md, bounded in tests/test_decode.py).
"""
from __future__ import annotations

import contextlib
import io
import warnings

import numpy as np
import torch
from PIL import Image
from torchvision.transforms import InterpolationMode
from torchvision.transforms import functional as F

from backbones.registry import Preprocessing

WIDE_INT_MODES = ("I;16", "I;16L", "I;16B", "I;16N", "I")  # read as 16-bit data (0..65535)
PREMULTIPLIED = {"La": "LA", "RGBa": "RGBA"}


def to_rgb(im: Image.Image) -> Image.Image:
    """``im`` as an RGB image of ``uint8`` pixels.

    Raises
    ------
    ValueError
        A float image with NaN or infinite pixels (there is no brightness to give them).
    """
    if im.mode in WIDE_INT_MODES:
        values = np.asarray(im).astype(np.float64)
        return _gray(values / 257.0)  # 65535 / 257 = 255 exactly
    if im.mode == "F":
        values = np.asarray(im).astype(np.float64)
        if not np.isfinite(values).all():
            raise ValueError("float image has NaN or infinite pixels")
        return _gray(values * 255.0 if values.max(initial=0.0) <= 1.0 else values)  # [0, 1] floats, else 0..255
    if im.mode in PREMULTIPLIED:
        im = im.convert(PREMULTIPLIED[im.mode])
    return im.convert("RGB")


def _gray(values: np.ndarray) -> Image.Image:
    return Image.fromarray(np.clip(np.rint(values), 0, 255).astype(np.uint8), "L").convert("RGB")


# --------------------------------------------------------------------------------------------- decode paths

JPEG_SOI = b"\xff\xd8\xff"
JPEG_EOI = b"\xff\xd9"
#: How a featurize job decodes images: ``full`` (PIL, whole image), ``draft`` (PIL, JPEGs at a reduced DCT scale),
#: ``device`` (baseline JPEGs by torchvision on the job's device: nvJPEG on CUDA), ``auto`` (``device`` on CUDA,
#: else ``draft``).
DECODE_MODES = ("auto", "draft", "full", "device")
#: Pixels resized in one call by :func:`resize_crop` (x 3 channels x 4 bytes in float32: 768 MiB).
RESIZE_PIXELS = 64 * 2**20


def resolve_mode(mode: str, device: torch.device) -> str:
    """``auto`` -> ``device`` on CUDA, ``draft`` elsewhere; other modes are returned as given.

    Raises
    ------
    ValueError
        A mode not in :data:`DECODE_MODES`.
    """
    if mode not in DECODE_MODES:
        raise ValueError(f"--decode must be one of {DECODE_MODES}, got {mode!r}")
    if mode == "auto":
        return "device" if device.type == "cuda" else "draft"
    return mode


def check_worker_every(worker_every: int, mode: str) -> None:
    """Refuse a ``worker_every`` that means nothing: not an integer >= 2 (or 0: none), or set outside device mode.

    Raises
    ------
    ValueError
    """
    if not isinstance(worker_every, int) or isinstance(worker_every, bool) or worker_every < 0 or worker_every == 1:
        raise ValueError(f"worker_every must be 0 (none) or an integer >= 2 (every n-th row decoded by the workers; "
                         f"all rows: --decode draft), got {worker_every!r}")
    if worker_every and mode != "device":
        raise ValueError(f"worker_every shares decoding between the device and the workers: it needs --decode "
                         f"device, not {mode!r}")


def on_device(row: int, worker_every: int) -> bool:
    """Whether device mode offers row ``row`` of a split to the device decoder: all rows, or with ``worker_every
    = n`` all but ``row % n == n - 1`` (decoded by PIL in the workers, so the CPUs decode beside the device). A
    function of the row alone, so a resumed or sharded job decodes every row the way an uninterrupted one did."""
    return not worker_every or row % worker_every != worker_every - 1


def describe(mode: str, worker_every: int = 0) -> str:
    """The decode path as a store records it (``decode``): the mode, and the rows left to the workers."""
    return mode if not worker_every else f"{mode}, row % {worker_every} == {worker_every - 1} by PIL in the workers"


def resized_size(width: int, height: int, resize: int) -> tuple[int, int]:
    """``(width, height)`` after ``torchvision.transforms.Resize(resize)``: the shorter side becomes ``resize``,
    the longer ``int(resize * long / short)`` (torchvision's rule, so every decode path crops the same pixels)."""
    if width <= height:
        return resize, int(resize * height / width)
    return int(resize * width / height), resize


def resize_to(images: torch.Tensor, size: tuple[int, int], pre: Preprocessing) -> torch.Tensor:
    """``uint8 (..., 3, H, W)`` images resized to ``size = (width, height)`` with the backbone's interpolation,
    antialiased (torchvision's antialiased tensor kernels follow PIL's filters, which the CPU path uses)."""
    return F.resize(images, [size[1], size[0]], interpolation=InterpolationMode(pre.interpolation), antialias=True)


def decode_draft(data: bytes, resize: int) -> tuple[Image.Image, tuple[int, int], tuple]:
    """A JPEG decoded at the smallest DCT scale (1, 1/2, 1/4 or 1/8: ``Image.draft``) whose size still covers
    its resized size, as RGB; returns ``(image, original (width, height), box)``, ``box`` the region of ``image``
    the original covers (a partial last 8x8 block makes it fractional: 500 px at 1/8 is 62.5 of 63 pixels).
    Decoding at 1/s skips most of the inverse DCT and colour conversion work, and the block averaging it does is
    itself a low-pass filter."""
    with Image.open(io.BytesIO(data)) as im:
        original = im.size
        drafted = im.draft("RGB", resized_size(*original, resize))
        box = drafted[1] if drafted else (0, 0) + original
        return to_rgb(im), original, box


def open_rgb(data: bytes, pre: Preprocessing, *, draft: bool = True) -> Image.Image:
    """Image bytes (any format PIL opens) -> RGB PIL image.

    With ``draft``, a JPEG is decoded by :func:`decode_draft` and, when that reduced it, resized here (PIL, the
    backbone's interpolation, from the box the original covers) to exactly the size the backbone's transform
    gives the full image, so its ``Resize`` leaves it as is and the centre crop takes the same region. Other
    formats, and JPEGs too small to reduce, decode in full.
    """
    if draft and data.startswith(JPEG_SOI):
        image, original, box = decode_draft(data, pre.resize)
        if image.size == original:
            return image
        resample = F.pil_modes_mapping[InterpolationMode(pre.interpolation)]
        return image.resize(resized_size(*original, pre.resize), resample, box=box)
    with Image.open(io.BytesIO(data)) as im:
        return to_rgb(im)


def device_jpeg_size(data: bytes) -> tuple[int, int] | None:
    """``(width, height)`` of a JPEG a device decoder should take, from its header; ``None`` sends the bytes to
    PIL (in the workers, draft mode) instead: not a JPEG, CMYK or other modes, progressive (nvJPEG decodes those
    one by one with its entropy decoding on the host, in the job's main process: the workers do it faster), no
    end-of-image marker (a truncated file, which PIL names as an error rather than a decoder filling the missing
    rows), or a header PIL cannot read."""
    if not data.startswith(JPEG_SOI) or not data.rstrip(b"\0\r\n ").endswith(JPEG_EOI):
        return None
    try:
        with Image.open(io.BytesIO(data)) as im:
            if im.format != "JPEG" or im.mode not in ("RGB", "L") or im.info.get("progressive"):
                return None
            return im.size
    except Exception:  # noqa: BLE001 - any header PIL refuses is left to PIL's full decode to name
        return None


def decode_jpegs(jpegs: list[torch.Tensor], device: torch.device) -> list[torch.Tensor | None]:
    """JPEG bytes (``uint8`` CPU tensors) -> ``uint8 (3, H, W)`` RGB images on ``device``, decoded by
    ``torchvision.io.decode_jpeg`` there (nvJPEG on CUDA, libjpeg-turbo on the CPU); ``None`` for an image the
    decoder refused.

    On CUDA the call returns once the images are decoded (torchvision's nvJPEG wrapper waits for its own stream,
    holding a process-wide lock) and the current stream is made to wait for them; the GIL is released meanwhile.
    """
    with _quiet():
        return _decode_jpegs(jpegs, device)


@contextlib.contextmanager
def _quiet():
    """torchvision deprecates its decoders for TorchCodec's; the warning is silenced where they are used. The
    filter is process-wide while it lasts (``warnings.catch_warnings``), so threads that decode are covered by
    their caller's (each entering its own would restore another's filters under it)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"torchvision\.io")
        yield


def _decode_jpegs(jpegs: list[torch.Tensor], device: torch.device) -> list[torch.Tensor | None]:
    from torchvision.io import ImageReadMode, decode_jpeg
    try:
        return decode_jpeg(jpegs, mode=ImageReadMode.RGB, device=device)
    except RuntimeError:  # one bad image fails the whole batch: decode one by one to find it
        images = []
        for data in jpegs:
            try:
                images.append(decode_jpeg(data, mode=ImageReadMode.RGB, device=device))
            except RuntimeError:
                images.append(None)
        return images


def resize_crop(images: list[torch.Tensor | None], sizes: list[tuple[int, int]],
                pre: Preprocessing) -> list[torch.Tensor | None]:
    """Decoded ``uint8 (3, H, W)`` images -> ``uint8 (3, crop, crop)``: resized and centre-cropped as the CPU path
    does, images of one size in one call (fewer kernel launches). ``None`` for a missing image or one whose shape
    is not its header's ``sizes[j] = (width, height)``: the caller decodes those with PIL."""
    same_size: dict[tuple[int, int], list[int]] = {}
    for j, (image, (width, height)) in enumerate(zip(images, sizes)):
        if image is not None and tuple(image.shape) == (3, height, width):
            same_size.setdefault((width, height), []).append(j)
    out: list[torch.Tensor | None] = [None] * len(images)
    for (width, height), js in same_size.items():
        step = max(1, RESIZE_PIXELS // (width * height))  # the resize works in float32: bound its memory
        for chunk in (js[a:a + step] for a in range(0, len(js), step)):
            batch = resize_to(torch.stack([images[j] for j in chunk]), resized_size(width, height, pre.resize), pre)
            for j, crop in zip(chunk, F.center_crop(batch, [pre.crop, pre.crop])):
                out[j] = crop
    return out


def decode_batch(jpegs: list[torch.Tensor], sizes: list[tuple[int, int]], pre: Preprocessing,
                 device: torch.device, *, streams: list | None = None) -> list[torch.Tensor | None]:
    """JPEG bytes -> ``uint8 (3, crop, crop)`` tensors on ``device``: :func:`decode_jpegs` then :func:`resize_crop`.

    ``None`` marks an image the device decoder refused or decoded to another size than its header (``sizes``,
    from :func:`device_jpeg_size`): the caller decodes those with PIL, which decodes or names the fault.

    ``streams``: split the batch into ``len(streams)`` consecutive chunks, each decoded and resized by its own
    thread (on its own CUDA stream; ``None`` entries off CUDA), so that one chunk's resize overlaps the next
    one's decoding. The pixels are the same as in one piece (each image is decoded and resized alone or with
    same-size images, which the kernels treat independently). The caller's current stream waits for every
    chunk's work.
    """
    if not streams or len(streams) == 1 or len(jpegs) < 2:
        return resize_crop(decode_jpegs(jpegs, device), sizes, pre)
    from concurrent.futures import ThreadPoolExecutor
    k = min(len(streams), len(jpegs))
    bounds = [len(jpegs) * c // k for c in range(k + 1)]
    caller = torch.cuda.current_stream(device) if device.type == "cuda" else None

    def chunk(c):
        a, b = bounds[c], bounds[c + 1]
        stream = streams[c]
        with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
            if stream is not None:
                stream.wait_stream(caller)  # inputs the caller queued before (none today) come first
            crops = resize_crop(_decode_jpegs(jpegs[a:b], device), sizes[a:b], pre)
            event = stream.record_event() if stream is not None else None
        return crops, event

    with _quiet(), ThreadPoolExecutor(k, thread_name_prefix="decode-chunk") as pool:
        results = list(pool.map(chunk, range(k)))
    out: list[torch.Tensor | None] = []
    for crops, event in results:
        if event is not None:  # the caller's stream uses these crops: wait for them, and keep their memory alive
            caller.wait_event(event)
            for crop in crops:
                if crop is not None:
                    crop.record_stream(caller)
        out.extend(crops)
    return out
