#!/usr/bin/env python3
"""Writes a valid progressive JPEG with far more scans than any encoder uses.

    tools/gen_many_scans_jpeg.py IN.jpg OUT.jpg     (needs jpegtran: libjpeg-turbo-progs)

IN must be a one-component (gray) JPEG. OUT holds the same coefficients in
1 + 63 * 11 = 694 scans: the DC coefficient, then every AC coefficient alone,
first at Al = 10 and refined bit by bit. jpegtran's -scans takes at most 100
scans, so each group of 7 coefficients is written by its own jpegtran run and
the scans (each with the Huffman tables before it) are spliced after one
header. tests/data/io/progressive_694_scans.jpg was made from a 16x16 noise
image: `cjpeg -quality 95` of it, then this script.
"""
import struct
import subprocess
import sys


def script(coefficients):
    lines = ["0: 0 0 0 0;"]
    for k in coefficients:
        lines.append("0: %d %d 0 10;" % (k, k))
        for al in range(9, -1, -1):
            lines.append("0: %d %d %d %d;" % (k, k, al + 1, al))
    return "\n".join(lines) + "\n"


def segments(b):
    """(marker, bytes) after SOI; a scan's entropy-coded data stays with its SOS."""
    i, out = 2, []
    while i < len(b):
        assert b[i] == 0xFF, i
        m = b[i + 1]
        if m == 0xD9:
            out.append((m, b[i:i + 2]))
            break
        j = i + 2 + struct.unpack(">H", b[i + 2:i + 4])[0]
        if m == 0xDA:
            while not (b[j] == 0xFF and b[j + 1] != 0 and not 0xD0 <= b[j + 1] <= 0xD7):
                j += 1
        out.append((m, b[i:j]))
        i = j
    return out


def main(src, dst, scans_file="/tmp/gen_many_scans.txt"):
    header, scans = None, []
    for first in range(1, 64, 7):
        with open(scans_file, "w") as f:
            f.write(script(range(first, min(first + 7, 64))))
        b = subprocess.run(["jpegtran", "-scans", scans_file, src], capture_output=True,
                           check=True).stdout
        segs = segments(b)
        sos = next(i for i, (m, _) in enumerate(segs) if m == 0xDA)
        k = sos
        while segs[k - 1][0] == 0xC4:
            k -= 1
        if header is None:  # the header and the DC scan, once
            header = b"".join(s for _, s in segs[:k])
            scans.append(b"".join(s for _, s in segs[k:sos + 1]))
        current = []
        for m, s in segs[sos + 1:]:
            if m == 0xD9:
                break
            current.append(s)
            if m == 0xDA:
                scans.append(b"".join(current))
                current = []
    with open(dst, "wb") as f:
        f.write(b"\xff\xd8" + header + b"".join(scans) + b"\xff\xd9")
    print("%s: %d scans" % (dst, len(scans)))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
