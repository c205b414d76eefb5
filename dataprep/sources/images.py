"""Decoding one image file to uint8 RGB pixels, and the optional resize every image source shares.

`--size N` does what the usual diffusion training loops do to each image on every epoch (lucidrains'
denoising-diffusion-pytorch `Dataset`, diffusers' unconditional example): convert to RGB, then torchvision's
`Resize(N)` on the PIL image (the shorter side to N, the longer to `int(N * long / short)`, PIL bilinear, which
always antialiases), then `CenterCrop(N)`. Here it runs once, at conversion, with PIL directly (torchvision is not
imported in the decoding workers); the tests check it against torchvision pixel by pixel.

Modes: palette, grayscale, CMYK and alpha images become RGB with PIL's `convert("RGB")` (alpha dropped), as those
loops do. 16-bit grayscale keeps the high byte of each value, as PIL itself does for 16-bit RGB PNGs: PIL's
`convert("RGB")` of a 16-bit grayscale image saturates every value above 255 to white.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from common.paths import NotRegularError, open_regular

from .base import BadSample

IMAGE_EXTS = (".png", ".jpg", ".jpeg")
RESIZE_METHOD = "shorter side to size (PIL bilinear, antialiased), then centre crop size x size"
_WIDE_GRAY = ("I;16", "I;16L", "I;16B", "I")  # 16-bit grayscale PNGs open in one of these, depending on Pillow


def _to_rgb(im):
    from PIL import Image

    if im.mode in _WIDE_GRAY:
        wide = np.asarray(im).astype(np.int64)
        im = Image.fromarray((np.clip(wide, 0, 65535) >> 8).astype(np.uint8), "L")
    return im if im.mode == "RGB" else im.convert("RGB")


def resized_size(width: int, height: int, size: int) -> tuple[int, int]:
    """(width, height) after torchvision's Resize(size): shorter side to `size`, the longer truncated."""
    if width <= height:
        return size, int(size * height / width)
    return int(size * width / height), size


def resize_center_crop(im, size: int):
    """torchvision's Resize(size) then CenterCrop(size) on a PIL RGB image (see the module docstring)."""
    from PIL import Image

    width, height = resized_size(im.width, im.height, size)
    if (width, height) != im.size:
        im = im.resize((width, height), Image.BILINEAR)
    top, left = int(round((height - size) / 2.0)), int(round((width - size) / 2.0))
    return im.crop((left, top, left + size, top + size))


def resize_array(x: np.ndarray, size: int) -> np.ndarray:
    """resize_center_crop for an (H, W, 3) uint8 array (sources that are already decoded, e.g. CIFAR pickles)."""
    from PIL import Image

    return np.asarray(resize_center_crop(Image.fromarray(x, "RGB"), size), dtype=np.uint8)


def decode_image(path: Path, size: int | None = None) -> tuple[np.ndarray, None]:
    """The file's pixels as (H, W, 3) uint8, resized and centre-cropped to (size, size) when `size` is given."""
    from PIL import Image, UnidentifiedImageError

    if Path(path).suffix.lower() not in IMAGE_EXTS:
        raise BadSample(path, f"not an image file (extension {Path(path).suffix or 'none'}; expected {IMAGE_EXTS})")
    try:
        with open_regular(path) as f, Image.open(f) as im:  # a FIFO named .png would block a plain open for ever
            im.load()  # decode now, so a truncated file fails here and not in a loader months later
            rgb = _to_rgb(im)
            if size is not None:
                rgb = resize_center_crop(rgb, size)
            return np.asarray(rgb, dtype=np.uint8), None
    except NotRegularError as e:
        raise BadSample(path, e.problem) from None
    except UnidentifiedImageError:
        raise BadSample(path, "not an image (PIL cannot identify the file)") from None
    except (SyntaxError, ValueError, Image.DecompressionBombError) as e:
        raise BadSample(path, f"corrupt or truncated image ({e})") from None
    except OSError as e:
        raise BadSample(path, describe_os_error(e, "corrupt or truncated image")) from None


def describe_os_error(e: OSError, fallback: str) -> str:
    """Say what an OSError while reading a file means for the user: a permission, a symlink loop, or damage."""
    import errno

    known = {
        errno.EACCES: "permission denied (cannot read the file)",
        errno.ELOOP: "symlink loop",
        errno.ENOENT: "vanished or a dangling symlink",
        errno.EISDIR: "a directory, not a file",
    }
    return known.get(e.errno, f"{fallback} ({e})")
