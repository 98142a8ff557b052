#!/usr/bin/env python3
"""Goldens for FramePack's CLIP-L text model and SigLIP vision tower
(models/clip/clip_text_model, models/siglip/siglip_vision), tiny configs run
through transformers 4.46.2 exactly as FramePack @ 97fe5db calls them:

  CLIP-L (diffusers_helper/hunyuan.py:47-56):
    ids    = tokenizer_2([prompt], padding="max_length", max_length=77, truncation=True)
    pooled = CLIPTextModel(ids).pooler_output            # [1, W], final-LN row of the first EOS
  SigLIP (diffusers_helper/clip_vision.py:9):
    pixel_values = SiglipImageProcessor.preprocess(uint8 image)   # rescale 1/255 in float64, (x-0.5)/0.5
    last_hidden_state = SiglipVisionModel(pixel_values)           # [1, 729, W], post_layernorm included

The CLIP tokenizer is the committed fixture vocabulary (tests/data/clip_tokenizer: 3,514 ids,
eot = 3513 = the largest id, as 49407 is in the real one). The text config keeps the legacy
eos_token_id = 2 of openai/clip-vit-large-patch14 (and of HunyuanVideo's text_encoder_2), so
transformers pools at input_ids.argmax(-1): the first EOS, since EOS is the largest id and
argmax returns the first maximum.

Weights are saved in fp16 (the released text_encoder_2 / image_encoder are fp16 files) under
tests/data/framepack_text/{text_encoder_2,image_encoder}/ with their config.json; each model is
loaded back with from_pretrained(torch_dtype=fp32 / bf16) and run. goldens.safetensors holds the
ids, pixels and outputs (fp32 and bf16 runs); layout.json the full-size key/shape tables of
CLIP-L and SigLIP so400m-patch14-384 built on the meta device.

Usage: /work/venv-fp/bin/python tools/framepack_text_goldens.py
"""
import json
from pathlib import Path

import numpy as np
import PIL
import torch
from PIL import Image
from safetensors.torch import save_file
from transformers import (CLIPTextConfig, CLIPTextModel, CLIPTokenizer, SiglipImageProcessor,
                          SiglipVisionConfig, SiglipVisionModel)

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests/data/framepack_text"
TOK = ROOT / "tests/data/clip_tokenizer"
PROMPTS = [
    "The girl dances gracefully, with clear movements, full of charm.",
    "a photo of a cat",
    # longer than 77 tokens: truncated to 76 + EOS, no padding
    " ".join(["a large red balloon floats over the quiet town"] * 9),
]


def test_image(w, h):
    """RGB [h, w, 3] uint8 the C++ tests rebuild from the same formula."""
    y, x, c = np.meshgrid(np.arange(h), np.arange(w), np.arange(3), indexing="ij")
    return ((x * 7 + y * 13 + c * 29 + (x * y) % 37) % 256).astype(np.uint8)


def fnv1a(img):
    """64-bit FNV-1a of the bytes, as a hex string."""
    h = 0xcbf29ce484222325
    for b in np.ascontiguousarray(img).tobytes():
        h = ((h ^ b) * 0x100000001b3) & 0xffffffffffffffff
    return f"{h:016x}"


def randomise(model, seed):
    torch.manual_seed(seed)
    with torch.no_grad():  # larger than the 0.02 init so every layer matters
        for name, p in model.named_parameters():
            if "norm" in name and name.endswith("weight"):
                p.copy_(1 + 0.2 * torch.randn_like(p))
            elif "embedding" in name:
                p.copy_(torch.randn_like(p) * 0.5)
            else:
                p.copy_(torch.randn_like(p) * 0.15)


def save_fp16(model, folder):
    folder.mkdir(parents=True, exist_ok=True)
    for f in folder.glob("*"):
        f.unlink()
    model.to(torch.float16).save_pretrained(folder, safe_serialization=True)


def layout(model_cls, cfg):
    with torch.device("meta"):
        m = model_cls(cfg)
    return {k: list(v.shape) for k, v in m.state_dict().items()}


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    tensors = {}
    tok = CLIPTokenizer(str(TOK / "vocab.json"), str(TOK / "merges.txt"))
    ids = tok(PROMPTS, padding="max_length", max_length=77, truncation=True,
              return_tensors="pt").input_ids
    tensors["clip.input_ids"] = ids.to(torch.int32).contiguous()

    # ---- CLIP-L text, tiny: 3 layers, width 32, 2 heads of 16, MLP 64 ----
    tcfg = CLIPTextConfig(vocab_size=len(tok.get_vocab()), hidden_size=32, intermediate_size=64,
                          num_hidden_layers=3, num_attention_heads=2, max_position_embeddings=77,
                          hidden_act="quick_gelu", layer_norm_eps=1e-5, projection_dim=32,
                          bos_token_id=0, eos_token_id=2, pad_token_id=1)
    clip = CLIPTextModel(tcfg).eval()
    randomise(clip, 0)
    save_fp16(clip, OUT / "text_encoder_2")
    for tag, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        m = CLIPTextModel.from_pretrained(OUT / "text_encoder_2", torch_dtype=dtype).eval()
        with torch.no_grad():
            o = m(ids, output_hidden_states=True)
        tensors[f"clip.{tag}.pooled"] = o.pooler_output.float().contiguous()
        tensors[f"clip.{tag}.last_hidden"] = o.last_hidden_state.float().contiguous()
        for i, h in enumerate(o.hidden_states[1:]):
            tensors[f"clip.{tag}.layer{i}"] = h.float().contiguous()
    attn_clip = m.config._attn_implementation

    # ---- SigLIP vision, tiny: 384 px, patch 14 (27 x 27 = 729 tokens), 2 layers, width 32 ----
    vcfg = SiglipVisionConfig(hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                              num_attention_heads=2, image_size=384, patch_size=14,
                              hidden_act="gelu_pytorch_tanh", layer_norm_eps=1e-6)
    sig = SiglipVisionModel(vcfg).eval()
    randomise(sig, 1)
    save_fp16(sig, OUT / "image_encoder")
    # FLUX.1-Redux's feature_extractor/preprocessor_config.json (lllyasviel/flux_redux_bfl).
    proc = SiglipImageProcessor(do_resize=True, size={"height": 384, "width": 384}, resample=3,
                                do_rescale=True, rescale_factor=0.00392156862745098,
                                do_normalize=True, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    # A 384 x 384 RGB test image the C++ test rebuilds from the same formula
    # (so it need not be stored): gradients plus a non-separable pattern.
    img = test_image(384, 384)
    pixels = proc.preprocess(images=img, return_tensors="pt")["pixel_values"]
    assert pixels.dtype == torch.float32 and pixels.shape == (1, 3, 384, 384)
    # The preprocessing of every uint8 value (no resize): a 16 x 16 image
    # holding 0..255 in each channel, bit-exact target of siglip_preprocess.
    ramp = np.repeat(np.arange(256, dtype=np.uint8).reshape(16, 16, 1), 3, axis=2)
    tensors["siglip.lut"] = proc.preprocess(images=ramp, do_resize=False,
                                            return_tensors="pt")["pixel_values"][0, 0].reshape(256)
    # The 384 px image is not resized (PIL returns a copy at the same size).
    tensors["siglip.pixel_rows"] = pixels[0, :, ::48, :].contiguous()  # [3, 8, 384], rows 0, 48, ..
    for tag, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        m = SiglipVisionModel.from_pretrained(OUT / "image_encoder", torch_dtype=dtype).eval()
        with torch.no_grad():
            o = m(pixel_values=pixels.to(dtype), output_hidden_states=True)
        tensors[f"siglip.{tag}.last_hidden"] = o.last_hidden_state.float().contiguous()
        tensors[f"siglip.{tag}.layer0"] = o.hidden_states[1].float().contiguous()
    attn_sig = m.config._attn_implementation

    # FramePack's real SigLIP input: the bucket image (608 x 640 here) through the whole
    # processor, PIL BICUBIC to 384 x 384 included.
    bucket = test_image(640, 608)
    resized = np.asarray(Image.fromarray(bucket).resize((384, 384), Image.BICUBIC))
    bucket_pixels = proc.preprocess(images=bucket, return_tensors="pt")["pixel_values"]
    assert torch.equal(bucket_pixels, proc.preprocess(images=resized, do_resize=False,
                                                      return_tensors="pt")["pixel_values"])
    m = SiglipVisionModel.from_pretrained(OUT / "image_encoder", torch_dtype=torch.float32).eval()
    with torch.no_grad():
        tensors["siglip.fp32.bucket_last_hidden"] = m(pixel_values=bucket_pixels).last_hidden_state.contiguous()
    resize_cases = {"bucket_bicubic_640x608_to_384x384": fnv1a(resized)}
    # Pillow's resampler on small cases, both filters, every pass combination.
    for (w, h, ow, oh, f) in ((61, 47, 29, 35, "bicubic"), (40, 30, 64, 52, "bicubic"),
                              (50, 40, 50, 23, "lanczos"), (33, 20, 71, 20, "lanczos"),
                              (97, 63, 40, 77, "lanczos"), (300, 200, 31, 45, "lanczos"),
                              (45, 31, 300, 200, "bicubic")):
        out = np.asarray(Image.fromarray(test_image(w, h)).resize(
            (ow, oh), Image.BICUBIC if f == "bicubic" else Image.LANCZOS))
        resize_cases[f"{f}_{w}x{h}_to_{ow}x{oh}"] = fnv1a(out)
    save_file(tensors, str(OUT / "goldens.safetensors"))
    full_clip = CLIPTextConfig(vocab_size=49408, hidden_size=768, intermediate_size=3072,
                               num_hidden_layers=12, num_attention_heads=12,
                               max_position_embeddings=77, hidden_act="quick_gelu")
    full_sig = SiglipVisionConfig(hidden_size=1152, intermediate_size=4304, num_hidden_layers=27,
                                  num_attention_heads=16, image_size=384, patch_size=14,
                                  hidden_act="gelu_pytorch_tanh", layer_norm_eps=1e-6)
    (OUT / "layout.json").write_text(json.dumps({
        "clip_l": layout(CLIPTextModel, full_clip),
        "siglip_so400m": layout(SiglipVisionModel, full_sig)}, indent=0) + "\n")
    (OUT / "manifest.json").write_text(json.dumps({
        "prompts": PROMPTS, "torch": torch.__version__,
        "transformers": __import__("transformers").__version__,
        "attn_implementation": {"clip": attn_clip, "siglip": attn_sig},
        "weights_dtype": "float16", "pillow": PIL.__version__,
        "pil_resize_fnv1a64": resize_cases}, indent=1) + "\n")
    print(f"{OUT}: {sum(f.stat().st_size for f in OUT.rglob('*') if f.is_file()) / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
