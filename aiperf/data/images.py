"""Is this file an image the input pipeline can decode? One clear reason when it is not.

The checks run where the file is converted (on a Dask worker), with the same TensorFlow decoder
the input pipeline uses, so a file that passes here decodes in training too.
"""

from __future__ import annotations

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


def check_image(
    name: str, data: bytes, channels: int = 3
) -> tuple[str | None, tuple[int, int, int]]:
    """(problem, (height, width, channels)). problem is None when the image decodes whole."""
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
