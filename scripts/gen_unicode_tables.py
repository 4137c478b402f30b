#!/usr/bin/env python3
"""Writes lib/tokenizer/unicode_tables.h: the code point classes the Qwen2 pre-tokenizer needs.

Reads the Unicode Character Database as Debian's `unicode-data` package installs it
(/usr/share/unicode): UnicodeData.txt for the general categories and PropList.txt for White_Space.
The tables are sorted, non-overlapping, merged [first, last] ranges of
  - letters: general category L* (Lu, Ll, Lt, Lm, Lo), what the regex \\p{L} matches;
  - numbers: general category N* (Nd, Nl, No), what \\p{N} matches;
  - white space: the White_Space property, what \\s matches.
Code points absent from UnicodeData.txt (unassigned, category Cn) are in none of them.

The output depends only on the input files (no dates, no environment), so a test can rerun the script
and compare with the committed file.

Usage: gen_unicode_tables.py [--ucd DIR] [--out FILE]
       gen_unicode_tables.py --check FILE   (exit 0 when FILE is what the script would write, 1 when it
                                             differs, 77 (skip) when the UCD is not installed)
"""

import argparse
import os
import re
import sys

DEFAULT_UCD = "/usr/share/unicode"
MAX_CP = 0x10FFFF


def read_version(ucd):
    """The UCD version, from the first line of PropList.txt ("# PropList-15.0.0.txt")."""
    with open(os.path.join(ucd, "PropList.txt"), encoding="utf-8") as f:
        first = f.readline()
    m = re.match(r"#\s*PropList-(\d+\.\d+\.\d+)\.txt", first)
    if not m:
        sys.exit("gen_unicode_tables: cannot find the UCD version in the first line of PropList.txt: %r" % first)
    return m.group(1)


def read_categories(ucd):
    """Yields (first, last, general_category) for every entry of UnicodeData.txt. The "<..., First>" /
    "<..., Last>" line pairs (CJK ideographs, Hangul syllables, private use, ...) become one range."""
    pending = None  # (first code point, name prefix, category) of an open "First>" entry
    with open(os.path.join(ucd, "UnicodeData.txt"), encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            fields = line.split(";")
            if len(fields) < 3:
                sys.exit("gen_unicode_tables: UnicodeData.txt:%d: malformed line" % lineno)
            cp = int(fields[0], 16)
            name, cat = fields[1], fields[2]
            if name.endswith(", First>"):
                if pending is not None:
                    sys.exit("gen_unicode_tables: UnicodeData.txt:%d: nested First> entry" % lineno)
                pending = (cp, name[: -len(", First>")], cat)
                continue
            if name.endswith(", Last>"):
                if pending is None or pending[1] != name[: -len(", Last>")] or pending[2] != cat:
                    sys.exit("gen_unicode_tables: UnicodeData.txt:%d: Last> entry without its First>" % lineno)
                yield pending[0], cp, cat
                pending = None
                continue
            if pending is not None:
                sys.exit("gen_unicode_tables: UnicodeData.txt:%d: First> entry without its Last>" % lineno)
            yield cp, cp, cat
    if pending is not None:
        sys.exit("gen_unicode_tables: UnicodeData.txt ends inside a First>/Last> range")


def read_property(ucd, prop):
    """Yields (first, last) for every PropList.txt line of the property."""
    with open(os.path.join(ucd, "PropList.txt"), encoding="utf-8") as f:
        for line in f:
            data = line.split("#", 1)[0].strip()
            if not data:
                continue
            cps, name = [x.strip() for x in data.split(";")]
            if name != prop:
                continue
            if ".." in cps:
                a, b = cps.split("..")
                yield int(a, 16), int(b, 16)
            else:
                yield int(cps, 16), int(cps, 16)


def merge(ranges):
    """Sorts and merges overlapping or adjacent ranges."""
    out = []
    for a, b in sorted(ranges):
        if a > b or b > MAX_CP:
            sys.exit("gen_unicode_tables: bad range %04X..%04X" % (a, b))
        if out and a <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [tuple(r) for r in out]


def format_table(name, comment, ranges):
    lines = ["// %s (%d ranges)." % (comment, len(ranges)), "inline constexpr Range %s[] = {" % name]
    per_line = 5
    for i in range(0, len(ranges), per_line):
        chunk = ranges[i : i + per_line]
        lines.append("    " + " ".join("{0x%04X, 0x%04X}," % r for r in chunk))
    lines.append("};")
    return "\n".join(lines)


def generate(ucd):
    version = read_version(ucd)
    letters, numbers = [], []
    for a, b, cat in read_categories(ucd):
        if cat.startswith("L"):
            letters.append((a, b))
        elif cat.startswith("N"):
            numbers.append((a, b))
    letters, numbers = merge(letters), merge(numbers)
    space = merge(read_property(ucd, "White_Space"))
    if not letters or not numbers or not space:
        sys.exit("gen_unicode_tables: an empty table; is %s a Unicode Character Database?" % ucd)
    parts = [
        "// Generated by scripts/gen_unicode_tables.py from the Unicode Character Database %s" % version,
        "// (UnicodeData.txt: general categories; PropList.txt: White_Space). Do not edit by hand: rerun",
        "// the script (a test checks that this file is what it writes).",
        "#pragma once",
        "",
        "#include <cstdint>",
        "",
        "namespace minfer::tokenizer::unicode {",
        "",
        "// An inclusive range of code points.",
        "struct Range {",
        "    uint32_t first, last;",
        "};",
        "",
        'inline constexpr const char kUcdVersion[] = "%s";' % version,
        "",
        format_table("kLetter", "General category L* (\\p{L})", letters),
        "",
        format_table("kNumber", "General category N* (\\p{N})", numbers),
        "",
        format_table("kWhiteSpace", "Property White_Space (\\s)", space),
        "",
        "}  // namespace minfer::tokenizer::unicode",
        "",
    ]
    return "\n".join(parts)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    default_out = os.path.join(os.path.dirname(here), "lib", "tokenizer", "unicode_tables.h")
    ap = argparse.ArgumentParser(description="Generate the tokenizer's Unicode tables.")
    ap.add_argument("--ucd", default=DEFAULT_UCD, help="directory of the UCD files (default %(default)s)")
    ap.add_argument("--out", default=default_out, help="file to write (default lib/tokenizer/unicode_tables.h)")
    ap.add_argument("--check", metavar="FILE", help="compare FILE with the output instead of writing")
    args = ap.parse_args()

    if not os.path.exists(os.path.join(args.ucd, "UnicodeData.txt")):
        msg = "gen_unicode_tables: %s/UnicodeData.txt not found (Debian: apt-get install unicode-data)" % args.ucd
        if args.check:
            print(msg + "; skipping the check")
            sys.exit(77)
        sys.exit(msg)
    text = generate(args.ucd)
    if args.check:
        with open(args.check, encoding="utf-8", newline="") as f:
            old = f.read()
        if old != text:
            print("gen_unicode_tables: %s differs from what the script writes; rerun it" % args.check)
            sys.exit(1)
        print("gen_unicode_tables: %s is up to date" % args.check)
        return
    tmp = args.out + ".tmp"
    with open(tmp, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)
    os.replace(tmp, args.out)


if __name__ == "__main__":
    main()
