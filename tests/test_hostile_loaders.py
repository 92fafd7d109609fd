"""Rows whose images cannot be used are found when the data loads, never later inside sampling or a forward: each
is dropped with a warning naming its file, line and reason, the rest of the data loads, and a count of the drops is
said. Images are decoded in full (a corrupt body with valid checksums fails), their header size is checked against
``MAX_IMAGE_PIXELS`` before decoding (a decompression bomb never decodes), and a path that is not a regular file (a
FIFO would block the reader forever) is refused from its stat."""

from __future__ import annotations

import io
import json
import os
import socket
import struct
import threading
import zlib
from pathlib import Path

import pytest
from PIL import Image

from rlvr.errors import UserError
from rlvr.models import multimodal
from rlvr.models.multimodal import MAX_IMAGE_PIXELS, open_image
from rlvr.tasks.base import DataError
from rlvr.tasks.jsonl import load_jsonl


def encoded(fmt: str, size=(8, 8), mode="RGB") -> bytes:
    buffer = io.BytesIO()
    Image.new(mode, size, 1 if mode == "1" else (200, 10, 10)).save(buffer, format=fmt)
    return buffer.getvalue()


def chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def png_with_body(body: bytes, width=8, height=8) -> bytes:
    """A PNG whose IDAT holds ``body`` as given, every chunk with a valid CRC."""
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", body) + chunk(b"IEND", b"")


def corrupt_deflate() -> bytes:
    """An 8x8 RGB PNG body compressed, then damaged after the zlib header (the CRC is recomputed over it)."""
    raw = b"".join(b"\x00" + bytes(8 * 3) for _ in range(8))
    good = bytearray(zlib.compress(raw))
    good[2:] = bytes(b ^ 0xFF for b in good[2:])
    return png_with_body(bytes(good))


def short_deflate() -> bytes:
    raw = b"".join(b"\x00" + bytes(8 * 3) for _ in range(8))
    return png_with_body(zlib.compress(raw)[:6])


def truncated(data: bytes, keep: float = 0.6) -> bytes:
    return data[: int(len(data) * keep)]


def bomb_header(width: int, height: int) -> bytes:
    """A PNG whose header states ``width`` x ``height`` (what a decoder would allocate) over a tiny body."""
    return png_with_body(zlib.compress(b"\x00" * 64), width, height)


def real_bomb() -> bytes:
    """A real decompression bomb: a 1-bit 9000x9000 image (81M pixels, about 240 MB as RGB) in a few KB."""
    return encoded("PNG", (9000, 9000), mode="1")


def write_rows(folder: Path, rows: list[dict]) -> Path:
    path = folder / "data.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


GOOD = {"prompt": "fine", "reference": "1", "images": ["good.png"]}

# (bytes of bad.png, the reason its row is dropped): valid-looking files that do not decode, and bombs
BAD_FILES = [
    ("corrupt deflate, valid CRCs", corrupt_deflate, r"bad.png is not a readable image"),
    ("deflate cut short, valid CRCs", short_deflate, r"bad.png is not a readable image"),
    ("truncated PNG", lambda: truncated(encoded("PNG", (64, 64))), r"bad.png is not a readable image"),
    ("truncated JPEG", lambda: truncated(encoded("JPEG", (64, 64)), 0.5), r"bad.png is not a readable image"),
    ("truncated GIF", lambda: truncated(encoded("GIF", (64, 64)), 0.7), r"bad.png is not a readable image"),
    ("truncated BMP", lambda: truncated(encoded("BMP", (64, 64))), r"bad.png is not a readable image"),
    ("empty file", lambda: b"", r"bad.png is not a readable image"),
    ("text", lambda: b"not an image at all\n", r"bad.png is not a readable image"),
    ("header of 100000x100000", lambda: bomb_header(100_000, 100_000),
     r"bad.png decodes to more pixels than the limit of %d" % MAX_IMAGE_PIXELS),
    ("header of 1x40000000", lambda: bomb_header(1, 40_000_000), r"bad.png decodes to 1x40000000 pixels"),
    ("1-bit 9000x9000 bomb", real_bomb, r"bad.png decodes to 9000x9000 pixels, over the limit"),
]


def load_in_time(path: Path, seconds: float = 120.0):
    """load_jsonl(path) in a thread: a loader that blocks (on a FIFO) fails the test instead of hanging it."""
    result: dict = {}

    def run():
        try:
            with pytest.warns(UserWarning) as caught:
                result["tasks"] = load_jsonl(path)
            result["warnings"] = [str(w.message) for w in caught]
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            result["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"loading {path} blocked for {seconds}s"
    if "error" in result:
        raise result["error"]
    return result["tasks"], result["warnings"]


def assert_dropped(tasks, warnings, line: int, reason: str, total: int = 3):
    import re

    assert [t.prompt for t in tasks] == ["fine", "fine too"]
    named = [w for w in warnings if re.search(rf"data.jsonl:{line}: field '(images|prompt)': .*{reason}", w)]
    assert len(named) == 1, warnings
    assert all("\n" not in w for w in warnings)
    assert any(f"dropped 1 of {total} rows" in w and "2 kept" in w for w in warnings), warnings


@pytest.mark.parametrize("name, make, reason", BAD_FILES, ids=[b[0] for b in BAD_FILES])
def test_an_image_that_does_not_decode_drops_its_row(tmp_path, name, make, reason):
    (tmp_path / "good.png").write_bytes(encoded("PNG"))
    (tmp_path / "bad.png").write_bytes(make())
    rows = [GOOD, {"prompt": "bad", "reference": "1", "images": ["bad.png"]}, {**GOOD, "prompt": "fine too"}]
    tasks, warnings = load_in_time(write_rows(tmp_path, rows))
    assert_dropped(tasks, warnings, 2, reason)


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _socket(path: Path) -> None:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    _socket.keep = server  # open until the test ends


def _link_to_fifo(path: Path) -> None:
    os.mkfifo(path.with_name("pipe"))
    path.symlink_to(path.with_name("pipe"))


# (how bad.png is made, the reason): files a reader would block on or never finish, refused from their stat
NOT_REGULAR = [
    ("fifo", _fifo, r"is a FIFO \(named pipe\), expected a regular image file"),
    ("symlink to a fifo", _link_to_fifo, r"is a FIFO"),
    ("unix socket", _socket, r"is a socket"),
    ("directory", lambda p: p.mkdir(), r"is a directory"),
    ("missing", lambda p: None, r"does not exist"),
]


@pytest.mark.parametrize("name, make, reason", NOT_REGULAR, ids=[n[0] for n in NOT_REGULAR])
def test_a_path_that_is_not_a_regular_file_drops_its_row_without_blocking(tmp_path, name, make, reason):
    (tmp_path / "good.png").write_bytes(encoded("PNG"))
    if len(str(tmp_path / "bad.png")) > 100 and name == "unix socket":
        pytest.fail("the socket path is too long for AF_UNIX; shorten tmp_path")
    make(tmp_path / "bad.png")
    rows = [GOOD, {"prompt": "bad", "reference": "1", "images": ["bad.png"]}, {**GOOD, "prompt": "fine too"}]
    tasks, warnings = load_in_time(write_rows(tmp_path, rows), seconds=60)
    assert_dropped(tasks, warnings, 2, reason)


def test_a_character_device_drops_its_row(tmp_path):
    (tmp_path / "good.png").write_bytes(encoded("PNG"))
    rows = [GOOD, {"prompt": "bad", "reference": "1", "images": ["/dev/zero"]}, {**GOOD, "prompt": "fine too"}]
    tasks, warnings = load_in_time(write_rows(tmp_path, rows), seconds=60)
    assert_dropped(tasks, warnings, 2, r"/dev/zero is a character device")


def chat(*parts):
    return [{"role": "user", "content": list(parts)}]


IMAGE, TEXT = {"type": "image"}, {"type": "text", "text": "how many?"}

# (prompt, images given, reason) where the placeholders do not match the images
MISMATCHED = [
    (chat(IMAGE, IMAGE, TEXT), 1, r"shows 2 image\(s\) but field 'images' has 1"),
    (chat(IMAGE, TEXT), 2, r"shows 1 image\(s\) but field 'images' has 2"),
    ("<image><image>how many?", 1, r"shows 2 image\(s\) but field 'images' has 1"),
    ("<image>how many?", 3, r"shows 1 image\(s\) but field 'images' has 3"),
    (chat(IMAGE, TEXT), 0, r"shows 1 image\(s\) but field 'images' has 0"),
    (chat(IMAGE, IMAGE, IMAGE, TEXT), 2, r"shows 3 image\(s\) but field 'images' has 2"),
    ("<|image_pad|><|image_pad|><|image_pad|>", 2, r"shows 3 image\(s\) but field 'images' has 2"),
]


@pytest.mark.parametrize("prompt, count, reason", MISMATCHED)
def test_placeholders_that_do_not_match_the_images_drop_the_row(tmp_path, prompt, count, reason):
    (tmp_path / "good.png").write_bytes(encoded("PNG"))
    bad = {"prompt": prompt, "reference": "1", **({"images": ["good.png"] * count} if count else {})}
    rows = [GOOD, {**GOOD, "prompt": "fine too"}, bad]
    tasks, warnings = load_in_time(write_rows(tmp_path, rows))
    assert_dropped(tasks, warnings, 3, reason)


# prompts whose images match: a placeholder per image, or none (the processor places them all before the text); a
# placeholder spelled in chat text, or in a row without images, is plain text (rlvr.models.prompts escapes it)
MATCHED = [("<image>how many?", 1), (chat(IMAGE, TEXT), 1), (chat(IMAGE, TEXT, IMAGE), 2), ("how many?", 2),
           (chat(TEXT), 1), ("<|image_pad|> and <image>", 2), ("plain text", 0),
           ("<image>how many?", 0), ("what is <|image_pad|>?", 0), (chat({"type": "text", "text": "see <|image|>"}), 0),
           ([{"role": "system", "content": "<start_of_image>"}, {"role": "user", "content": "hi"}], 0),
           (chat(IMAGE, {"type": "text", "text": "<image> how many?"}), 1),
           (chat({"type": "text", "text": "<image> how many?"}), 1), ([{"role": "user", "content": "<|image_pad|>?"}], 2)]


@pytest.mark.parametrize("prompt, count", MATCHED)
def test_matching_placeholders_load(tmp_path, prompt, count):
    (tmp_path / "good.png").write_bytes(encoded("PNG"))
    row = {"prompt": prompt, "reference": "1", **({"images": ["good.png"] * count} if count else {})}
    (task,) = load_jsonl(write_rows(tmp_path, [row]))
    assert len(task.images) == count


def test_every_row_dropped_is_an_error(tmp_path):
    (tmp_path / "bad.png").write_bytes(bomb_header(100_000, 100_000))
    rows = [{"prompt": "x", "reference": "1", "images": ["bad.png"]}] * 2
    with pytest.warns(UserWarning), pytest.raises(DataError, match=r"data.jsonl: all 2 rows dropped .* decodes to"):
        load_jsonl(write_rows(tmp_path, rows))


@pytest.mark.parametrize("make, reason", [(lambda p: p.write_bytes(real_bomb()), "decodes to 9000x9000"),
                                          (lambda p: p.write_bytes(corrupt_deflate()), "is not a readable image"),
                                          (_fifo, "is a FIFO")])
def test_the_sampling_path_refuses_the_same_images(tmp_path, monkeypatch, make, reason):
    """``open_image`` (where prompts are encoded) applies the same limits, so an image that changed after loading
    is one error, not a bomb or a hang; the bomb's pixels are never decoded."""
    from PIL import ImageFile

    make(tmp_path / "x.png")
    decoded, load = [], ImageFile.ImageFile.load
    monkeypatch.setattr(ImageFile.ImageFile, "load", lambda self, *a: decoded.append(self.size) or load(self))
    with pytest.raises(UserError, match=f"here: image .*x.png {reason}"):
        open_image(str(tmp_path / "x.png"), where="here")
    assert all(w * h <= MAX_IMAGE_PIXELS for w, h in decoded) and (decoded or reason != "is not a readable image")
    if reason != "is a FIFO":  # the same image given as encoded bytes
        with pytest.raises(UserError, match=reason):
            open_image((tmp_path / "x.png").read_bytes())


def test_the_limits_are_stated():
    assert multimodal.MAX_IMAGE_PIXELS == 7680 * 4320 and multimodal.MAX_IMAGE_BYTES == 64 * 1024 * 1024
