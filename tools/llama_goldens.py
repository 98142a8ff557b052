#!/usr/bin/env python3
"""Goldens for flick's LLaMA text encoder (models/llama/llama_text_encoder):
a tiny transformers LlamaModel run as FramePack runs HunyuanVideo's
text_encoder (diffusers_helper/hunyuan.py:8-58, transformers 4.46.2):

  ids      = tokenizer(template.format(prompt), max_length=crop_start + 256,
                       truncation=True, padding="max_length")  (right padding)
  hidden   = LlamaModel(ids, attention_mask, output_hidden_states=True)
             .hidden_states[-3]                 # after layer L-3, not normed
  llama    = hidden[:, crop_start:n_valid]

The tokenizer is the committed fixture vocabulary (tests/data/llama_tokenizer,
the LLaMA-3 tokenizer.json layout); crop_start is the token count of the
template before "{}" (95 with the real LLaMA-3 vocabulary, as the reference
hard-codes). Writes tests/data/llama/: text_encoder/ (config.json and the
weights as sharded safetensors with an index, as the HunyuanVideo download),
and goldens.safetensors with the ids and, for fp32 and bf16 runs, every
layer's output over the unpadded sequence.

Usage: python tools/llama_goldens.py   (torch, transformers==4.46.2, safetensors)
"""
import json
from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaModel, PreTrainedTokenizerFast

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests/data/llama"
TEMPLATE = (
    "<|start_header_id|>system<|end_header_id|>\n\nDescribe the video by detailing the following aspects: "
    "1. The main content and theme of the video."
    "2. The color, shape, size, texture, quantity, text, and spatial relationships of the objects."
    "3. Actions, events, behaviors temporal relationships, physical movement changes of the objects."
    "4. background environment, light, style and atmosphere."
    "5. camera angles, movements, and transitions used in the video:<|eot_id|>"
    "<|start_header_id|>user<|end_header_id|>\n\n{}<|eot_id|>")
PROMPT = "The girl dances gracefully, with clear movements, full of charm."


def main():
    tok = PreTrainedTokenizerFast(tokenizer_file=str(ROOT / "tests/data/llama_tokenizer/tokenizer.json"))
    tok.pad_token = "<|end_of_text|>"
    crop_start = len(tok(TEMPLATE.split("{}")[0])["input_ids"])
    enc = tok([TEMPLATE.format(PROMPT)], max_length=crop_start + 256, truncation=True,
              padding="max_length", return_tensors="pt")
    ids, mask = enc["input_ids"], enc["attention_mask"]
    n_valid = int(mask.sum())

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=96, num_hidden_layers=5,
                      num_attention_heads=4, num_key_value_heads=2, rope_theta=500000.0,
                      rms_norm_eps=1e-5, max_position_embeddings=8192, attention_bias=False,
                      mlp_bias=False, tie_word_embeddings=False, torch_dtype="float32")
    model = LlamaModel(cfg).eval()
    with torch.no_grad():  # non-trivial norms and larger weights than the 0.02 init
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1 + 0.2 * torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) * (0.5 if "embed" in name else 0.12))
    te = OUT / "text_encoder"
    te.mkdir(parents=True, exist_ok=True)
    for f in te.glob("*"):
        f.unlink()
    model.save_pretrained(te, max_shard_size="300KB", safe_serialization=True)

    tensors = {"input_ids": ids[0].to(torch.int32).contiguous(),
               "n_valid": torch.tensor([n_valid], dtype=torch.int32),
               "crop_start": torch.tensor([crop_start], dtype=torch.int32)}
    # fp32: the padded batch with its mask, exactly as the reference. bf16:
    # the unpadded sequence (what flick runs; equal in exact arithmetic, see
    # padded_vs_unpadded_fp32 in the manifest). A padded bf16 run takes
    # torch's CPU math SDPA (scores and probabilities rounded to bf16, 0.7 %
    # away from the unpadded run), which is neither what the GPU reference
    # runs (fused kernels, fp32 inside) nor what flick emulates; the unpadded
    # causal run takes the fused CPU kernel (fp32 inside, P rounded to bf16).
    def hidden(m, padded):
        with torch.no_grad():
            if padded:
                return m(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
            return m(input_ids=ids[:, :n_valid], output_hidden_states=True).hidden_states
    gaps = {}
    # Each model loaded as FramePack loads it: from_pretrained(torch_dtype=...).
    # (model.to(bf16) would also round the RoPE inv_freq buffer to bf16, which
    # from_pretrained does not: 0.8 % apart after one layer.)
    for tag, dtype, padded in (("fp32", torch.float32, True), ("bf16", torch.bfloat16, False)):
        m = LlamaModel.from_pretrained(te, torch_dtype=dtype).eval()
        assert m.rotary_emb.inv_freq.dtype == torch.float32
        inner = {}  # layer 0's intermediates, unpadded rows
        l0 = m.layers[0]
        hooks = [mod.register_forward_hook(
            lambda mod, inp, out, name=name, first=first: inner.__setitem__(
                name, (inp[0] if first else (out[0] if isinstance(out, tuple) else out))[0, :n_valid]
                .float().clone()))
            for name, mod, first in (("norm1", l0.input_layernorm, False), ("q", l0.self_attn.q_proj, False),
                                     ("k", l0.self_attn.k_proj, False), ("v", l0.self_attn.v_proj, False),
                                     ("attn", l0.self_attn.o_proj, True), ("o", l0.self_attn.o_proj, False),
                                     ("norm2", l0.post_attention_layernorm, False), ("mlp", l0.mlp, False))]
        hs = hidden(m, padded)
        for h in hooks:
            h.remove()
        for name, t in inner.items():
            tensors[f"{tag}.layer0.{name}"] = t
        if tag == "fp32":
            other = hidden(m, False)
            gaps = {f"layer{i - 1}": float((hs[i][0, :n_valid] - other[i][0]).norm() / other[i][0].norm())
                    for i in range(1, len(hs) - 1)}
        for i in range(1, len(hs) - 1):  # after layer i-1 (the last entry is normed)
            tensors[f"{tag}.layer{i - 1}"] = hs[i][0, :n_valid].float().clone()
        tensors[f"{tag}.llama"] = hs[-3][0, crop_start:n_valid].float().clone()
    save_file(tensors, str(OUT / "goldens.safetensors"))
    (OUT / "manifest.json").write_text(json.dumps({
        "prompt": PROMPT, "crop_start": crop_start, "n_valid": n_valid, "hidden_state": -3, "padded_vs_unpadded_fp32": gaps,
        "torch": torch.__version__, "transformers": __import__("transformers").__version__,
        "attn_implementation": model.config._attn_implementation}, indent=1) + "\n")
    print(f"{OUT}: crop_start {crop_start}, {n_valid} valid tokens, "
          f"{sum(f.stat().st_size for f in OUT.rglob('*') if f.is_file()) / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
