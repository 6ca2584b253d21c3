"""NumPy record descriptors, fuzzed (issue 54): seeded random structured dtypes around the spec's
`particle` record (names renamed, reordered, titled; offsets moved, overlapping, padded;
subarray fields reshaped; fields of other kinds, byte orders, objects and nested records;
fields added and dropped; the item size changed), each given to the three places that read a
record descriptor: a Rust typed argument (`record_total_mass`), `amso.asarray(copy=False)` and
`amso.MemArray(shape, dtype)`.

The reference is written here from the spec alone, apart from amso's check: a descriptor is the
record exactly when its names are the record's in order and each field has the record's element
type (native byte order), subarray shape and offset, in an item of the record's size. Titles
are spellings and do not matter. Every accepted descriptor must be the record, every refused
one is a `TypeError`, and what an accepted one reads is the array's own data."""

from __future__ import annotations

import random

import numpy as np
import pytest

import amso

peers = pytest.importorskip("amso_peers")

#: The spec's particle (specs/types.yaml): (name, element type, subarray shape, offset); 40 bytes.
PARTICLE = [("pos", "<f4", (3,), 0), ("vel", "<f4", (3,), 12), ("mass", "<f8", (), 24), ("id", "<i8", (), 32)]
ITEMSIZE = 40
CASES = 1500
OTHER_TYPES = ["<f4", "<f8", "<i8", "<u8", "<i4", ">f8", ">i8", "<f2", "<c8", "O", "V8", "S8", "<m8[s]",
               [("a", "<f4"), ("b", "<f4")]]


def is_the_record(dtype: np.dtype) -> bool:
    """The reference: `dtype` lays out the particle exactly (titles aside)."""
    if dtype.names != tuple(name for name, *_ in PARTICLE) or dtype.itemsize != ITEMSIZE:
        return False
    for name, kind, shape, offset in PARTICLE:
        field, at = dtype.fields[name][:2]
        if at != offset or field.shape != shape or field.base.names is not None:
            return False
        if field.base.str != kind:  # `str` spells the byte order: '<f8' and '>f8' differ
            return False
    return True


def mutated(rng: random.Random) -> np.dtype:
    """A structured dtype: the particle with zero to three random changes."""
    fields = [[name, kind, shape, offset, None] for name, kind, shape, offset in PARTICLE]
    itemsize = ITEMSIZE
    for _ in range(rng.choice([0, 1, 1, 2, 3])):
        field = rng.choice(fields)
        change = rng.randrange(9)
        if change == 0:  # renamed
            field[0] = rng.choice(["mass", "id", "pos", "vel", "Mass", "m", "mass_", "x"])
        elif change == 1:  # two fields swap places in the names' order
            i, j = rng.sample(range(len(fields)), 2)
            fields[i], fields[j] = fields[j], fields[i]
        elif change == 2:  # moved: onto another field (overlapping), into the padding, past the end
            field[3] = rng.choice([0, 4, 8, 12, 16, 24, 28, 32, 36, 40])
        elif change == 3:  # the subarray reshaped
            field[2] = rng.choice([(), (2,), (3,), (4,), (3, 1), (1, 3), (1,)])
        elif change == 4:  # another element type (a byte order, an object, a nested record)
            field[1] = rng.choice(OTHER_TYPES)
        elif change == 5:  # a field added
            fields.append([rng.choice(["q", "extra", "pos2"]), rng.choice(["<f8", "<i8", "<f4"]), (),
                           rng.choice([32, 40, 48]), None])
        elif change == 6 and len(fields) > 1:  # a field dropped
            fields.remove(field)
        elif change == 7:  # the item padded or cut
            itemsize = rng.choice([32, 40, 44, 48, 64])
        else:  # a title: a second spelling of the field's name
            field[4] = rng.choice(["title", "position", "weight"])
    formats = [(kind, shape) if shape else kind for _, kind, shape, _, _ in fields]
    spec = {"names": [f[0] for f in fields], "formats": formats, "offsets": [f[3] for f in fields],
            "itemsize": max(itemsize, max(f[3] + np.dtype(fmt).itemsize for f, fmt in zip(fields, formats)))}
    if any(f[4] for f in fields):
        spec["titles"] = [f[4] for f in fields]
    return np.dtype(spec)


def descriptors():
    """(seed, dtype) for every seed whose random descriptor NumPy itself accepts."""
    for seed in range(CASES):
        try:
            yield seed, mutated(random.Random(seed))
        except (ValueError, TypeError):  # NumPy's own refusal: duplicate names, overlapping objects...
            continue


def test_every_reader_accepts_exactly_the_record_and_reads_its_data():
    accepted = refused = 0
    for seed, dtype in descriptors():
        x = np.zeros(5, dtype)
        if "mass" in (dtype.names or ()) and dtype.fields["mass"][0] == np.dtype("<f8"):
            x["mass"] = np.arange(5) + 0.5 * seed
        expected = is_the_record(dtype)
        readers = {
            "a typed argument": lambda: peers.record_total_mass(x),
            "asarray(copy=False)": lambda: amso.asarray(x, copy=False),
            "MemArray(shape, dtype)": lambda: amso.MemArray(2, dtype),
        }
        for reader, read in readers.items():
            if expected:
                result = read()
                if reader == "a typed argument":
                    assert result == x["mass"].sum(), (seed, dtype)
                elif reader == "asarray(copy=False)":
                    assert np.shares_memory(np.asarray(result), x), (seed, dtype)
                    assert result["mass"].tolist() == x["mass"].tolist()
            else:
                with pytest.raises(TypeError) as error:
                    read()
                assert str(error.value), (seed, dtype, reader)
        accepted += expected
        refused += not expected
    # The mutations reach both sides often, so the reference is tested both ways.
    assert accepted >= 100 and refused >= 800, (accepted, refused)
