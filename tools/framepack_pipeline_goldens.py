#!/usr/bin/env python3
"""Goldens for flick's FramePack pipeline (models/pipelines/framepack.*):
FramePack's own worker() (lllyasviel/FramePack @ 97fe5db demo_gradio.py and
demo_gradio_f1.py, diffusers 0.33.1, transformers 4.46.2) run without gradio
on TINY random-weight components saved in the layout users download:

  weights/transformer/     HunyuanVideoTransformer3DModelPacked (bf16, diffusers folder)
  weights/text_encoder/    LlamaModel (fp16)
  weights/text_encoder_2/  CLIPTextModel (fp16)
  weights/vae/             AutoencoderKLHunyuanVideo (fp16, latent_channels 16)
  weights/image_encoder/   SiglipVisionModel (fp16)
  tokenizers: the committed test vocabularies tests/data/llama_tokenizer
  (tokenizer.json) and tests/data/clip_tokenizer (vocab.json, merges.txt),
  not copied (the C++ test points the tokenizer paths at them).

The worker's source is taken from the demo files with ast and executed in a
namespace holding the tiny models, so the sampling loop (section schedule,
clean latents, the generator consumed across sections, decode + soft append)
is the reference's own code. What the namespace changes, and why:
  * every model runs in fp32 (the f32 parity run); the DiT gets its bf16
    inputs (the sampler's bf16 x / timestep / guidance) cast to fp32, which
    is exact, as flick's F32 DiT takes them;
  * vae_encode takes the posterior mean: latent_dist.sample() draws from the
    global torch RNG, not from the seed (spec 1.3 [P]); flick uses the mean;
  * vae_decode returns fp16 pixels: the demo's VAE is fp16 (demo_gradio.py:74),
    so history_pixels and soft_append_bcthw are fp16 [P]; the fp32 VAE's
    output rounded to fp16 keeps that path;
  * find_nearest_bucket gets a tiny bucket list (BUCKETS) instead of the
    640 list (sizes the tiny run can afford); the rule is the reference's;
  * DEFAULT_PROMPT_TEMPLATE["crop_start"] is the tiny vocabulary's count of
    template tokens (95 for LLaMA-3's, which the reference hard-codes);
  * save_bcthw_as_mp4 keeps its uint8 tensor (the reference's own
    conversion: clamp, * 127.5 + 127.5, truncating cast) and writes no mp4;
  * high_vram = True (no offloading), TeaCache off but in the teacache run,
    attention = torch SDPA.
The same tiny transformer serves both variants (F1's checkpoint has the
original's architecture). A third run, "release.original", loads the models
in the demo's own dtypes (bf16 DiT, fp16 text encoders / SigLIP / VAE) for
flick's bf16 test; its section latents and conditioning are kept (not its
frames, to keep the fixture under 2 MB). A fourth, "teacache.original",
runs the fp32 models with TeaCache on over 10 steps (latents, and which DiT
calls reused the residual: manifest teacache.skipped_calls). A fifth,
"long.original", runs 6.5 s (5 sections: latent_paddings [3, 2, 2, 1, 0])
at 2 steps (latents only).

Writes tests/data/framepack_pipeline/: weights/, input.png, goldens.safetensors
({variant}.section{i}.latents: sample_hunyuan's output per section;
{variant}.frames: the last
saved video, uint8 [T, H, W, 3]; shared: llama_vec, clip_pooler,
start_latent, image_embeddings, image (the bucket image)), manifest.json.

Usage: /work/venv-fp/bin/python tools/framepack_pipeline_goldens.py [FRAMEPACK_DIR]
FRAMEPACK_DIR (default /work/scratch/fp-pipe) holds demo_gradio.py,
demo_gradio_f1.py and diffusers_helper/ exported from FramePack @ 97fe5db:
  git --git-dir=<FramePack.git> archive 97fe5db diffusers_helper demo_gradio.py \
      demo_gradio_f1.py | tar x -C FRAMEPACK_DIR
"""
import ast
import json
import math
import os
import shutil
import sys
import types
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests/data/framepack_pipeline"
FP_DIR = Path(sys.argv[1] if len(sys.argv) > 1 else "/work/scratch/fp-pipe")
LLAMA_TOK = ROOT / "tests/data/llama_tokenizer/tokenizer.json"
CLIP_TOK = ROOT / "tests/data/clip_tokenizer"

PROMPT = "The girl dances gracefully, with clear movements, full of charm."
# (h, w), multiples of 16. 45 x 69 input -> (32, 48): LANCZOS to 49 x 32,
# crop box (0.5, 0, 48.5, 32) rounded half to even -> (0, 0, 48, 32).
BUCKETS = [(32, 64), (32, 48), (48, 48), (48, 32)]
IMAGE_H, IMAGE_W = 45, 69
JOB = dict(seed=31337, total_second_length=2, latent_window_size=9, steps=3, cfg=1.0, gs=10.0,
           rs=0.0, gpu_memory_preservation=6, use_teacache=False, mp4_crf=16)

DIT = dict(in_channels=16, out_channels=16, num_attention_heads=2, attention_head_dim=16, num_layers=1,
           num_single_layers=1, num_refiner_layers=1, mlp_ratio=4.0, patch_size=2, patch_size_t=1,
           qk_norm="rms_norm", guidance_embeds=True, text_embed_dim=32, pooled_projection_dim=16,
           rope_theta=256.0, rope_axes_dim=(4, 6, 6), has_image_proj=True, image_proj_dim=16,
           has_clean_x_embedder=True)
VAE = dict(in_channels=3, out_channels=3, latent_channels=16, block_out_channels=(8, 8, 8, 8),
           layers_per_block=1, norm_num_groups=2, scaling_factor=0.476986,
           spatial_compression_ratio=8, temporal_compression_ratio=4, mid_block_add_attention=True)


def test_image(w, h):
    """RGB [h, w, 3] uint8 (the formula of tools/framepack_text_goldens.py)."""
    y, x, c = np.meshgrid(np.arange(h), np.arange(w), np.arange(3), indexing="ij")
    return ((x * 7 + y * 13 + c * 29 + (x * y) % 37) % 256).astype(np.uint8)


def randomise(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1 and "norm" in name:
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=g))
            elif p.ndim == 1:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif "embed_tokens" in name or "embedding" in name:
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p[0].numel()))


def save(model, folder, dtype, **kw):
    folder.mkdir(parents=True, exist_ok=True)
    for f in folder.glob("*"):
        f.unlink()
    model.to(dtype).save_pretrained(folder, safe_serialization=True, **kw)


def install_stubs():
    """venv-fp has no gradio, cv2, torchvision or einops: stand-ins for what
    the worker's path touches (utils.py imports cv2 and torchvision at the
    top; write_video is replaced by a recorder per run; einops.rearrange for
    the three patterns on the path)."""
    import importlib.machinery
    for name in ("gradio", "cv2", "torchvision", "torchvision.io"):
        try:
            __import__(name)
        except ImportError:
            mod = types.ModuleType(name)
            mod.__spec__ = importlib.machinery.ModuleSpec(name, None)
            sys.modules[name] = mod
    try:  # dit_common imports accelerate only to patch one function
        import accelerate.accelerator  # noqa: F401
    except ImportError:
        acc = types.ModuleType("accelerate")
        acc.accelerator = types.ModuleType("accelerate.accelerator")
        acc.__spec__ = importlib.machinery.ModuleSpec("accelerate", None)
        sys.modules["accelerate"], sys.modules["accelerate.accelerator"] = acc, acc.accelerator
    if not hasattr(sys.modules["torchvision"], "io"):
        sys.modules["torchvision"].io = sys.modules["torchvision.io"]
    try:
        import einops  # noqa: F401
    except ImportError:
        ein = types.ModuleType("einops")

        def rearrange(x, pattern, **k):
            if pattern == "b (t h w) (c pt ph pw) -> b c (t pt) (h ph) (w pw)":  # hunyuan_video_packed.py:1026
                t, h, w, pt, ph, pw = k["t"], k["h"], k["w"], k["pt"], k["ph"], k["pw"]
                b, _, ch = x.shape
                c = ch // (pt * ph * pw)
                x = x.reshape(b, t, h, w, c, pt, ph, pw).permute(0, 4, 1, 5, 2, 6, 3, 7)
                return x.reshape(b, c, t * pt, h * ph, w * pw)
            if pattern == "(m n) c t h w -> t (m h) (n w) c":  # save_bcthw_as_mp4, b = n = 1 here
                assert x.shape[0] == 1 and k["n"] == 1
                return x[0].permute(1, 2, 3, 0)
            if pattern == "b c t h w -> (b h) (t w) c":  # the worker's preview
                b, c, t, h, w = x.shape
                return np.ascontiguousarray(x.transpose(0, 3, 2, 4, 1)).reshape(b * h, t * w, c)
            raise NotImplementedError(pattern)

        ein.rearrange = rearrange
        sys.modules["einops"] = ein


def worker_source(path):
    tree = ast.parse(Path(path).read_text())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "worker")
    fn.decorator_list = []
    return ast.unparse(fn)


class Stream:
    class Q:
        def __init__(self):
            self.items = []

        def push(self, x):
            self.items.append(x)

        def top(self):
            return None

    def __init__(self):
        self.input_queue, self.output_queue = Stream.Q(), Stream.Q()


class F32Dit:
    """The fp32 transformer behind fm_wrapper: its bf16 inputs cast to fp32 (exact)."""

    def __init__(self, m):
        self.m, self.dtype = m, torch.float32
        self.block_runs, self.skipped, self.calls = 0, [], 0
        m.transformer_blocks[0].register_forward_hook(lambda *a: setattr(self, "block_runs", self.block_runs + 1))

    def initialize_teacache(self, **k):
        self.m.initialize_teacache(**k)

    def __call__(self, **kw):
        kw = {k: (v.float() if torch.is_tensor(v) and v.is_floating_point() else v) for k, v in kw.items()}
        before = self.block_runs
        out = self.m(**kw)
        if self.block_runs == before:  # TeaCache reused the residual
            self.skipped.append(self.calls)
        self.calls += 1
        return out


def main():
    install_stubs()
    sys.path.insert(0, str(FP_DIR))
    torch.set_num_threads(1)
    import diffusers
    import transformers
    from diffusers import AutoencoderKLHunyuanVideo
    from diffusers.pipelines.hunyuan_video.pipeline_hunyuan_video import DEFAULT_PROMPT_TEMPLATE
    from PIL import Image
    from safetensors.torch import save_file
    from transformers import (CLIPTextConfig, CLIPTextModel, CLIPTokenizer, LlamaConfig, LlamaModel,
                              PreTrainedTokenizerFast, SiglipImageProcessor, SiglipVisionConfig,
                              SiglipVisionModel)
    assert diffusers.__version__ == "0.33.1" and transformers.__version__ == "4.46.2"
    import diffusers_helper.bucket_tools as bucket_tools
    import diffusers_helper.hunyuan as hy
    import diffusers_helper.models.hunyuan_video_packed as hvp
    import diffusers_helper.utils as fu
    from diffusers_helper.clip_vision import hf_clip_vision_encode
    from diffusers_helper.pipelines.k_diffusion_hunyuan import sample_hunyuan
    hvp.sageattn = hvp.flash_attn_func = hvp.xformers_attn_func = None

    wd = OUT / "weights"
    # ---- tiny components, saved as users download them ----
    tok = PreTrainedTokenizerFast(tokenizer_file=str(LLAMA_TOK))
    tok.pad_token = "<|end_of_text|>"
    crop_start = len(tok(DEFAULT_PROMPT_TEMPLATE["template"].split("{}")[0])["input_ids"])
    tok2 = CLIPTokenizer(str(CLIP_TOK / "vocab.json"), str(CLIP_TOK / "merges.txt"))

    torch.manual_seed(0)
    llama = LlamaModel(LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=48,
                                   num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                                   rope_theta=500000.0, rms_norm_eps=1e-5, max_position_embeddings=8192,
                                   tie_word_embeddings=False)).eval()
    randomise(llama, 1)
    save(llama, wd / "text_encoder", torch.float16)
    clip = CLIPTextModel(CLIPTextConfig(vocab_size=len(tok2.get_vocab()), hidden_size=16, intermediate_size=32,
                                        num_hidden_layers=2, num_attention_heads=2, max_position_embeddings=77,
                                        hidden_act="quick_gelu", layer_norm_eps=1e-5, projection_dim=16,
                                        bos_token_id=0, eos_token_id=2, pad_token_id=1)).eval()
    randomise(clip, 2)
    save(clip, wd / "text_encoder_2", torch.float16)
    sig = SiglipVisionModel(SiglipVisionConfig(hidden_size=16, intermediate_size=24, num_hidden_layers=2,
                                               num_attention_heads=2, image_size=384, patch_size=14,
                                               hidden_act="gelu_pytorch_tanh", layer_norm_eps=1e-6)).eval()
    randomise(sig, 3)
    save(sig, wd / "image_encoder", torch.float16)
    vae = AutoencoderKLHunyuanVideo(**VAE).eval()
    randomise(vae, 4)
    with torch.no_grad():  # pixels mostly inside [-1, 1]: few clamped, so the uint8 frames carry information
        vae.decoder.conv_out.conv.weight.mul_(0.25)
        vae.decoder.conv_out.conv.bias.zero_()
    save(vae, wd / "vae", torch.float16)
    dit = hvp.HunyuanVideoTransformer3DModelPacked(**DIT).eval()
    randomise(dit, 5)
    save(dit, wd / "transformer", torch.bfloat16, max_shard_size="150KB")

    # ---- loaded as the demo loads them, in fp32 ----
    f32 = torch.float32
    text_encoder = LlamaModel.from_pretrained(wd / "text_encoder", torch_dtype=f32).eval()
    text_encoder_2 = CLIPTextModel.from_pretrained(wd / "text_encoder_2", torch_dtype=f32).eval()
    image_encoder = SiglipVisionModel.from_pretrained(wd / "image_encoder", torch_dtype=f32).eval()
    vae = AutoencoderKLHunyuanVideo.from_pretrained(wd / "vae", torch_dtype=f32).eval()
    transformer = hvp.HunyuanVideoTransformer3DModelPacked.from_pretrained(wd / "transformer", torch_dtype=f32).eval()
    transformer.high_quality_fp32_output_for_inference = True
    # FLUX.1-Redux's feature_extractor/preprocessor_config.json (lllyasviel/flux_redux_bfl).
    feature_extractor = SiglipImageProcessor(do_resize=True, size={"height": 384, "width": 384}, resample=3,
                                             do_rescale=True, rescale_factor=0.00392156862745098,
                                             do_normalize=True, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    DEFAULT_PROMPT_TEMPLATE["crop_start"] = crop_start

    bucket_tools.bucket_options[0] = BUCKETS
    image = test_image(IMAGE_W, IMAGE_H)
    Image.fromarray(image).save(OUT / "input.png")
    image = np.array(Image.open(OUT / "input.png").convert("RGB"))

    g = {}
    scratch = Path("/work/scratch/fp-pipe/outputs")
    scratch.mkdir(parents=True, exist_ok=True)
    manifest = {}
    # The release dtypes (demo_gradio.py:49-58, 73-74): text encoders, SigLIP
    # and VAE fp16, the DiT bf16 (fp32 output projection); original only.
    f16 = torch.float16
    release = dict(
        text_encoder=LlamaModel.from_pretrained(wd / "text_encoder", torch_dtype=f16).eval(),
        text_encoder_2=CLIPTextModel.from_pretrained(wd / "text_encoder_2", torch_dtype=f16).eval(),
        image_encoder=SiglipVisionModel.from_pretrained(wd / "image_encoder", torch_dtype=f16).eval(),
        vae=AutoencoderKLHunyuanVideo.from_pretrained(wd / "vae", torch_dtype=f16).eval(),
        transformer=hvp.HunyuanVideoTransformer3DModelPacked.from_pretrained(
            wd / "transformer", torch_dtype=torch.bfloat16).eval())
    release["transformer"].high_quality_fp32_output_for_inference = True
    fp32_models = dict(text_encoder=text_encoder, text_encoder_2=text_encoder_2, image_encoder=image_encoder,
                       vae=vae, transformer=F32Dit(transformer))
    # TeaCache (the demo's default, lossy) over 10 steps, so that it skips
    # some calls: the fp32 models, original variant, latents only.
    teacache = dict(JOB, steps=10, use_teacache=True)
    # 6.5 s: 5 sections, latent_paddings [3, 2, 2, 1, 0] (the > 4 rule); 2
    # steps to keep it cheap; latents only.
    long = dict(JOB, total_second_length=6.5, steps=2)
    for variant, demo, models, job in (("original", "demo_gradio.py", fp32_models, JOB),
                                       ("f1", "demo_gradio_f1.py", fp32_models, JOB),
                                       ("release.original", "demo_gradio.py", release, JOB),
                                       ("teacache.original", "demo_gradio.py",
                                        dict(fp32_models, transformer=F32Dit(transformer)), teacache),
                                       ("long.original", "demo_gradio.py", fp32_models, long)):
        rec = {"sections": [], "videos": []}

        def rec_sample(**kw):
            out = sample_hunyuan(**kw)
            rec["sections"].append(out.float().clone())
            return out

        def rec_video(x, output_filename, fps=10, crf=0):
            # The reference's own conversion (utils.py:266-280: clamp, * 127.5
            # + 127.5, truncating uint8 cast); only torchvision's write_video
            # is replaced, by a recorder.
            fu.torchvision.io.write_video = lambda f, v, fps, **k: rec["videos"].append(v.clone())
            fu.save_bcthw_as_mp4(x, output_filename, fps=fps, crf=crf)
            rec["fps"] = fps

        def vae_encode_mean(image, vae):
            return vae.encode(image.to(device=vae.device, dtype=vae.dtype)).latent_dist.mode() \
                * vae.config.scaling_factor

        def vae_decode_fp16(latents, vae, image_mode=False):
            return hy.vae_decode(latents, vae, image_mode).to(torch.float16)

        def encode_rec(*a, **k):
            lv, cp = hy.encode_prompt_conds(*a, **k)
            rec["llama_vec"], rec["clip_pooler"] = lv.float().clone(), cp.float().clone()
            return lv, cp

        def vision_rec(img, fe, enc):
            rec["image"] = torch.from_numpy(img.copy())
            out = hf_clip_vision_encode(img, fe, enc)
            rec["image_embeddings"] = out.last_hidden_state.float().clone()
            return out

        def encode_start(image, vae):
            lat = vae_encode_mean(image, vae)
            rec["start_latent"] = lat.float().clone()
            return lat

        ns = dict(
            torch=torch, np=np, os=os, math=math, einops=sys.modules["einops"], traceback=__import__("traceback"),
            Image=Image, stream=Stream(), high_vram=True, gpu=torch.device("cpu"), cpu=torch.device("cpu"),
            outputs_folder=str(scratch), generate_timestamp=lambda: "golden",
            make_progress_bar_html=lambda *a: "", encode_prompt_conds=encode_rec,
            tokenizer=tok, tokenizer_2=tok2,
            crop_or_pad_yield_mask=fu.crop_or_pad_yield_mask,
            find_nearest_bucket=lambda h, w, resolution=640: bucket_tools.find_nearest_bucket(h, w, resolution=0),
            resize_and_center_crop=fu.resize_and_center_crop, vae_encode=encode_start,
            hf_clip_vision_encode=vision_rec, feature_extractor=feature_extractor,
            sample_hunyuan=rec_sample, vae_decode=vae_decode_fp16,
            vae_decode_fake=hy.vae_decode_fake, soft_append_bcthw=fu.soft_append_bcthw,
            save_bcthw_as_mp4=rec_video, **models)
        exec(compile(worker_source(FP_DIR / demo), demo, "exec"), ns)
        with torch.no_grad():
            ns["worker"](image, PROMPT, "", job["seed"], job["total_second_length"], job["latent_window_size"],
                         job["steps"], job["cfg"], job["gs"], job["rs"], job["gpu_memory_preservation"],
                         job["use_teacache"], job["mp4_crf"])
        n_sec = int(max(round(job["total_second_length"] * 30 / (job["latent_window_size"] * 4)), 1))
        assert len(rec["sections"]) == n_sec and len(rec["videos"]) == n_sec, \
            f"{variant}: the worker failed (see the traceback above)"
        for i, s in enumerate(rec["sections"]):
            g[f"{variant}.section{i}.latents"] = s.contiguous()
        for i, v in enumerate(rec["videos"]):
            manifest[f"{variant}.video{i}.frames"] = int(v.shape[0])
        if variant.startswith("long"):
            manifest["long"] = {"seconds": job["total_second_length"], "steps": job["steps"], "sections": n_sec,
                                "frames": int(rec["videos"][-1].shape[0])}
            continue
        if variant.startswith("teacache"):  # latents only; which calls ran in full
            manifest["teacache.skipped_calls"] = models["transformer"].skipped
            manifest["teacache.steps"] = job["steps"]
            continue
        if variant.startswith("release"):  # latents and conditioning (frames: 0.34 MB, left out)
            for k in ("llama_vec", "clip_pooler", "start_latent", "image_embeddings"):
                g[f"release.{k}"] = rec[k].contiguous()
            continue
        g[f"{variant}.frames"] = rec["videos"][-1].contiguous()
        for k in ("llama_vec", "clip_pooler", "start_latent", "image_embeddings", "image"):
            if variant == "original":
                g[k] = rec[k].contiguous()
            else:
                assert torch.equal(g[k], rec[k]), k
        manifest[f"{variant}.fps"] = rec["fps"]
    save_file(g, str(OUT / "goldens.safetensors"))
    manifest.update({
        "job": JOB, "prompt": PROMPT, "buckets": BUCKETS, "image": [IMAGE_H, IMAGE_W], "crop_start": crop_start,
        "dit": DIT, "vae": {k: list(v) if isinstance(v, tuple) else v for k, v in VAE.items()},
        "framepack": "lllyasviel/FramePack@97fe5db", "torch": torch.__version__,
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "diffusers": diffusers.__version__, "transformers": transformers.__version__,
        "noise": "torch.randn on the CPU generator with the default (vectorised) kernel"})
    (OUT / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    shutil.rmtree(scratch, ignore_errors=True)
    print(f"{OUT}: {sum(f.stat().st_size for f in OUT.rglob('*') if f.is_file()) / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
