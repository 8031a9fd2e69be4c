"""The checkpoint folder training writes (format 5, docs/checkpoint-format.md), as the tests read
and damage it: RUN_DIR/checkpoints/step-NNNNNNN/ holds rank-RRRRR-of-WWWWW.h5 (/slices: float32,
contiguous; /index: JSON) and MANIFEST (JSON, then a last line `crc32c=XXXXXXXX` over the bytes
before it), whose slice table says which file holds which slice of which tensor, where, and the
slice's CRC-32C."""
import json
import pathlib

import h5py
import numpy as np

CRC_KEY = "crc32c="


def _crc_table():
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
        table.append(c)
    return table


_TABLE = _crc_table()


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc = (crc >> 8) ^ _TABLE[(crc ^ b) & 0xFF]
    return crc ^ 0xFFFFFFFF


def manifest(folder):
    """The MANIFEST's JSON (its checksum line checked: the test reads what trainrun wrote)."""
    text = (pathlib.Path(folder) / "MANIFEST").read_text()
    body, _, last = text.rpartition(CRC_KEY)
    assert last == "%08x\n" % crc32c(body.encode()), "MANIFEST fails its CRC-32C"
    return json.loads(body)


def write_manifest(folder, table):
    """MANIFEST rewritten from `table` with a correct checksum line: what a tool (or a writer's
    bug) would leave, which the checksum alone cannot catch."""
    body = json.dumps(table, indent=1) + "\n"
    crc = "%08x\n" % crc32c(body.encode())
    (pathlib.Path(folder) / "MANIFEST").write_text(body + CRC_KEY + crc)


def slice_of(folder, tensor):
    """(rank file, index of the slice in the table, first element, element count) of the first
    slice of `tensor`."""
    t = manifest(folder)
    names = [x["name"] for x in t["tensors"]]
    at = names.index(tensor)
    for i, s in enumerate(t["slices"]):
        if s["tensor"] == at:
            count = int(np.prod(s["sizes"]))
            return pathlib.Path(folder) / t["files"][s["file"]]["name"], i, s["begin"], count
    raise AssertionError(f"no slice of {tensor} in {folder}")


def data_offset(rank_file):
    """Where /slices' bytes start in the rank file."""
    with h5py.File(rank_file, "r") as f:
        return f["slices"].id.get_offset()


def rewrite_index(rank_file, old, new):
    """Replaces the one occurrence of `old` in the rank file's /index (JSON) by `new`, the data
    set rewritten as trainrun writes it (a UTF-8 string, null-padded, compact): a change no
    checksum of the file's own can catch."""
    with h5py.File(rank_file, "r+") as f:
        text = f["index"][()]
        assert text.count(old.encode()) == 1, f"{old} is not once in {rank_file}'s /index"
        text = text.replace(old.encode(), new.encode())
        del f["index"]
        tid = h5py.h5t.C_S1.copy()
        tid.set_size(len(text))
        tid.set_strpad(h5py.h5t.STR_NULLPAD)
        tid.set_cset(h5py.h5t.CSET_UTF8)
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_layout(h5py.h5d.COMPACT)
        ds = h5py.h5d.create(f.id, b"index", tid, h5py.h5s.create(h5py.h5s.SCALAR), dcpl=dcpl)
        ds.write(h5py.h5s.ALL, h5py.h5s.ALL, np.array(text, dtype=f"S{len(text)}"), mtype=tid)


def flip_data(folder, tensor="optimizer/v/blocks.0.mlp.fc.weight"):
    """Flips a byte in the middle of a tensor's stored data, as a bad disk would."""
    path, _, begin, count = slice_of(folder, tensor)
    at = data_offset(path) + (begin + count // 2) * 4
    data = bytearray(path.read_bytes())
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))


def poison(folder, tensor="model/wte.weight", value=float("inf")):
    """A non-finite value in `tensor`'s first element, with the slice's CRC-32C updated to match
    in MANIFEST and in the rank file's /index alike (every checksum and copy right): what a
    writer without the finiteness rule would have left."""
    path, i, begin, count = slice_of(folder, tensor)
    t = manifest(folder)
    old = t["slices"][i]["crc32c"]
    with h5py.File(path, "r+") as f:
        f["slices"][begin] = value
        new = "%08x" % crc32c(f["slices"][begin:begin + count].astype("<f4").tobytes())
    rewrite_index(path, f'"crc32c":"{old}"', f'"crc32c":"{new}"')
    t["slices"][i]["crc32c"] = new
    write_manifest(folder, t)


def tensor(folder, name):
    """A whole tensor read through the MANIFEST's slice table (every slice's CRC checked)."""
    t = manifest(folder)
    at = [x["name"] for x in t["tensors"]].index(name)
    out = np.zeros(t["tensors"][at]["shape"], dtype="<f4")
    for s in t["slices"]:
        if s["tensor"] != at:
            continue
        count = int(np.prod(s["sizes"]))
        with h5py.File(pathlib.Path(folder) / t["files"][s["file"]]["name"], "r") as f:
            data = f["slices"][s["begin"]:s["begin"] + count].astype("<f4")
        assert "%08x" % crc32c(data.tobytes()) == s["crc32c"], f"{name}: a slice fails its CRC"
        box = tuple(slice(o, o + n) for o, n in zip(s["offsets"], s["sizes"]))
        out[box] = data.reshape(s["sizes"])
    return out
