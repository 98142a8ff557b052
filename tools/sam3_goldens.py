#!/usr/bin/env python3
"""Key tables and golden-parity fixtures for the EfficientSAM3 port
(tests/data/sam3/).

The reference (SimonZeng7108/efficientsam3 at sam3_refenv.REF_COMMIT, which
vendors facebookresearch/sam3) is exported from a local git mirror into a
temporary directory at run time (tools/sam3_refenv.py); none of it is stored
in flick.

    /work/venv-sam3/bin/python tools/sam3_goldens.py keys    [--mirror DIR] [--out tests/data/sam3]
    /work/venv-sam3/bin/python tools/sam3_goldens.py goldens [--mirror DIR] [--out tests/data/sam3]
    /work/venv-sam3/bin/python tools/sam3_goldens.py text_s0 [--mirror DIR] [--out tests/data/sam3]

`keys` builds the reference classes on the meta device (no memory, no init)
and writes one table per file or section, one tensor per line in state-dict
order: `name dtype d0,d1,...` (a 0-d tensor has an empty shape), gzip'd. Tables:

  keys_efficient_sam3_repvit-m0_9_mobileclip_s1.txt.gz
      the 2028 keys of the released checkpoint, in the file's layout
      ({"model": state_dict}): "detector." + the student image model
      (RepViT-M0.9 + MobileCLIP-S1, 77-token text context), the original
      SAM3 ViT trunk beside the student trunk, the SAM2 neck (`sam2_convs`)
      and "tracker." + build_tracker(); the last three are not used by the
      image path;
  trunk_repvit_<m0_9|m1_1|m2_3>.txt.gz   the student trunk + head of each RepViT
      variant, under "detector.backbone.vision_backbone.trunk.model.";
  text_mobileclip_<s0|s1>.txt.gz         the student text encoder of each
      MobileCLIP variant, under "detector.backbone.language_backbone.".

`goldens` runs tiny configurations on CPU in fp32 with seeded random weights
(BatchNorm statistics included, so that folding is exercised) and writes
named inputs, weights and outputs as safetensors.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sam3_refenv  # noqa: E402

import torch  # noqa: E402

RELEASED = "efficient_sam3_repvit-m0_9_mobileclip_s1"
TRUNK_PREFIX = "detector.backbone.vision_backbone.trunk.model."
TEXT_PREFIX = "detector.backbone.language_backbone."
DTYPE_NAMES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
               torch.int64: "I64", torch.complex64: "C64", torch.int32: "I32", torch.uint8: "U8", torch.bool: "BOOL"}


def write_table(path: Path, lines: list[str]) -> None:
    """Writes a gzip'd table reproducibly (no name, mtime 0 in the header)."""
    import gzip
    with open(path, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as f:
        f.write(("\n".join(lines) + "\n").encode())


def table(sd: dict, prefix: str = "") -> list[str]:
    return [f"{prefix}{k} {DTYPE_NAMES[v.dtype]} {','.join(str(d) for d in v.shape)}"
            for k, v in sd.items()]


@contextlib.contextmanager
def meta_device():
    with torch.device("meta"):
        yield


def image_model(mb, trunk: str, text: str):
    return mb.build_efficientsam3_image_model(
        device="cpu", eval_mode=True, load_from_HF=False, enable_inst_interactivity=False,
        backbone_type="repvit", model_name=trunk, text_encoder_type=text,
        text_encoder_context_length=77)


def write_keys(out: Path) -> None:
    import sam3.model_builder as mb

    out.mkdir(parents=True, exist_ok=True)
    with meta_device():
        model = image_model(mb, "m0.9", "MobileCLIP-S1")
        image_sd = model.state_dict()
        stand_in_trunk = torch.nn.Module()
        stand_in_trunk.channel_list = [1024]  # what the neck reads of the ViT
        neck = mb._create_vit_neck(mb._create_position_encoding(precompute_resolution=1008),
                                   stand_in_trunk, enable_inst_interactivity=True)
        sam2_sd = {k: v for k, v in neck.state_dict().items() if k.startswith("sam2_convs.")}
        tracker_sd = mb.build_tracker(apply_temporal_disambiguation=False).state_dict()
    # The ViT's drop-path schedule calls .item(), which the meta device cannot:
    # built on the CPU (1.8 GB, a few seconds), only the names and shapes kept.
    vit_sd = {k: torch.empty(v.shape, dtype=v.dtype, device="meta")
              for k, v in mb._create_vit_backbone().state_dict().items()}

    lines = table(image_sd, "detector.")
    lines += table(vit_sd, "detector.backbone.vision_backbone.trunk.")
    lines += table(sam2_sd, "detector.backbone.vision_backbone.")
    lines += table(tracker_sd, "tracker.")
    names = [l.split()[0] for l in lines]
    assert len(names) == len(set(names)), "duplicate key"
    print(f"{RELEASED}: {len(lines)} keys (image model {len(image_sd)}, SAM3 ViT {len(vit_sd)}, "
          f"sam2_convs {len(sam2_sd)}, tracker {len(tracker_sd)})")
    write_table(out / f"keys_{RELEASED}.txt.gz", lines)

    for trunk in ("m0_9", "m1_1", "m2_3"):
        with meta_device():
            sd = image_model(mb, trunk, "MobileCLIP-S1").backbone.vision_backbone.trunk.model.state_dict()
        write_table(out / f"trunk_repvit_{trunk}.txt.gz", table(sd, TRUNK_PREFIX))
        print(f"trunk {trunk}: {len(sd)} keys")
    for text in ("S0", "S1"):
        with meta_device():
            enc = mb._create_student_text_encoder(None, f"MobileCLIP-{text}", context_length=77)
        sd = enc.state_dict()
        write_table(out / f"text_mobileclip_{text.lower()}.txt.gz", table(sd, TEXT_PREFIX))
        print(f"text {text}: {len(sd)} keys")


# ---------------------------------------------------------------- goldens

def seed_all(seed: int) -> None:
    import random
    random.seed(seed)
    torch.manual_seed(seed)


def randomize_norms(module: torch.nn.Module) -> None:
    """Non-trivial affine and BatchNorm statistics, so that folding and the
    affine terms are exercised (defaults are 1 / 0)."""
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, (torch.nn.BatchNorm2d, torch.nn.LayerNorm)):
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0.0, 0.1)
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.normal_(0.0, 0.1)
                m.running_var.uniform_(0.5, 1.5)


def save(path: Path, weights: dict, prefix: str, goldens: dict, meta: dict) -> None:
    from safetensors.torch import save_file
    tensors = {prefix + k: v.detach().contiguous() for k, v in weights.items()}
    tensors.update({"golden." + k: v.detach().clone().contiguous() for k, v in goldens.items()})
    meta = {k: str(v) for k, v in meta.items()}
    meta["torch"] = torch.__version__
    meta["reference"] = f"{sam3_refenv.REF_REPO}@{sam3_refenv.REF_COMMIT}"
    if path.exists():  # safetensors orders the metadata at random: keep an equal file as it is
        from safetensors import safe_open
        with safe_open(str(path), "pt") as old:
            if old.metadata() == meta and set(old.keys()) == set(tensors) and all(
                    old.get_tensor(k).dtype == v.dtype and torch.equal(old.get_tensor(k), v)
                    for k, v in tensors.items()):
                print(f"{path.name}: unchanged")
                return
    save_file(tensors, str(path), metadata=meta)
    print(f"{path.name}: {path.stat().st_size / 1e3:.0f} kB, goldens {sorted(goldens)}")


# A tiny RepViT in the cfg format of repvit.py ([k, t, c, use_se, use_hs, s]):
# stride-1 blocks with and without SE, and three stride-2 blocks (one with
# SE, which no released variant has but the code builds), stride 32 overall.
TINY_REPVIT_CFGS = [
    [3, 2, 16, 1, 0, 1],
    [3, 2, 16, 0, 0, 1],
    [3, 2, 32, 0, 1, 2],
    [3, 2, 32, 1, 1, 1],
    [3, 2, 48, 1, 1, 2],
    [3, 2, 48, 0, 1, 1],
    [3, 2, 64, 0, 1, 2],
    [3, 2, 64, 1, 1, 1],
]
TINY_IMAGE = 104      # 104 -> 52 -> 26 -> 13 -> 7 -> 4 (odd sizes exercise the padding)
TINY_EMBED_DIM = 64   # head channels (1024 in the real model)
TINY_EMBED_SIZE = 9   # 4 -> 9 is the real 32 -> 72 ratio (2.25)


def golden_repvit(out: Path) -> None:
    from sam3.backbones.repvit import RepViT
    from sam3.model_builder import ImageStudentEncoder

    seed_all(1)
    model = RepViT(TINY_REPVIT_CFGS, num_classes=1000, distillation=False)
    del model.classifier  # as RepViTTrunkWrapper (model_builder.py) strips it

    class TrunkWrapper(torch.nn.Module):  # RepViTTrunkWrapper.forward, model_builder.py
        def __init__(self, m):
            super().__init__()
            self.model = m

        def forward(self, x):
            for f in self.model.features:
                x = f(x)
            return x

    enc = ImageStudentEncoder(TrunkWrapper(model), in_channels=64, embed_dim=TINY_EMBED_DIM,
                              embed_size=TINY_EMBED_SIZE, img_size=TINY_IMAGE)
    randomize_norms(enc)
    enc.eval()
    x = torch.randn(1, 3, TINY_IMAGE, TINY_IMAGE)
    goldens = {"input": x}
    with torch.no_grad():
        h = x
        for i, f in enumerate(model.features):
            h = f(h)
            goldens["stem" if i == 0 else f"block{i - 1}"] = h
        goldens["trunk"] = h.clone()
        head = enc.head(h)
        goldens["head"] = head
        goldens["output"] = enc(x)
    save(out / "repvit_tiny.safetensors", enc.state_dict(), TRUNK_PREFIX, goldens,
         {"cfgs": TINY_REPVIT_CFGS, "image": TINY_IMAGE, "embed_size": TINY_EMBED_SIZE})


TINY_TEXT_CFG = {
    "context_length": 77, "vocab_size": 512, "dim": 64, "ffn_multiplier_per_layer": 2.0,
    "n_heads_per_layer": 2, "n_transformer_layers": 2, "norm_layer": "layer_norm_fp32",
    "causal_masking": False, "model_name": "base", "embed_dropout": 0.0,
    "no_scale_embedding": False, "no_pos_embedding": False,
}
TINY_TEXT_OUT = 32  # heads: 2 of width 32 (the released model: 8 of 64)


def golden_text(out: Path, root: Path) -> None:
    from sam3.model.text_encoder_student import TextStudentEncoder

    seed_all(2)
    bpe = root / "assets" / "bpe_simple_vocab_16e6.txt.gz"
    enc = TextStudentEncoder(dict(TINY_TEXT_CFG), context_length=77, output_dim=TINY_TEXT_OUT,
                             bpe_path=str(bpe))
    with torch.no_grad():
        enc.encoder.projection_layer.normal_()  # torch.empty in the reference; unused
    randomize_norms(enc)
    enc.eval()
    # Token ids as the tokenizer lays them out (SOT, words, EOT, zero padding
    # to the context), from the tiny vocabulary: 49406 / 49407 become 510 / 511.
    toks = torch.zeros(2, 77, dtype=torch.long)
    toks[0, :4] = torch.tensor([510, 17, 301, 511])
    toks[1, :9] = torch.tensor([510, 5, 44, 123, 9, 400, 77, 3, 511])
    goldens = {"tokens": toks.to(torch.int32)}
    with torch.no_grad():
        # TextStudentEncoder.forward after its tokenizer call.
        emb = enc.encoder.forward_embedding(toks)
        goldens["embeddings"] = emb
        h = emb
        for i, layer in enumerate(enc.encoder.transformer):
            h = layer(h, key_padding_mask=None, attn_mask=None)
            goldens[f"layer{i}"] = h
        memory = enc.encoder(emb, return_all_tokens=True, input_is_embeddings=True)
        goldens["final_norm"] = memory
        goldens["text_memory"] = enc.projector(memory)  # [B, L, out]; the reference returns it seq-first
        goldens["pad_mask"] = (toks == 0).to(torch.uint8)  # (tokenized != 0).ne(1): True = pad
    save(out / "mobileclip_tiny.safetensors", enc.state_dict(), TEXT_PREFIX, goldens,
         {"cfg": TINY_TEXT_CFG, "out_dim": TINY_TEXT_OUT})


# MobileCLIP-S0 ("mct"): a RepMixer block (depthwise 1 x 11 token mixer +
# ConvFFN) before and after the transformer layers. The RepMixer's hidden
# width is dim * 4 (mlp_ratio), equal to the transformer's ffn only for
# ffn_multiplier 4, as in the released S0 (and in the layout flick checks).
TINY_TEXT_S0_CFG = dict(TINY_TEXT_CFG, model_name="mct", n_transformer_layers=1,
                        ffn_multiplier_per_layer=4.0)


def golden_text_s0(out: Path, root: Path) -> None:
    from sam3.model.text_encoder_student import TextStudentEncoder

    seed_all(12)
    bpe = root / "assets" / "bpe_simple_vocab_16e6.txt.gz"
    enc = TextStudentEncoder(dict(TINY_TEXT_S0_CFG), context_length=77, output_dim=TINY_TEXT_OUT,
                             bpe_path=str(bpe))
    with torch.no_grad():
        enc.encoder.projection_layer.normal_()  # torch.empty in the reference; unused
        # The layer scales start at 1e-5 (the RepMixer would be an identity):
        # give them weight so that every branch shows in the output.
        for name, p in enc.named_parameters():
            if name.endswith("layer_scale"):
                p.uniform_(0.3, 1.0)
            elif ".convffn." in name and name.endswith("weight"):
                p.normal_(0.0, 0.3)  # trunc_normal(0.02) at init
    randomize_norms(enc)
    enc.eval()
    toks = torch.zeros(2, 77, dtype=torch.long)
    toks[0, :4] = torch.tensor([510, 17, 301, 511])
    toks[1, :9] = torch.tensor([510, 5, 44, 123, 9, 400, 77, 3, 511])
    goldens = {"tokens": toks.to(torch.int32)}
    with torch.no_grad():
        emb = enc.encoder.forward_embedding(toks)
        goldens["embeddings"] = emb
        h = emb
        for i, layer in enumerate(enc.encoder.transformer):
            h = layer(h, key_padding_mask=None, attn_mask=None)
            goldens[f"layer{i}"] = h
        memory = enc.encoder(emb, return_all_tokens=True, input_is_embeddings=True)
        goldens["final_norm"] = memory
        goldens["text_memory"] = enc.projector(memory)
    save(out / "mobileclip_s0_tiny.safetensors", enc.state_dict(), TEXT_PREFIX, goldens,
         {"cfg": TINY_TEXT_S0_CFG, "out_dim": TINY_TEXT_OUT})


NECK_PREFIX = "detector.backbone.vision_backbone."
TINY_NECK_IN = 64    # trunk channels (1024 in the real model)
TINY_NECK_D = 32     # d_model (256)
TINY_NECK_GRID = 9   # input grid (72): levels 36, 18, 9 (and 5, dropped by scalp=1)


def golden_neck(out: Path) -> None:
    from sam3.model.necks import Sam3DualViTDetNeck
    from sam3.model.position_encoding import PositionEmbeddingSine

    seed_all(3)

    class StandInTrunk(torch.nn.Module):  # the neck reads channel_list and calls trunk(list)
        channel_list = [TINY_NECK_IN]

        def forward(self, xs):
            return xs

    # model_builder.py _create_position_encoding / _create_vit_neck, scaled down.
    pe = PositionEmbeddingSine(num_pos_feats=TINY_NECK_D, normalize=True, scale=None,
                               temperature=10000, precompute_resolution=None)
    neck = Sam3DualViTDetNeck(trunk=StandInTrunk(), position_encoding=pe, d_model=TINY_NECK_D,
                              scale_factors=[4.0, 2.0, 1.0, 0.5], add_sam2_neck=False)
    neck.eval()
    x = torch.randn(1, TINY_NECK_IN, TINY_NECK_GRID, TINY_NECK_GRID)
    goldens = {"input": x}
    with torch.no_grad():
        feats, pos, _, _ = neck([x])
    # SAM3VLBackbone(scalp=1) keeps levels 0..2 (vl_combiner.py).
    for i in range(3):
        goldens[f"level{i}"] = feats[i]
        goldens[f"pos{i}"] = pos[i]
    # The full-size encoding of the 72 x 72 level (d = 256), every 8th row and
    # column (the constant the fusion encoder adds), to check the real size.
    full = PositionEmbeddingSine(num_pos_feats=256, normalize=True, scale=None, temperature=10000)
    goldens["pos_full_72_every8"] = full(torch.zeros(1, 256, 72, 72))[:, :, ::8, ::8].contiguous()
    save(out / "neck_tiny.safetensors", neck.state_dict(), NECK_PREFIX, goldens,
         {"grid": TINY_NECK_GRID})


ENCODER_PREFIX = "detector.transformer.encoder."
TINY_FUSION = {"d": 32, "heads": 2, "ffn": 64, "layers": 2, "grid": 9}
# Prompt = text tokens (some padding) then the geometry CLS, as _encode_prompt
# concatenates them: the padding sits inside the prompt, not at its end.
TINY_PROMPT_VALID = [1, 1, 1, 1, 1, 1, 0, 0, 0, 1]


def randomize_params(module: torch.nn.Module) -> None:
    """get_clones() deep-copies one layer, so every layer starts identical:
    give each tensor its own values (a layer-index mix-up would then show)."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, p.shape[-1] ** -0.5)
            else:
                p.normal_(0.0, 0.1)
    randomize_norms(module)


def golden_fusion_encoder(out: Path) -> None:
    from sam3.model.encoder import TransformerEncoderFusion, TransformerEncoderLayer
    from sam3.model.model_misc import MultiheadAttentionWrapper
    from sam3.model.position_encoding import PositionEmbeddingSine

    seed_all(4)
    c = TINY_FUSION
    mha = lambda: MultiheadAttentionWrapper(num_heads=c["heads"], dropout=0.1,  # noqa: E731
                                            embed_dim=c["d"], batch_first=True)
    # model_builder.py _create_transformer_encoder, scaled down.
    layer = TransformerEncoderLayer(
        activation="relu", d_model=c["d"], dim_feedforward=c["ffn"], dropout=0.1,
        pos_enc_at_attn=True, pos_enc_at_cross_attn_keys=False,
        pos_enc_at_cross_attn_queries=False, pre_norm=True,
        self_attention=mha(), cross_attention=mha())
    enc = TransformerEncoderFusion(
        layer=layer, num_layers=c["layers"], d_model=c["d"], num_feature_levels=1, frozen=False,
        use_act_checkpoint=True, add_pooled_text_to_img_feat=False, pool_text_with_mask=True)
    randomize_params(enc)
    enc.eval()
    g = c["grid"]
    image = torch.randn(1, c["d"], g, g)
    pos = PositionEmbeddingSine(num_pos_feats=c["d"], normalize=True)(image)
    valid = torch.tensor(TINY_PROMPT_VALID, dtype=torch.uint8)
    prompt = torch.randn(len(TINY_PROMPT_VALID), 1, c["d"])  # seq-first, as _encode_prompt
    goldens = {"image": image, "pos": pos, "prompt": prompt[:, 0], "prompt_valid": valid}
    taps = {}
    for i, l in enumerate(enc.layers):
        l.register_forward_hook(lambda m, a, kw, o, i=i: taps.__setitem__(f"layer{i}", o.clone()),
                                with_kwargs=True)
    with torch.no_grad():
        # Sam3Image._run_encoder: seq-first image tokens, zero prompt pos.
        mem = enc(src=[image.flatten(2).permute(2, 0, 1)], src_key_padding_mask=None,
                  src_pos=[pos.flatten(2).permute(2, 0, 1)], prompt=prompt,
                  prompt_pos=torch.zeros_like(prompt),
                  prompt_key_padding_mask=(valid == 0)[None], feat_sizes=[(g, g)])
    goldens.update(taps)
    goldens["memory"] = mem["memory"].transpose(0, 1)  # [1, T, d]
    save(out / "fusion_encoder_tiny.safetensors", enc.state_dict(), ENCODER_PREFIX, goldens,
         dict(c))


GEOMETRY_PREFIX = "detector.geometry_encoder."
TINY_GEOMETRY = {"d": 32, "heads": 2, "ffn": 64, "layers": 2, "grid": 9}


def golden_geometry_cls(out: Path) -> None:
    from sam3.model.encoder import TransformerEncoderLayer
    from sam3.model.geometry_encoders import Prompt, SequenceGeometryEncoder
    from sam3.model.model_misc import MultiheadAttentionWrapper
    from sam3.model.position_encoding import PositionEmbeddingSine

    seed_all(5)
    c = TINY_GEOMETRY
    mha = lambda: MultiheadAttentionWrapper(num_heads=c["heads"], dropout=0.1,  # noqa: E731
                                            embed_dim=c["d"], batch_first=False)
    # model_builder.py _create_geometry_encoder, scaled down.
    layer = TransformerEncoderLayer(
        activation="relu", d_model=c["d"], dim_feedforward=c["ffn"], dropout=0.1,
        pos_enc_at_attn=False, pre_norm=True, self_attention=mha(),
        pos_enc_at_cross_attn_queries=False, pos_enc_at_cross_attn_keys=True,
        cross_attention=mha())
    geo = SequenceGeometryEncoder(
        pos_enc=PositionEmbeddingSine(num_pos_feats=c["d"], normalize=True),
        encode_boxes_as_points=False, points_direct_project=True, points_pool=True,
        points_pos_enc=True, boxes_direct_project=True, boxes_pool=True, boxes_pos_enc=True,
        d_model=c["d"], num_layers=c["layers"], layer=layer, use_act_ckpt=True, add_cls=True,
        add_post_encode_proj=True)
    randomize_params(geo)
    geo.eval()
    g = c["grid"]
    image = torch.randn(1, c["d"], g, g)
    pos = PositionEmbeddingSine(num_pos_feats=c["d"], normalize=True)(image)
    goldens = {"image": image, "pos": pos}
    taps = {}
    geo.norm.register_forward_hook(lambda m, a, o: taps.__setitem__("proj", o[:, 0].clone()))
    for i, l in enumerate(geo.encode):
        l.register_forward_hook(
            lambda m, a, kw, o, i=i: taps.__setitem__(f"layer{i}", o[:, 0].clone()), with_kwargs=True)
    with torch.no_grad():
        # Sam3Image._encode_prompt with _get_dummy_prompt (text-only).
        prompt = Prompt(box_embeddings=torch.zeros(0, 1, 4),
                        box_mask=torch.zeros(1, 0, dtype=torch.bool))
        feats, mask = geo(geo_prompt=prompt, img_feats=[image.flatten(2).permute(2, 0, 1)],
                          img_sizes=[(g, g)], img_pos_embeds=[pos.flatten(2).permute(2, 0, 1)])
    assert feats.shape == (1, 1, c["d"]) and mask.shape == (1, 1) and not mask.any()
    goldens.update(taps)
    goldens["cls"] = feats[:, 0]  # [1, d]
    save(out / "geometry_tiny.safetensors", geo.state_dict(), GEOMETRY_PREFIX, goldens, dict(c))


DECODER_PREFIX = "detector.transformer.decoder."
TINY_DECODER = {"d": 32, "heads": 2, "ffn": 64, "layers": 2, "queries": 6, "grid": 9}


def golden_decoder(out: Path) -> None:
    from sam3.model.decoder import TransformerDecoder, TransformerDecoderLayer
    from sam3.model.model_misc import MultiheadAttentionWrapper
    from sam3.model.position_encoding import PositionEmbeddingSine

    seed_all(6)
    c = TINY_DECODER
    # model_builder.py _create_transformer_decoder, scaled down (resolution /
    # stride = the grid, as 1008 / 14 = 72).
    layer = TransformerDecoderLayer(
        activation="relu", d_model=c["d"], dim_feedforward=c["ffn"], dropout=0.1,
        cross_attention=MultiheadAttentionWrapper(num_heads=c["heads"], dropout=0.1,
                                                  embed_dim=c["d"]),
        n_heads=c["heads"], use_text_cross_attention=True)
    dec = TransformerDecoder(
        layer=layer, num_layers=c["layers"], num_queries=c["queries"], return_intermediate=True,
        box_refine=True, num_o2m_queries=0, dac=True, boxRPB="log", d_model=c["d"], frozen=False,
        interaction_layer=None, dac_use_selfatt_ln=True, resolution=c["grid"] * 14, stride=14,
        use_act_checkpoint=True, presence_token=True)
    randomize_params(dec)
    dec.eval()
    g, d = c["grid"], c["d"]
    memory = torch.randn(g * g, 1, d)  # seq-first, as the encoder returns it
    pos = PositionEmbeddingSine(num_pos_feats=d, normalize=True)(torch.zeros(1, d, g, g))
    valid = torch.tensor(TINY_PROMPT_VALID, dtype=torch.uint8)
    prompt = torch.randn(len(TINY_PROMPT_VALID), 1, d)
    with torch.no_grad():
        # Sam3Image._run_decoder at inference (apply_dac = dac and self.training = False).
        tgt = dec.query_embed.weight.unsqueeze(1)
        hs, refs, presence, _ = dec(
            tgt=tgt, memory=memory, memory_key_padding_mask=None,
            pos=pos.flatten(2).permute(2, 0, 1), reference_boxes=None,
            level_start_index=torch.tensor([0]), spatial_shapes=torch.tensor([[g, g]]),
            valid_ratios=torch.ones(1, 1, 2), tgt_mask=None, memory_text=prompt,
            text_attention_mask=(valid == 0)[None], apply_dac=False)
    goldens = {"memory": memory.transpose(0, 1), "pos": pos, "prompt": prompt[:, 0],
               "prompt_valid": valid}
    for i in range(c["layers"]):
        goldens[f"layer{i}.hs"] = hs[i, :, 0]          # [Q, d]
        goldens[f"layer{i}.ref"] = refs[i, :, 0]       # [Q, 4]
        goldens[f"layer{i}.presence"] = presence[i]    # [1, 1]
    save(out / "decoder_tiny.safetensors", dec.state_dict(), DECODER_PREFIX, goldens, dict(c))


SCORING_PREFIX = "detector.dot_prod_scoring."
TINY_SCORING = {"d": 32, "hidden": 64, "layers": 2, "queries": 6}


def golden_scoring(out: Path) -> None:
    import torch.nn as nn
    from sam3.model.model_misc import MLP, DotProductScoring

    seed_all(7)
    c = TINY_SCORING
    # model_builder.py _create_dot_product_scoring, scaled down.
    prompt_mlp = MLP(input_dim=c["d"], hidden_dim=c["hidden"], output_dim=c["d"], num_layers=2,
                     dropout=0.1, residual=True, out_norm=nn.LayerNorm(c["d"]))
    sc = DotProductScoring(d_model=c["d"], d_proj=c["d"], prompt_mlp=prompt_mlp)
    randomize_params(sc)
    sc.eval()
    hs = torch.randn(c["layers"], 1, c["queries"], c["d"]) * 20  # large enough that some clamp
    valid = torch.tensor(TINY_PROMPT_VALID, dtype=torch.uint8)
    prompt = torch.randn(len(TINY_PROMPT_VALID), 1, c["d"])
    with torch.no_grad():
        logits = sc(hs, prompt, (valid == 0)[None])  # [L, 1, Q, 1]
    clamped = int((logits.abs() >= 12).sum())
    assert 0 < clamped < logits.numel(), f"{clamped} of {logits.numel()} logits clamped"
    goldens = {"hs": hs[:, 0], "prompt": prompt[:, 0], "prompt_valid": valid,
               "logits": logits.flatten()}
    save(out / "scoring_tiny.safetensors", sc.state_dict(), SCORING_PREFIX, goldens, dict(c))


SEG_PREFIX = "detector.segmentation_head."
TINY_SEG = {"d": 32, "heads": 2, "queries": 6, "grid": 9}


def golden_seg_head(out: Path) -> None:
    from sam3.model.maskformer_segmentation import PixelDecoder, UniversalSegmentationHead
    from sam3.model.model_misc import MultiheadAttentionWrapper

    seed_all(8)
    c = TINY_SEG
    d, g = c["d"], c["grid"]
    # model_builder.py _create_segmentation_head, scaled down.
    pixel_decoder = PixelDecoder(num_upsampling_stages=3, interpolation_mode="nearest",
                                 hidden_dim=d)
    head = UniversalSegmentationHead(
        hidden_dim=d, upsampling_stages=3, aux_masks=False, presence_head=False,
        dot_product_scorer=None, act_ckpt=True,
        cross_attend_prompt=MultiheadAttentionWrapper(num_heads=c["heads"], dropout=0,
                                                      embed_dim=d),
        pixel_decoder=pixel_decoder)
    randomize_params(head)
    with torch.no_grad():  # GroupNorm affines too
        for m in head.modules():
            if isinstance(m, torch.nn.GroupNorm):
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0.0, 0.1)
    head.eval()
    level0 = torch.randn(1, d, 4 * g, 4 * g)
    level1 = torch.randn(1, d, 2 * g, 2 * g)
    level2 = torch.randn(1, d, g, g)  # replaced by the encoder memory (use_encoder_inputs)
    memory = torch.randn(g * g, 1, d)
    hs = torch.randn(2, 1, c["queries"], d)  # [L, bs, Q, d]; the last layer is used
    valid = torch.tensor(TINY_PROMPT_VALID, dtype=torch.uint8)
    prompt = torch.randn(len(TINY_PROMPT_VALID), 1, d)
    with torch.no_grad():
        # Sam3Image._run_segmentation_heads.
        res = head(backbone_feats=[level0, level1, level2], obj_queries=hs,
                   image_ids=torch.tensor([0]), encoder_hidden_states=memory, prompt=prompt,
                   prompt_mask=(valid == 0)[None])
    goldens = {"level0": level0, "level1": level1, "memory": memory.transpose(0, 1),
               "hs_last": hs[-1, 0], "prompt": prompt[:, 0], "prompt_valid": valid,
               "masks": res["pred_masks"]}
    save(out / "seg_head_tiny.safetensors", head.state_dict(), SEG_PREFIX, goldens, dict(c))


def golden_postprocess(out: Path) -> None:
    from sam3.model.sam3_image_processor import Sam3Processor

    seed_all(9)
    q, side = 8, 12
    raw = {
        "pred_logits": torch.randn(1, q, 1) * 3,
        "pred_boxes": torch.rand(1, q, 4) * 0.5 + 0.25,  # cxcywh in [0, 1]
        "pred_masks": torch.randn(1, q, side, side) * 4,
        "presence_logit_dec": torch.tensor([[1.5]]),
    }

    class StubModel:  # the processor only reads these four outputs
        def forward_grounding(self, **kwargs):
            return {k: v.clone() for k, v in raw.items()}

    goldens = {"logits": raw["pred_logits"].flatten(), "boxes": raw["pred_boxes"][0],
               "mask_logits": raw["pred_masks"], "presence": raw["presence_logit_dec"].flatten()}
    # An upscale to a non-square frame and a downscale (no antialias in either).
    for name, (w, h) in {"up": (23, 17), "down": (7, 5)}.items():
        proc = Sam3Processor(StubModel(), device="cpu", confidence_threshold=0.5)
        state = proc._forward_grounding({"backbone_out": None, "geometric_prompt": None,
                                         "original_height": h, "original_width": w})
        keep = (raw["pred_logits"].sigmoid() * raw["presence_logit_dec"].sigmoid().unsqueeze(1)
                ).squeeze(-1)[0] > 0.5
        assert 0 < int(keep.sum()) < q
        goldens[f"{name}.kept"] = keep.nonzero().flatten().to(torch.int32)
        goldens[f"{name}.scores"] = state["scores"]
        goldens[f"{name}.boxes"] = state["boxes"]
        goldens[f"{name}.mask_prob"] = state["masks_logits"][:, 0]  # the sigmoids (errata A8)
    save(out / "postprocess_tiny.safetensors", {}, "", goldens, {"threshold": 0.5})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["keys", "goldens", "text_s0"])
    ap.add_argument("--mirror", default=sam3_refenv.DEFAULT_MIRROR)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "tests/data/sam3"))
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    with sam3_refenv.reference(args.mirror) as root:
        if args.what == "keys":
            write_keys(Path(args.out))
        elif args.what == "text_s0":
            golden_text_s0(Path(args.out), root)
        else:
            golden_repvit(Path(args.out))
            golden_text(Path(args.out), root)
            golden_neck(Path(args.out))
            golden_fusion_encoder(Path(args.out))
            golden_geometry_cls(Path(args.out))
            golden_decoder(Path(args.out))
            golden_scoring(Path(args.out))
            golden_seg_head(Path(args.out))
            golden_postprocess(Path(args.out))


if __name__ == "__main__":
    main()
