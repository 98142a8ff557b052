#!/usr/bin/env python3
"""Full-size key / shape tables for the FramePack components no other golden
script tables yet, from the reference classes built on the meta device (no
weights, no download):

  llama   transformers 4.46.2 LlamaModel with hunyuanvideo-community/HunyuanVideo
          text_encoder/config.json's values (LLaMA-3-8B shapes, vocab 128320):
          the state-dict keys and shapes, in order.

The other released layouts are tabled by their golden scripts:
tests/data/framepack_dit/full_keys.json (tools/framepack_dit_goldens.py, the
packed transformer), tests/data/hunyuan_vae/full_layout.json
(tools/hunyuan_vae_goldens.py), tests/data/framepack_text/layout.json
(tools/framepack_text_goldens.py: CLIP-L, SigLIP so400m).

Writes tests/data/framepack_full/llama_layout.json: {"config": the released
config.json, "keys": [[name, shape], ...]}.

Usage: /work/venv-fp/bin/python tools/framepack_full_layouts.py
"""
import json
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaModel

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests/data/framepack_full"

# hunyuanvideo-community/HunyuanVideo text_encoder/config.json (the values
# that shape the model or that flick's LlamaConfig::detect reads).
LLAMA_CONFIG = {
    "architectures": ["LlamaModel"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 128000,
    "eos_token_id": 128001,
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 14336,
    "max_position_embeddings": 8192,
    "mlp_bias": False,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": None,
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "float16",
    "use_cache": True,
    "vocab_size": 128320,
}


def main():
    cfg = LlamaConfig(**{k: v for k, v in LLAMA_CONFIG.items() if k != "architectures"})
    with torch.device("meta"):
        model = LlamaModel(cfg)
    keys = [[k, list(v.shape)] for k, v in model.state_dict().items()]
    n = sum(torch.Size(s).numel() for _, s in keys)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "llama_layout.json").write_text(
        '{"config": ' + json.dumps(LLAMA_CONFIG) + ',\n"keys": [\n' +
        ",\n".join(json.dumps(k) for k in keys) + "]}\n")
    print(f"llama: {len(keys)} keys, {n / 1e9:.3f} B params")


if __name__ == "__main__":
    main()
