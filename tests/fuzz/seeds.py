#!/usr/bin/env python3
"""Writes the seed corpus of the fuzz targets (corpus/<target>/): the decks
of inputs/ and tests/app/, small valid and broken IDX files, and inputs that
decode into valid and edited HDF5 files. Run from anywhere; rerunning
rewrites the same files."""
import gzip
import os
import pathlib
import struct

here = pathlib.Path(__file__).resolve().parent
root = here.parent.parent


def put(target, name, data):
    d = here / "corpus" / target
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data)


# Decks: every deck of the project, one with --set overrides, and fragments.
for deck in sorted(list((root / "inputs").glob("*.toml")) + list((root / "tests" / "app").glob("*.toml"))):
    put("deck", deck.parent.name + "_" + deck.name, deck.read_bytes())
mlp = (root / "inputs" / "fashion_mnist_mlp.toml").read_bytes()
put("deck", "overrides.toml", b"#set training.epochs=3\n#set model.layers[0].units=64\n" + mlp)
put("deck", "bad_override.toml", b"#set model.layers[9].units=1\n" + mlp)
put("deck", "empty.toml", b"")


def idx(dims, data):
    return bytes([0, 0, 8, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + bytes(data)


# IDX: mode byte (bit 0 gzip, bit 1 images + labels split after 4 * (mode >> 2) bytes).
images = idx([2, 2, 2], range(8))
labels = idx([2], [1, 0])
put("idx", "raw", b"\x00" + images)
put("idx", "gzip", b"\x01" + images)
split = len(images) // 4
put("idx", "pair", bytes([2 | (split << 2)]) + images + labels)
put("idx", "pair_gzip", bytes([3 | (split << 2)]) + images + labels)
put("idx", "huge_dims", b"\x00" + bytes([0, 0, 8, 3]) + b"\xff\xff\xff\xff" * 3)
put("idx", "truncated", b"\x00" + images[:-3])
put("idx", "wrong_type", b"\x00" + bytes([0, 0, 0x0d, 1, 0, 0, 0, 1]) + b"\x00" * 4)

# HDF5 descriptions (fuzz_hdf5_objects.hpp): kind (>= 2: dataset), type
# (0: unsigned 8-bit), rank + 1, dims, chunked flag, then values.
def dataset(dims, values, chunked=0):
    out = bytes([2, 0, len(dims) + 1]) + bytes(dims) + bytes([chunked])
    if chunked:
        out += bytes([1] * len(dims))  # chunks of 2 along every axis
    for v in values:
        out += bytes([0, v])  # plausible value v
    return out


put("hdf5", "valid", dataset([2, 2, 2], range(8)) + dataset([2], [1, 0]))
put("hdf5", "valid_chunked", dataset([2, 3], range(6), 1) + dataset([2], [3, 4]))
put("hdf5", "missing_labels", dataset([2, 2], range(4)) + bytes([0]))
put("hdf5", "float_images", bytes([2, 6, 3, 2, 2, 0]) + bytes(16) + dataset([2], [1, 0]))
put("hdf5", "random", bytes(range(0, 256, 7)))

# Checkpoint edits: count, then per edit the object, the kind and its details.
for i, seed in enumerate([b"\x00\x00\x00", b"\x01\x05\x01\x00", b"\x00\x03\x02\x02\x00\x01\x02",
                          b"\x02\x09\x03\x01\x04\x02\x03\x01", b"\x00\x0b\x04" + bytes(range(64)),
                          b"\x03" + bytes(range(200, 256))]):
    put("checkpoint", "edit%d" % i, seed)
