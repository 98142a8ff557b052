#!/usr/bin/env python3
"""Token-id goldens for models/clip/clip_tokenizer (tests/models/test_clip_tokenizer.cpp).

Oracles, run on the same texts and the same vocabulary:
  simple: SAM3's SimpleTokenizer (facebookresearch/sam3 sam3/model/tokenizer_ve.py,
          clean="lower"), loaded from --sam3-tokenizer (a file outside this repo),
          cross-checked against open_clip's SimpleTokenizer (open_clip_torch);
  hf:     transformers' slow CLIPTokenizer (vocab.json + merges.txt), ftfy installed.
torch is stubbed with numpy: the tokenizers use it only to hold the padded ids.

The committed fixture is a consistent smaller vocabulary: the header and the
first --merges merges of open_clip's bpe_simple_vocab_16e6.txt.gz, written as
.txt.gz (SimpleTokenizer) and as vocab.json + merges.txt (transformers, the
layout of CLIP-L's tokenizer_2). --merges 0 keeps the whole file (the real
vocabulary; too big to commit).

ftfy's fix_encoding (mojibake repair) is not reproduced in C++: every case is
also run with ftfy.fix_text(..., fix_encoding=False); where that changes the
ids, the case is marked "mojibake", "simple"/"hf" hold the ids without
fix_encoding and "ftfy_simple"/"ftfy_hf" the references' own.

Usage (the venv of transformers 4.46, ftfy, regex, open_clip_torch --no-deps):
  python3 tools/clip_tokenizer_goldens.py --sam3-tokenizer /tmp/x/tokenizer_ve.py \
      --out tests/data/clip_tokenizer --merges 3000
"""
import argparse
import functools
import gzip
import importlib.util
import json
import os
import sys
import types

import numpy as np


def stub_modules() -> None:
    torch = types.ModuleType("torch")
    torch.LongTensor = np.ndarray
    torch.Tensor = np.ndarray
    torch.long = np.int64
    torch.zeros = lambda *shape, dtype=None: np.zeros(shape, dtype=np.int64)
    torch.tensor = lambda x, **_: np.asarray(x, dtype=np.int64)
    sys.modules.setdefault("torch", torch)
    iopath = types.ModuleType("iopath")
    common = types.ModuleType("iopath.common")
    file_io = types.ModuleType("iopath.common.file_io")
    file_io.g_pathmgr = types.SimpleNamespace(open=open)
    sys.modules.update({"iopath": iopath, "iopath.common": common, "iopath.common.file_io": file_io})


def load_module(name: str, path: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def texts() -> list:
    t = [
        "a photo of a cat", "A Photo Of A CAT", "dog", "", " ", "   \t\n  ", "a", "I",
        "the quick brown fox jumps over the lazy dog",
        "THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG",
        "person riding a horse", "red car . blue truck", "a dog, a cat; and a bird!",
        "it's", "It'S", "we're", "they've", "I'm", "you'll", "he'd", "don't", "DON'T",
        "can't won't shouldn't", "the cat's toy", "rock 'n' roll", "'s'", "''", "'''",
        "o'clock", "l'homme d'affaires", "'re're're", "'ll'd'm",
        "123", "2024-01-05", "3.14159", "1,000,000", "007 agent", "x2 y3z4", "\u0661\u0662\u0663",
        "\u096a\u096b", "\u2460\u2461", "\u00bd \u00be", "\u2167", "\uff11\uff12\uff13",
        "!!!", "???!!!...", "...", "--->", "<=>", "@#$%^&*()", "a+b=c", "foo_bar-baz",
        "path/to/file.txt", "https://example.com/a?b=c&d=e", "user@example.com", "#hashtag",
        "$100.00", "50%", "(parenthesized)", "[brackets]", "{braces}", "~tilde~",
        "\"double quotes\"", "`backticks`", "a|b|c", "\\backslash\\", "semi;colon:colon",
        "caf\u00e9", "cafe\u0301", "na\u00efve", "\u00fcber", "stra\u00dfe", "STRASSE",
        "\u1e9e", "\u0130stanbul", "\u0130", "I\u0307", "\u03a3\u039f\u03a6\u039f\u03a3",
        "\u039f\u0394\u03a5\u03a3\u03a3\u0395\u03a5\u03a3", "\u03c3\u03bf\u03c6\u03bf\u03c2",
        "\u0391\u03b8\u03ae\u03bd\u03b1", "\u041c\u043e\u0441\u043a\u0432\u0430",
        "\u041f\u0420\u0418\u0412\u0415\u0422 \u043c\u0438\u0440",
        "\u0627\u0644\u0633\u0644\u0627\u0645 \u0639\u0644\u064a\u0643\u0645",
        "\u05e9\u05dc\u05d5\u05dd", "\u0928\u092e\u0938\u094d\u0924\u0947",
        "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35", "\u4f60\u597d\u4e16\u754c",
        "\u732b\u304c\u597d\u304d", "\u3053\u3093\u306b\u3061\u306f", "\u30ab\u30bf\u30ab\u30ca",
        "\uc548\ub155\ud558\uc138\uc694", "\u1100\u1161\u11a8", "\u00c5ngstr\u00f6m",
        "A\u030angstro\u0308m", "\u212b", "\u2126", "\u00c6sir \u00e6", "\u0152uvre \u0153",
        "\u0110\u0111", "\u0141\u00f3d\u017a", "Dvo\u0159\u00e1k", "\u01c4 \u01c5 \u01c6",
        "\u01f1\u01f2\u01f3", "\u0132sselmeer \u0133s", "\u0149", "\ufb01ne \ufb02ow \ufb00 \ufb03 \ufb04",
        "\ufb05 \ufb06", "\u2160\u2161", "\u00b5", "\u00aa\u00ba", "\u02b0\u02b2",
        "\U0001f600", "\U0001f431 cat", "\U0001f468\u200d\U0001f469\u200d\U0001f467",
        "\U0001f44d\U0001f3fd", "\u2764\ufe0f", "\U0001f1fa\U0001f1f8", "\u00a9 \u00ae \u2122",
        "\u2603", "\u2190\u2192", "\u00b0C", "\u20ac5", "\u00a3 \u00a5",
        "&amp;", "&lt;b&gt;", "fish &amp; chips", "&amp;amp;", "&amp;amp;amp;lt;",
        "&quot;quoted&quot;", "&#39;single&#39;", "&#x27;hex&#x27;", "&#X41;&#65;", "&copy; 2024",
        "&nbsp;space", "caf&eacute;", "CAF&EACUTE;", "&Eacute;", "&notit; &notin;", "&not",
        "&notin", "&ampx", "&amp", "&AMP;", "&lt", "&gt", "&#0;", "&#128;", "&#x80;", "&#150;",
        "&#x9d;", "&#1;", "&#xd800;", "&#x110000;", "&#99999999999999999999;", "&#xfffe;",
        "&#13;", "&#65", "&#x41", "&#", "&#;", "&#x;", "&unknown;", "& amp;", "&&amp;",
        "&amp;<", "<b>&amp;</b>", "a<b &amp; c", "&amp;\n<", "<\n&amp;", "&euro;&hellip;&mdash;",
        "&lsquo;x&rsquo;", "&ldquo;y&rdquo;", "&Alpha;&alpha;", "&ALPHA;", "&thetasym;",
        "&ncaron;", "&NCARON;", "&fjlig;", "&ThickSpace;", "&nGt;", "&acE;", "&#65a;",
        "&#x1F600;", "&#128512;", "&amp;#39;", "&lt;start_of_text&gt;",
        "\u2018single\u2019", "\u201cdouble\u201d", "\u201a\u201b\u201e\u201f", "it\u2019s",
        "don\u2019t", "\u02bcokina", "\u2032prime\u2033", "\u00abguillemets\u00bb",
        "\uff28\uff45\uff4c\uff4c\uff4f", "\uff21\uff22\uff23\uff01\uff1f", "\uff08\uff09",
        "\u3000ideographic\u3000space\u3000", "\uff76\uff80\uff76\uff85", "\uffe5\uffe1",
        "\uffe8\uffed", "\uff5e",
        "tab\tseparated\tvalues", "new\nline", "crlf\r\nline", "cr\rline", "\u2028ls\u2029ps",
        "nel\u0085x", "\u00a0nbsp\u00a0", "em\u2003space", "thin\u2009space", "zero\u200bwidth",
        "zwj\u200dzwnj\u200c", "\u200eltr\u200f", "soft\u00adhyphen", "bom\ufeffmark",
        "\x01\x02ctrl\x7f", "\x1b[31mred\x1b[0m", "\x1b[1;32mbold", "\x1b[x", "bell\x07",
        "c1\x80\x81\x8d\x9f", "\x91quote\x92", "\x93dq\x94", "\x85", "\x96dash\x97",
        "\u206a\u206finv", "\ufff9ann\ufffb\ufffc", "\u00ad", "vt\x0bff\x0cx",
        "\x1c\x1d\x1e\x1fsep", "  leading and trailing  ", "many     spaces    here",
        "<start_of_text>", "<end_of_text>", "<START_OF_TEXT>", "a <end_of_text> b",
        "x<start_of_text>y<end_of_text>z", "<|startoftext|>", "<|endoftext|>",
        "<|ENDOFTEXT|>", "a<|endoftext|>b", "&amp;<|endoftext|>&amp;", "<|startoftext|>hi",
        "<start_of_text><|endoftext|>", "<end_of_text", "start_of_text>", "<|endoftext",
        "<\u017ftart_of_text>", "\u00c3\u00a9t\u00c3\u00a9", "Ã©tÃ©", "sÃ³", "voilÃ\xa0",
        "â€œquotedâ€\x9d", "I don\u00e2\u20ac\u2122t", "\u00c3\u00bcber",
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        "abababababababababababababab", "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
        "supercalifragilisticexpialidocious", "pneumonoultramicroscopicsilicovolcanoconiosis",
        "Llanfairpwllgwyngyllgogerychwyrndrobwllllantysiliogogogoch",
        "the the the the the", "eeeeeeeeeeeeeeeeeeeee", "lllllll", "1111111111111111",
        "!!!!!!!!!!!!!!!!!!!!!!!!!", "\u4e00" * 40, "\U0001f600" * 12,
        # Unicode spaces: the split regex's \s (Python regex vs PCRE2).
        "a\u1680b", "a\u180eb", "a\u2007b\u202fc\u205fd", "a\u2000\u200ab", "x\x0cy",
        "\u00a0\u00a0", "a\u3000\u3000b", "line1\nline2 &amp;\nline3 < &amp;\nline4 &amp;",
        "&amp;amp;\r\n&lt;", "\uff06amp;", "&\uff41mp;", "\u2018\u2018nested\u2019\u2019",
        "ﬁ&amp;ﬂ", "A\u0308\u0301", "\u1e9b\u0323", "\u0345", "\u1f88", "\u0149N",
        "K\u212a", "\u01c5\u01c8\u01cb\u01f2", "\u10a0\u2c00", "\u0587", "\ufb13",
        "\U0001d400\U0001d41a", "\U00010400", "\u2126\u212b\u212a",
    ]
    words = ["segment", "the", "small", "blue", "ball", "next", "to", "a", "striped",
             "umbrella", "on", "beach", "player's", "jersey", "number", "23"]
    for n in (10, 15, 20, 29, 30, 31, 40, 60, 74, 75, 76, 90, 200):
        t.append(" ".join(words[i % len(words)] for i in range(n)))
    t.append("a " * 500)
    t.append(("very long prompt with many words, " * 40).strip())
    # Mixtures: every pair of a few categories.
    parts = ["Cat", "it's", "42", "!?", "caf\u00e9", "\u732b", "\U0001f431", "&amp;", "\u201cq\u201d",
             "\uff21", "\ufb01", "\u0130", "<end_of_text>", "<|endoftext|>", "\x85", "\t"]
    for a in parts:
        for b in parts[::3]:
            t.append(a + " " + b)
            t.append(a + b)
    return t


def write_fixture(full_gz: str, merges: int, out: str) -> None:
    lines = gzip.open(full_gz).read().decode("utf-8").split("\n")
    keep = lines[: 1 + merges] if merges else lines[: 49152 - 256 - 2 + 1]
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "bpe_simple_vocab.txt.gz"), "wb") as f:
        with gzip.GzipFile(fileobj=f, mode="wb", mtime=0, filename="") as g:
            g.write("\n".join(keep).encode("utf-8"))
    # transformers' layout (CLIP-L tokenizer_2): the same ids, "<|...|>" specials.
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1)) + \
        list(range(ord("\u00ae"), ord("\u00ff") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    vocab = [chr(c) for c in cs]
    vocab += [v + "</w>" for v in vocab]
    vocab += ["".join(m.split()) for m in keep[1:]]
    vocab += ["<|startoftext|>", "<|endoftext|>"]
    with open(os.path.join(out, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump({v: i for i, v in enumerate(vocab)}, f, ensure_ascii=False)
    with open(os.path.join(out, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "\n".join(keep[1:]) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sam3-tokenizer", required=True, help="sam3/model/tokenizer_ve.py")
    ap.add_argument("--out", required=True)
    ap.add_argument("--merges", type=int, default=3000, help="0: all (the real vocabulary)")
    ap.add_argument("--sweep", action="store_true",
                    help="every code point (ids only, fix_encoding off; not committed)")
    ap.add_argument("--sweep-format", default="a{}a", help="the text of each code point")
    args = ap.parse_args()

    import ftfy
    from transformers import CLIPTokenizer  # before the stub: it probes for torch

    stub_modules()

    # open_clip's package __init__ needs the real torch: use its files only.
    oc_dir = importlib.util.find_spec("open_clip").submodule_search_locations[0]
    full_gz = os.path.join(oc_dir, "bpe_simple_vocab_16e6.txt.gz")
    write_fixture(full_gz, args.merges, args.out)
    gz = os.path.join(args.out, "bpe_simple_vocab.txt.gz")
    sam3 = load_module("sam3_tokenizer_ve", args.sam3_tokenizer)
    oc = load_module("open_clip_tokenizer",
                     os.path.join(oc_dir, "tokenizer.py"))
    simple = sam3.SimpleTokenizer(bpe_path=gz, context_length=32)
    oc_simple = oc.SimpleTokenizer(bpe_path=gz)
    hf = CLIPTokenizer(os.path.join(args.out, "vocab.json"), os.path.join(args.out, "merges.txt"))
    assert hf.fix_text is ftfy.fix_text, "transformers must take its ftfy path"
    assert hf.pad_token == "<|endoftext|>", hf.pad_token

    real_fix = ftfy.fix_text
    no_fix_encoding = functools.partial(real_fix, fix_encoding=False)

    def run(fix):
        sam3.ftfy.fix_text = fix  # the module's own ftfy reference
        oc.ftfy.fix_text = fix
        hf.fix_text = fix
        hf.cache = {"<|startoftext|>": "<|startoftext|>", "<|endoftext|>": "<|endoftext|>"}
        simple.cache = {t: t for t in ["<start_of_text>", "<end_of_text>"]}
        oc_simple.cache = {t: t for t in ["<start_of_text>", "<end_of_text>"]}
        out = []
        for text in texts():
            s_ids = simple.encode(text)
            o_ids = oc_simple.encode(text)
            out.append({
                "simple": s_ids,
                "open_clip_agrees": o_ids == s_ids,
                "simple_ctx32": simple(text)[0].tolist(),
                "simple_ctx16": simple(text, context_length=16)[0].tolist(),
                "hf": hf(text, add_special_tokens=False)["input_ids"],
                "hf_77": hf(text, max_length=77, truncation=True, padding="max_length")["input_ids"],
            })
        return out

    if args.sweep:
        sam3.ftfy.fix_text = oc.ftfy.fix_text = hf.fix_text = no_fix_encoding
        cases = []
        for cp in range(0x110000):
            if 0xD800 <= cp < 0xE000:
                continue
            # Between letters, so that a character the two sides classify
            # differently (letter, digit, space, other) splits differently.
            text = args.sweep_format.format(chr(cp))
            cases.append({"text": text, "simple": simple.encode(text),
                          "hf": hf(text, add_special_tokens=False)["input_ids"]})
            simple.cache.clear()
            simple.cache.update({t: t for t in ["<start_of_text>", "<end_of_text>"]})
            hf.cache = {"<|startoftext|>": "<|startoftext|>", "<|endoftext|>": "<|endoftext|>"}
        with open(os.path.join(args.out, "cases.json"), "w", encoding="utf-8") as f:
            json.dump({"sot": simple.sot_token_id, "eot": simple.eot_token_id, "cases": cases}, f)
        return

    ref = run(real_fix)
    plain = run(no_fix_encoding)
    cases = []
    for text, r, p in zip(texts(), ref, plain):
        c = {"text": text}
        c.update(p)
        if r != p:
            c["mojibake"] = True
            c["ftfy_simple"] = r["simple"]
            c["ftfy_hf"] = r["hf"]
        cases.append(c)
    disagree = [c["text"] for c in cases if not c.pop("open_clip_agrees")]
    doc = {
        "generator": "tools/clip_tokenizer_goldens.py",
        "merges": args.merges,
        "sot": simple.sot_token_id, "eot": simple.eot_token_id,
        "cases": cases,
    }
    with open(os.path.join(args.out, "cases.json"), "w", encoding="utf-8") as f:
        # One case a line: small, and diffs show which texts changed.
        head = {k: v for k, v in doc.items() if k != "cases"}
        f.write(json.dumps(head)[:-1] + ', "cases": [\n')
        f.write(",\n".join(json.dumps(c, separators=(",", ":")) for c in cases))
        f.write("\n]}\n")
    print(f"{len(cases)} cases, {sum('mojibake' in c for c in cases)} mojibake; "
          f"open_clip disagrees with sam3 on {len(disagree)}: {disagree[:5]}", file=sys.stderr)


if __name__ == "__main__":
    main()
