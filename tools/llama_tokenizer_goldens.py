#!/usr/bin/env python3
"""Golden token ids for flick's LLaMA-3 byte-level BPE tokenizer (models/llama).

The oracle is Hugging Face `tokenizers` (what transformers' LlamaTokenizerFast
runs). Two vocabularies:

  fixture: a small byte-level BPE trained here with the exact configuration of
           the LLaMA-3 tokenizer.json that HunyuanVideo's `tokenizer/` ships
           (Split on the LLaMA-3 regex, ByteLevel without prefix space,
           ignore_merges, the special tokens appended after the vocabulary,
           <|begin_of_text|> added by a TemplateProcessing post-processor).
           Written to tests/data/llama_tokenizer/ (tokenizer.json + cases.json).
  --real:  a real tokenizer.json (e.g. hunyuanvideo-community/HunyuanVideo
           tokenizer/tokenizer.json); writes cases for it to --out, for
           tests/models/test_llama_tokenizer's FLICK_LLAMA_TOKENIZER check.

Usage: python tools/llama_tokenizer_goldens.py [--real tokenizer.json --out cases.json]
Needs: pip install tokenizers (0.19 or later).
"""
import argparse
import json
import random
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# diffusers' HunyuanVideo DEFAULT_PROMPT_TEMPLATE (FramePack diffusers_helper/hunyuan.py).
HUNYUAN_TEMPLATE = (
    "<|start_header_id|>system<|end_header_id|>\n\nDescribe the video by detailing the following aspects: "
    "1. The main content and theme of the video."
    "2. The color, shape, size, texture, quantity, text, and spatial relationships of the objects."
    "3. Actions, events, behaviors temporal relationships, physical movement changes of the objects."
    "4. background environment, light, style and atmosphere."
    "5. camera angles, movements, and transitions used in the video:<|eot_id|>"
    "<|start_header_id|>user<|end_header_id|>\n\n{}<|eot_id|>")

SPECIALS = (["<|begin_of_text|>", "<|end_of_text|>"] +
            [f"<|reserved_special_token_{i}|>" for i in range(4)] +
            ["<|start_header_id|>", "<|end_header_id|>", "<|reserved_special_token_4|>", "<|eot_id|>"] +
            [f"<|reserved_special_token_{i}|>" for i in range(5, 12)])

TRAINING_TEXT = """
The girl dances gracefully, with clear movements, full of charm. A car drives
down a rain-soaked street at night; neon signs reflect in the puddles. It's 3:45 pm,
we'll see 12,345 frames. Don't they've I'm you're he'd she'll. Camera pans left,
then zooms in slowly on the mountain lake (4K, 60 fps). Ünïcödé straße façade naïve
café — “quotes” ‘single’ … Привет мир, это видео. Γειά σου κόσμε. 日本語の文章です。
中文字符和标点符号，测试。한국어 텍스트. مرحبا بالعالم. 🙂🎬🚗 emoji and ✓ symbols.
\tTabs\tand    spaces\r\nWindows lines\n\n\nmany newlines   trailing spaces   
Numbers 1 22 333 4444 55555 3.14159 1e-5 0x1F ١٢٣ １２３ ½ ² Ⅻ
"""


def build_fixture_tokenizer() -> Tokenizer:
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1200, min_frequency=1, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([TRAINING_TEXT] * 4, trainer=trainer)
    tok.add_special_tokens(SPECIALS)
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                      pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
                                      special_tokens=[("<|begin_of_text|>", bos)]),
    ])
    return tok


def prompts(n_random: int) -> list:
    fixed = [
        "", " ", "  ", "\n", "\r\n", "\t", "a", "A", "hello world", " hello", "hello ",
        "The quick brown fox jumps over the lazy dog.",
        "A girl dances gracefully in the rain, with clear movements, full of charm.",
        "It's they're we've I'm you'd she'll IT'S THEY'RE WE'VE I'M YOU'D SHE'LL",
        "don't  'S 'LL 'Ll x's a'b '", "ſ 'ſ 'K 'ſt",
        "123 4567 89012 1234567890", "3.14159 -2.5e-10 1,000,000", "١٢٣٤ １２３４ ½²³ Ⅻ",
        "line1\nline2\r\nline3\n\n\nline4", "trailing spaces   ", "   leading spaces",
        "tabs\t\tand\tmore", "a\u00a0b\u2028c\u0085d\u3000e\u200be\u180ef",
        "Ünïcödé straße façade naïve café İstanbul ǅ", "Привет мир", "日本語の文章です。",
        "中文，标点。", "한국어", "مرحبا بالعالم", "🙂🎬🚗 👩‍👩‍👧 🏳️‍🌈", "e\u0301 a\u030a",
        "<|begin_of_text|>", "<|eot_id|>x<|eot_id|>", "a<|start_header_id|>user<|end_header_id|>\n\nb",
        "<|eot_id <|eot_id|| <|reserved_special_token_4|>", "!!!???... --- ***", "\"quoted\" (paren) [br] {c}",
        "x" * 300, "ab" * 150, " " * 40 + "x", "\n" * 7 + "y",
        "snake_case_names and camelCaseNames and UPPER_CASE", "https://example.com/path?q=1&r=2#frag",
        "emoji🙂glued", "mixed日本語and English", "\u0000nul", "tab\tnewline\n ",
    ]
    pool = (list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") * 3 + list("0123456789") * 2 +
            list(" " * 12) + list("\n\r\t") + list(".,;:!?'\"()-_/\\@#$%^&*+=<>|~`[]{}") +
            list("éßİſΣσςЖжأ日本語中文한국어🙂🎬\u00a0\u2028\u3000\u0301١２") +
            ["'s", "'ll", "'S", "'ve", "<|eot_id|>", "<|begin_of_text|>", "the ", "video ", "camera "])
    rng = random.Random(12345)
    out = list(fixed)
    for _ in range(n_random):
        out.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 60))))
    out += [HUNYUAN_TEMPLATE.format(p) for p in ("", "A cat walks on the grass, realistic style.",
                                                "The girl dances gracefully, with clear movements, full of charm.")]
    return out


def cases(tok: Tokenizer, texts: list) -> list:
    out = []
    for t in texts:
        out.append({"text": t, "ids": tok.encode(t, add_special_tokens=True).ids,
                    "ids_plain": tok.encode(t, add_special_tokens=False).ids})
    # crop_start of the HunyuanVideo template: tokens before the prompt (with BOS).
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--real", help="a real LLaMA-3 tokenizer.json")
    ap.add_argument("--out", help="cases file for --real")
    ap.add_argument("--random", type=int, default=300)
    a = ap.parse_args()
    texts = prompts(a.random)
    if a.real:
        tok = Tokenizer.from_file(a.real)
        Path(a.out).write_text(json.dumps(cases(tok, texts), ensure_ascii=False, indent=0) + "\n")
        prefix = tok.encode(HUNYUAN_TEMPLATE.split("{}")[0]).ids
        print(f"{a.out}: {len(texts)} cases; template tokens before the prompt: {len(prefix)}")
        return
    d = Path(__file__).resolve().parent.parent / "tests/data/llama_tokenizer"
    d.mkdir(parents=True, exist_ok=True)
    tok = build_fixture_tokenizer()
    tok.save(str(d / "tokenizer.json"))
    (d / "cases.json").write_text(json.dumps(cases(tok, texts), ensure_ascii=False, indent=0) + "\n")
    print(f"{d}: vocab {tok.get_vocab_size()}, {len(texts)} cases")


if __name__ == "__main__":
    main()
