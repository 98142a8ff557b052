"""Run the Matrix-Game 2.0 reference code (SkyworkAI/Matrix-Game, folder
Matrix-Game-2/) on a CPU-only host, for golden generation.

Nothing of the reference is committed to flick. At run time this module
exports the reference tree from a local bare git mirror into a temporary
directory, adapts it there and imports it:

  * flash-attn / FlashAttention-3 / the CUDA-only `flash_attention` wrappers
    are replaced by torch.nn.functional.scaled_dot_product_attention with the
    same [B, L, H, D] layout, the same default scale 1/sqrt(D) and the input
    dtype on the way out (no cast to bf16, so fp32 runs stay fp32);
  * `torch.cuda.current_device()` (hard-coded in posemb_layers.py, used while
    building the action-module RoPE tables) answers "cpu" while the reference
    modules are constructed;
  * modules the golden path never executes but that fail to import without a
    GPU stack or heavy optional packages are replaced by inert stand-ins:
    utils.visualize (cv2), demo_utils.constant (allocates ~2 GB of zeros that
    the pipeline immediately replaces by None), the two tokenizer modules
    (transformers/ftfy; only the unused text tower needs them) and the
    package __init__ files of `wan` / `wan.modules` (they import T5 and the
    Wan2.1 pipelines, which touch CUDA at import time);
  * SOURCE_PATCHES below: the only textual edits, each checked to match
    exactly once. They relax two asserts that hard-code 880 tokens per latent
    frame (352x640 input) so that the tiny goldens can use a 4x6 latent.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.machinery
import subprocess
import sys
import tempfile
import types
from pathlib import Path

import torch
import torch.nn.functional as F

REF_REPO = "SkyworkAI/Matrix-Game"
REF_MIRROR_REPO = "kristofe/Matrix-Game"  # holds upstream commit 3ceb311 unchanged
REF_COMMIT = "3ceb3114b65ff2c70ce9c3d6cab207b340ebe650"
REF_FOLDER = "Matrix-Game-2"
DEFAULT_MIRROR = "/work/.mirror/kristofe+Matrix-Game/repo"

# (file, exact old text, replacement, reason). Applied to the temporary export.
SOURCE_PATCHES = [
    ("wan/modules/action_module.py",
     "            assert S == 880\n",
     "            assert S == _GOLDEN_FRAME_TOKENS\n",
     "keyboard branch asserts 880 tokens per latent frame (44x80 latent); "
     "the tiny goldens use 6 (4x6 latent)"),
    ("wan/modules/action_module.py",
     "                        assert k.shape[0] == 880 #",
     "                        assert k.shape[0] == _GOLDEN_FRAME_TOKENS #",
     "same 880 assumption in the keyboard KV-cache write (B=1 check)"),
]


def export_reference(mirror: str, commit: str, dest: Path) -> Path:
    """Writes the text files of <commit>:Matrix-Game-2 under dest; returns the
    Matrix-Game-2 directory. Binary assets are skipped (the mirror may lack
    their blobs)."""
    git = ["git", f"--git-dir={mirror}"]
    listing = subprocess.run(git + ["ls-tree", "-r", commit, REF_FOLDER],
                             check=True, capture_output=True, text=True).stdout
    wanted = []
    for line in listing.splitlines():
        meta, path = line.split("\t", 1)
        _, kind, sha = meta.split()
        if kind == "blob" and path.endswith((".py", ".json", ".yaml")):
            wanted.append((sha, path))
    batch = subprocess.run(git + ["cat-file", "--batch"],
                           input="".join(f"{sha}\n" for sha, _ in wanted).encode(),
                           check=True, capture_output=True).stdout
    pos = 0
    for sha, path in wanted:
        header_end = batch.index(b"\n", pos)
        got_sha, _, size = batch[pos:header_end].decode().split()
        assert got_sha == sha, (got_sha, sha)
        body = batch[header_end + 1:header_end + 1 + int(size)]
        pos = header_end + 1 + int(size) + 1
        out = dest / path
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(body)
    return dest / REF_FOLDER


def apply_source_patches(root: Path) -> None:
    for rel, old, new, _why in SOURCE_PATCHES:
        path = root / rel
        text = path.read_text()
        count = text.count(old)
        if count != 1:
            raise RuntimeError(f"{rel}: patch anchor found {count} times, expected 1: {old!r}")
        path.write_text(text.replace(old, new))


def sdpa_blhd(q, k, v, causal=False, softmax_scale=None):
    """flash-attn layout [B, L, H, D] on top of SDPA; keeps the input dtype."""
    assert not causal
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                         scale=softmax_scale)
    return out.transpose(1, 2).contiguous()


def _flash_attention_standin(q, k, v, q_lens=None, k_lens=None, dropout_p=0., softmax_scale=None,
                             q_scale=None, causal=False, window_size=(-1, -1), deterministic=False,
                             dtype=torch.bfloat16, version=None, fa_version=None):
    # Every call site in the inference path passes full lengths (k_lens=None, or
    # seq_lens equal to the sequence length), no window and no q_scale.
    assert q_lens is None and q_scale is None and window_size == (-1, -1) and dropout_p == 0.
    if k_lens is not None:
        assert int(k_lens.min()) == k.shape[1], "padded k_lens are not used by the inference path"
    return sdpa_blhd(q, k, v, causal=causal, softmax_scale=softmax_scale)


def _flash_attn_func_standin(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, **kw):
    assert dropout_p == 0.0 and not kw
    return sdpa_blhd(q, k, v, causal=causal, softmax_scale=softmax_scale)


def _module(name: str, path: Path | None = None, **attrs) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=path is not None)
    if path is not None:
        mod.__path__ = [str(path)]
    for key, value in attrs.items():
        setattr(mod, key, value)
    return mod


class _UnusedTokenizer:
    """The text tower of the CLIP checkpoint is never run by Matrix-Game 2."""

    def __init__(self, *args, **kwargs):
        pass


@contextlib.contextmanager
def cpu_instead_of_cuda_device():
    saved = torch.cuda.current_device
    torch.cuda.current_device = lambda: "cpu"
    try:
        yield
    finally:
        torch.cuda.current_device = saved


class Reference:
    """The imported, CPU-adapted reference modules."""

    def __init__(self, mirror: str = DEFAULT_MIRROR, commit: str = REF_COMMIT):
        self._tmp = tempfile.TemporaryDirectory(prefix="mg2ref-")
        self.root = export_reference(mirror, commit, Path(self._tmp.name))
        apply_source_patches(self.root)
        self.commit = commit
        self._install_shims()
        self._import()

    def _install_shims(self) -> None:
        root = self.root
        if str(root) not in sys.path:
            sys.path.insert(0, str(root))
        for name in ["wan", "wan.modules", "wan.vae", "wan.vae.wanx_vae_src", "utils",
                     "demo_utils", "pipeline"]:
            if name in sys.modules and not getattr(sys.modules[name], "__file__", "").startswith(str(root)):
                del sys.modules[name]
        fa = _module("flash_attn", flash_attn_func=_flash_attn_func_standin, __version__="0.0.0")
        sys.modules["flash_attn"] = fa
        sys.modules["wan"] = _module("wan", root / "wan")
        sys.modules["wan.modules"] = _module("wan.modules", root / "wan" / "modules")
        sys.modules["wan.modules.tokenizers"] = _module("wan.modules.tokenizers",
                                                        HuggingfaceTokenizer=_UnusedTokenizer)
        sys.modules["wan.vae.wanx_vae_src.tokenizers"] = _module(
            "wan.vae.wanx_vae_src.tokenizers", HuggingfaceTokenizer=_UnusedTokenizer)
        sys.modules["utils.visualize"] = _module("utils.visualize", process_video=None)
        sys.modules["demo_utils.constant"] = _module("demo_utils.constant",
                                                     ZERO_VAE_CACHE=[None] * 32)

    def _import(self) -> None:
        imp = importlib.import_module
        with cpu_instead_of_cuda_device():
            self.attention = imp("wan.modules.attention")
            self.model = imp("wan.modules.model")
            self.posemb = imp("wan.modules.posemb_layers")
            self.action_module = imp("wan.modules.action_module")
            self.causal_model = imp("wan.modules.causal_model")
            self.vae_modules = imp("wan.modules.vae")
            self.vae_block3 = imp("demo_utils.vae_block3")
            self.wanx_attention = imp("wan.vae.wanx_vae_src.attention")
            self.wanx_vae = imp("wan.vae.wanx_vae_src.vae")
            self.wanx_clip = imp("wan.vae.wanx_vae_src.clip")
            self.wanx_wrapper = imp("wan.vae.wanx_vae")
            self.scheduler = imp("utils.scheduler")
            self.wan_wrapper = imp("utils.wan_wrapper")
            self.causal_inference = imp("pipeline.causal_inference")
        # Attention: every CUDA-only entry point goes to SDPA.
        self.attention.flash_attention = _flash_attention_standin
        self.attention.attention = _flash_attention_standin
        self.attention.FLASH_ATTN_2_AVAILABLE = False
        self.attention.FLASH_ATTN_3_AVAILABLE = False
        self.model.flash_attention = _flash_attention_standin
        self.causal_model.attention = _flash_attention_standin
        self.wanx_attention.flash_attention = _flash_attention_standin
        self.wanx_clip.flash_attention = _flash_attention_standin
        self.action_module.flash_attn_func = _flash_attn_func_standin
        self.action_module.FLASH_ATTN_3_AVAILABLE = False
        self.action_module._GOLDEN_FRAME_TOKENS = 880

    def set_frame_tokens(self, tokens: int) -> None:
        self.action_module._GOLDEN_FRAME_TOKENS = tokens

    def close(self) -> None:
        self._tmp.cleanup()
