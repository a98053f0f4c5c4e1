#!/usr/bin/env python3
"""Hostile and unsupported torch.save files are refused with clear errors (docs/spec/FILES.md §8).

    test_pt_hostile.py                      the test: each file through `shardload inspect FILE`
    test_pt_hostile.py --corpus PKL ZIP     writes the fuzz seed corpora (data.pkl files, whole files)

Each case is a file and a phrase the error must contain; the tool must exit non-zero and must not
crash (a signal fails the test). Real files come from torch.save; hostile ones are written by hand
(pickle opcodes as bytes, zip archives with the standard zipfile module). Exit 77 without torch.
"""
import collections
import io
import os
import struct
import subprocess
import sys
import tempfile
import zipfile

try:
    import torch
except ImportError:
    print("torch is not available: skipped")
    sys.exit(77)


def zip_bytes(entries, method=zipfile.ZIP_STORED):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=method) as z:
        for name, data in entries:
            z.writestr(name, data)
    return buf.getvalue()


def torch_bytes(obj, **kw):
    buf = io.BytesIO()
    torch.save(obj, buf, **kw)
    return buf.getvalue()


def rezip(data, change_pkl=None, method=zipfile.ZIP_STORED):
    """A torch.save archive rewritten by zipfile, data.pkl optionally changed."""
    src = zipfile.ZipFile(io.BytesIO(data))
    entries = []
    for info in src.infolist():
        content = src.read(info.filename)
        if change_pkl is not None and info.filename.endswith("/data.pkl"):
            content = change_pkl(content)
        entries.append((info.filename, content))
    return zip_bytes(entries, method)


def pkl_of(data):
    z = zipfile.ZipFile(io.BytesIO(data))
    return z.read([n for n in z.namelist() if n.endswith("/data.pkl")][0])


def good_state():
    sd = collections.OrderedDict()
    sd["w"] = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    sd["b"] = torch.ones(4, dtype=torch.bfloat16)
    sd["v"] = torch.arange(10, dtype=torch.float16)[2:6]
    return sd


def hostile_pickles():
    """(name, data.pkl bytes, phrase)."""
    p = []
    p.append(("posix_system", b"\x80\x02cposix\nsystem\nX\x02\x00\x00\x00lsq\x00\x85R.",
              "global 'posix.system' is not allowed"))
    p.append(("os_system", b"\x80\x02cos\nsystem\n)R.", "global 'os.system' is not allowed"))
    p.append(("builtins_eval", b"\x80\x02cbuiltins\neval\nX\x01\x00\x00\x001\x85R.",
              "global 'builtins.eval' is not allowed"))
    p.append(("nested_tuples", b"\x80\x02)" + b"\x85" * 100 + b".", "nested more than"))
    p.append(("nested_lists", b"\x80\x02" + b"]" * 100 + b"a" * 99 + b".", "nested more than"))
    p.append(("deep_marks", b"\x80\x02" + b"(" * 1000 + b".", "MARKs nested more than"))
    p.append(("huge_string", b"\x80\x02X\xff\xff\xff\xff" + b"a" * 16 + b".", "exceeds the limit"))
    p.append(("sparse_memo", b"\x80\x02}r\xff\xff\xff\x7f.", "memo index"))
    p.append(("inst_opcode", b"\x80\x02(ios\nsystem\n.", "opcode INST"))
    p.append(("not_a_dict", b"\x80\x02K\x01.", "a state dict"))
    p.append(("no_stop", b"\x80\x02}", "without STOP"))
    p.append(("long_int", b"\x80\x02\x8a\x09" + b"\x01" * 9 + b".", "does not fit"))
    return p


def cases():
    """(name, file bytes, phrase)."""
    good = torch_bytes(good_state())
    c = [("good", good, None)]
    for name, pkl, phrase in hostile_pickles():
        c.append((name, zip_bytes([("archive/data.pkl", pkl), ("archive/version", b"3\n")]), phrase))
    # A storage offset past the storage: 'v' is a view at offset 2 (BININT1 2 after BINPERSID).
    c.append(("offset_past_entry", rezip(good, lambda b: b.replace(b"Q K\x02".replace(b" ", b""), b"QK\xc8", 1)),
              "runs past its storage"))
    c.append(("numel_lie", rezip(good, lambda b: b.replace(b"K\x06t", b"K\x60t", 1)), "holds 24 bytes"))
    c.append(("compressed", rezip(good, method=zipfile.ZIP_DEFLATED), "is compressed"))
    c.append(("legacy", torch_bytes(good_state(), _use_new_zipfile_serialization=False), "legacy"))
    c.append(("non_contiguous", torch_bytes({"t": torch.zeros(3, 4).t()}), "not contiguous"))
    c.append(("not_a_tensor", torch_bytes({"a": 1}), "is a int, not a tensor"))
    c.append(("nested_state", torch_bytes({"model": good_state()}), "is a dict, not a tensor"))
    c.append(("truncated", good[: len(good) // 2], "not a zip archive"))
    c.append(("empty", b"", "too short"))
    return c


def newer_storage_cases():
    """(name, file bytes, inspect line expected) for the storage types torch >= 2.1 writes; the
    installed torch may be older, so its file is rewritten to name the newer storage class (the
    pickle's GLOBAL opcode names it as text; the bytes stay as saved)."""
    out = []
    for old, new, dtype, shown in (
            (b"ByteStorage", b"Float8_e4m3fnStorage", torch.uint8, "F8_E4M3"),
            (b"ByteStorage", b"Float8_e5m2Storage", torch.uint8, "F8_E5M2"),
            (b"ByteStorage", b"Float8_e8m0fnuStorage", torch.uint8, "F8_E8M0"),
            (b"ShortStorage", b"UInt16Storage", torch.int16, "U16"),
            (b"IntStorage", b"UInt32Storage", torch.int32, "U32"),
            (b"LongStorage", b"UInt64Storage", torch.int64, "U64")):
        data = torch_bytes({"t": torch.arange(6, dtype=dtype).reshape(2, 3)})
        new_data = rezip(data, lambda b: b.replace(b"ctorch\n" + old + b"\n", b"ctorch\n" + new + b"\n", 1))
        assert new_data != rezip(data), "storage class %r not found in the pickle" % old
        out.append((new.decode(), new_data, " %s " % shown))
    return out


def write_corpus(pkl_dir, zip_dir):
    os.makedirs(pkl_dir, exist_ok=True)
    os.makedirs(zip_dir, exist_ok=True)
    for name, data, _ in cases():
        with open(os.path.join(zip_dir, name), "wb") as f:
            f.write(data)
        try:
            pkl = pkl_of(data)
        except Exception:
            continue
        with open(os.path.join(pkl_dir, name), "wb") as f:
            f.write(pkl)
    with open(os.path.join(pkl_dir, "parameter"), "wb") as f:
        f.write(pkl_of(torch_bytes({"p": torch.nn.Parameter(torch.zeros(2))})))


def main(argv):
    if len(argv) == 3 and argv[0] == "--corpus":
        write_corpus(argv[1], argv[2])
        return 0
    cli = os.environ.get("SL_CLI", "shardload")
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, data, phrase in cases():
            path = os.path.join(tmp, name + ".bin")
            with open(path, "wb") as f:
                f.write(data)
            r = subprocess.run([cli, "inspect", path], capture_output=True, text=True)
            out = r.stdout + r.stderr
            ok = r.returncode == 0 if phrase is None else (r.returncode > 0 and phrase in out)
            if r.returncode < 0:
                ok = False
            if not ok:
                failures += 1
                print("FAIL %s: exit %d, expected %s\n%s" % (name, r.returncode, phrase or "success", out))
            else:
                print("ok   %s: %s" % (name, out.strip().splitlines()[-1] if out.strip() else ""))
        for name, data, expect in newer_storage_cases():
            path = os.path.join(tmp, name + ".bin")
            with open(path, "wb") as f:
                f.write(data)
            r = subprocess.run([cli, "inspect", path], capture_output=True, text=True)
            line = [l for l in r.stdout.splitlines() if l.strip().startswith("t ")]
            if r.returncode != 0 or len(line) != 1 or expect not in line[0] or "[2, 3]" not in line[0]:
                failures += 1
                print("FAIL %s: exit %d, expected tensor t with%s\n%s%s" % (name, r.returncode, expect, r.stdout,
                                                                             r.stderr))
            else:
                print("ok   %s: %s" % (name, line[0].strip()))
    print("%d failures" % failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
