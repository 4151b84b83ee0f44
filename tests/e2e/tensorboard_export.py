#!/usr/bin/env python3
"""e2e.tensorboard_export: `trainbench-cli export RUN --format tensorboard DIR` writes an event
file that a reader independent of our writer reads back with every scalar intact.

The reader here is written from TensorFlow's documented formats, not from our C++: the TFRecord
framing of tensorflow/core/lib/io/record_writer.cc (uint64 length, masked CRC-32C of it, data,
masked CRC-32C of the data; CRC-32C computed bit by bit from the Castagnoli polynomial) and the
protocol buffer wire format of tensorflow/core/util/event.proto and framework/summary.proto. When
the `tensorboard` package is importable, its own EventFileLoader reads the file as well.

Every (step, metric) point of the run's CSV export must appear once, with the float32 of the
stored value and the step's wall time; the config must be there as a text summary.

  python3 tests/e2e/tensorboard_export.py TRAINBENCH_CLI SOURCE_DIR
"""
import csv
import io
import math
import os
import struct
import subprocess
import sys
import tempfile


def fail(msg):
    print("FAIL: tensorboard_export: " + msg)
    sys.exit(1)


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def records(blob):
    at = 0
    while at < len(blob):
        if at + 12 > len(blob):
            fail("truncated record header at byte %d" % at)
        length_bytes = blob[at:at + 8]
        (length,) = struct.unpack("<Q", length_bytes)
        (crc,) = struct.unpack("<I", blob[at + 8:at + 12])
        if crc != masked(length_bytes):
            fail("length CRC mismatch at byte %d" % at)
        data = blob[at + 12:at + 12 + length]
        (dcrc,) = struct.unpack("<I", blob[at + 12 + length:at + 16 + length])
        if dcrc != masked(data):
            fail("data CRC mismatch at byte %d" % at)
        yield data
        at += 16 + length


def fields(msg):
    """(field number, wire type, value) of a protocol buffer message."""
    at = 0
    out = []
    while at < len(msg):
        key, at = varint(msg, at)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, at = varint(msg, at)
        elif wt == 1:
            v = msg[at:at + 8]
            at += 8
        elif wt == 2:
            n, at = varint(msg, at)
            v = msg[at:at + n]
            at += n
        elif wt == 5:
            v = msg[at:at + 4]
            at += 4
        else:
            fail("unexpected wire type %d" % wt)
        out.append((num, wt, v))
    return out


def varint(buf, at):
    shift = result = 0
    while True:
        b = buf[at]
        at += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, at
        shift += 7


def read_events(path):
    with open(path, "rb") as f:
        blob = f.read()
    scalars, texts, version = {}, {}, None
    for rec in records(blob):
        wall, step, summary = None, 0, None
        for num, wt, v in fields(rec):
            if num == 1 and wt == 1:
                (wall,) = struct.unpack("<d", v)
            elif num == 2 and wt == 0:
                step = v - (1 << 64) if v >= 1 << 63 else v
            elif num == 3 and wt == 2:
                version = v.decode()
            elif num == 5 and wt == 2:
                summary = v
        if summary is None:
            continue
        for num, _, value in fields(summary):
            if num != 1:
                continue
            tag, simple, tensor = None, None, None
            for n, _, v in fields(value):
                if n == 1:
                    tag = v.decode()
                elif n == 2:
                    (simple,) = struct.unpack("<f", v)
                elif n == 8:
                    tensor = v
            if simple is not None:
                if (step, tag) in scalars:
                    fail("step %d tag %s written twice" % (step, tag))
                scalars[(step, tag)] = (simple, wall)
            elif tensor is not None:
                texts[tag] = b"".join(v for n, _, v in fields(tensor) if n == 8).decode()
    return version, scalars, texts


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def main():
    cli, src = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as tmp:
        db = os.path.join(tmp, "runs.sqlite")
        config = os.path.join(src, "tests", "ui", "data", "blobs.toml")
        subprocess.run([cli, "--db", db, "run", config, "--set", "run.steps=40",
                        "--set", "eval.interval=10"], check=True, stdout=subprocess.DEVNULL)
        out = subprocess.run([cli, "--db", db, "export", "1", "--format", "csv"], check=True,
                             capture_output=True, text=True).stdout
        logdir = os.path.join(tmp, "tb")
        msg = subprocess.run([cli, "--db", db, "export", "1", "--format", "tensorboard", logdir],
                             check=True, capture_output=True, text=True).stdout
        files = os.listdir(logdir)
        if len(files) != 1 or not files[0].startswith("events.out.tfevents."):
            fail("expected one events.out.tfevents.* file, found %s" % files)
        path = os.path.join(logdir, files[0])
        if path not in msg:
            fail("the command did not name the file: %r" % msg)
        version, scalars, texts = read_events(path)
        if version != "brain.Event:2":
            fail("file_version is %r" % version)
        rows = list(csv.reader(io.StringIO(out)))
        keys = rows[0][2:]
        want = 0
        for row in rows[1:]:
            step, time = int(row[0]), float(row[1])
            for key, cell in zip(keys, row[2:]):
                if cell == "":
                    continue
                want += 1
                got = scalars.get((step, key))
                if got is None:
                    fail("step %d %s missing" % (step, key))
                value = float(cell)
                same = (math.isnan(value) and math.isnan(got[0])) or got[0] == f32(value)
                if not same:
                    fail("step %d %s: %r, stored %r" % (step, key, got[0], value))
                if abs(got[1] - time) > 1e-6:
                    fail("step %d wall time %r, stored %r" % (step, got[1], time))
        if want != len(scalars) or want < 200:
            fail("%d scalars in the file, %d stored" % (len(scalars), want))
        if "optimizer" not in texts.get("config", "") or "[run]" not in texts["config"]:
            fail("no config text summary")
        try:
            from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
        except ImportError:
            print("(tensorboard not installed: its own reader skipped)")
        else:
            n = sum(1 for e in EventFileLoader(path).Load()
                    for v in e.summary.value if v.tag != "config")
            if n != want:
                fail("TensorBoard's reader saw %d scalars, %d stored" % (n, want))
        print("PASS: tensorboard_export: %d scalars over %d steps read back intact, config as "
              "text" % (want, len(rows) - 1))


if __name__ == "__main__":
    main()
