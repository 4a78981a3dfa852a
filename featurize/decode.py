"""Any image PIL opens, as 8-bit RGB with its intended brightness.

``Image.convert("RGB")`` clips wide integer modes instead of scaling them: a 16-bit PNG (mode ``I;16``) or PGM
(mode ``I``) comes out almost all white, a float TIFF (mode ``F``) with values in [0, 1] all black. Those modes
are scaled here; every other mode PIL knows (1, L, P, LA, PA, La, RGB, RGBA, RGBa, RGBX, CMYK, YCbCr, LAB, HSV)
goes through PIL's own conversion, alpha dropped as torchvision's loader does.
"""
from __future__ import annotations

import numpy as np
from PIL import Image

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
