"""Is this file an image the input pipeline can decode? One clear reason when it is not.

The checks run where the file is converted (on a Dask worker), with the same TensorFlow decoder
the input pipeline uses, so a file that passes here decodes in training too.
"""

from __future__ import annotations

import struct

# Limits on what staging opens, so an untrusted folder or shard cannot exhaust a worker: an image
# of more pixels than PIL's own decompression-bomb limit (Image.MAX_IMAGE_PIXELS, about 0.25 GB
# decoded at 3 bytes a pixel) is refused from its header, before it is decoded; a file larger
# than MAX_IMAGE_BYTES is refused before it is read (ImageNet's largest JPEG is a few MB).
MAX_IMAGE_PIXELS = 89_478_485
MAX_IMAGE_BYTES = 64 << 20
JPEG_MAGIC = b"\xff\xd8\xff"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
PNG_END = b"IEND\xaeB`\x82"
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".JPEG", ".JPG", ".PNG")


def image_format(data: bytes) -> str | None:
    """'jpeg', 'png' or None, from the file's first bytes (never from its name)."""
    if data.startswith(JPEG_MAGIC):
        return "jpeg"
    if data.startswith(PNG_MAGIC):
        return "png"
    return None


def _other_format(data: bytes) -> str:
    for magic, name in (
        (b"GIF8", "a GIF"),
        (b"BM", "a BMP"),
        (b"RIFF", "a WebP/RIFF file"),
        (b"%PDF", "a PDF"),
        (b"PK\x03\x04", "a ZIP archive"),
    ):
        if data.startswith(magic):
            return name
    if not data:
        return "an empty file"
    try:
        data[:512].decode("utf-8")
        return "a text file"
    except UnicodeDecodeError:
        return "an unknown binary file"


def header_size(data: bytes) -> tuple[int, int] | None:
    """(height, width) from a PNG's IHDR or a JPEG's start-of-frame marker, without decoding it;
    None when the header does not say (the decoder then judges the file)."""
    if data.startswith(PNG_MAGIC) and len(data) >= 24 and data[12:16] == b"IHDR":
        width, height = struct.unpack(">II", data[16:24])
        return height, width
    if not data.startswith(JPEG_MAGIC):
        return None
    at = 2
    while at + 4 <= len(data):
        if data[at] != 0xFF:
            return None
        marker = data[at + 1]
        if marker == 0xFF:  # fill byte
            at += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:  # markers without a length
            at += 2
            continue
        (length,) = struct.unpack(">H", data[at + 2 : at + 4])
        # SOF0..SOF15 but DHT (C4), JPG (C8) and DAC (CC): precision, height, width follow.
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC) and at + 9 <= len(data):
            height, width = struct.unpack(">HH", data[at + 5 : at + 9])
            return height, width
        at += 2 + length
    return None


def check_image(
    name: str, data: bytes, channels: int = 3
) -> tuple[str | None, tuple[int, int, int]]:
    """(problem, (height, width, channels)). problem is None when the image decodes whole."""
    if len(data) > MAX_IMAGE_BYTES:
        return (
            f"{name} is {len(data) >> 20} MiB, more than the {MAX_IMAGE_BYTES >> 20} MiB an image "
            "may be; shrink or remove it",
            (0, 0, 0),
        )
    size = header_size(data)
    if size is not None and size[0] * size[1] > MAX_IMAGE_PIXELS:
        return (
            f"{name} is {size[1]}x{size[0]} pixels, more than the {MAX_IMAGE_PIXELS} an image may "
            "have (a decompression bomb?); shrink or remove it",
            (0, 0, 0),
        )
    kind = image_format(data)
    if kind is None:
        return f"{name} is not a JPEG or PNG image (it is {_other_format(data)}); remove it", (
            0,
            0,
            0,
        )
    body = data.rstrip(b"\x00")
    if kind == "jpeg" and not body.endswith(b"\xff\xd9"):
        return (
            f"{name} is a truncated JPEG (it ends before the end-of-image marker); re-copy it",
            (0, 0, 0),
        )
    if kind == "png" and not body.endswith(PNG_END):
        return f"{name} is a truncated PNG (it ends before its IEND chunk); re-copy it", (0, 0, 0)
    import tensorflow as tf

    try:
        image = tf.io.decode_image(data, channels=channels, expand_animations=False)
    except (tf.errors.InvalidArgumentError, tf.errors.UnknownError) as exc:
        reason = str(exc).strip().splitlines()[-1].split("}}")[-1].strip() or type(exc).__name__
        return (
            f"{name} is a corrupt {kind.upper()} (cannot decode: {reason}); re-copy or remove it",
            (0, 0, 0),
        )
    height, width, depth = (int(d) for d in image.shape)
    if height < 1 or width < 1:
        return f"{name} has no pixels; remove it", (0, 0, 0)
    return None, (height, width, depth)
