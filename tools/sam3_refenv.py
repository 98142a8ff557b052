"""Run the EfficientSAM3 reference code (SimonZeng7108/efficientsam3, which
vendors facebookresearch/sam3 under sam3/) on a CPU-only host, for golden
generation and key tables.

Nothing of the reference is committed to flick. At run time this module
exports the reference tree from a local bare git mirror (the `fetch` tool's
/work/.mirror/SimonZeng7108+efficientsam3/repo, or any clone given with
--mirror) into a temporary directory and imports the `sam3` package from it.
The image path needs no source patch at REF_COMMIT: the vendored sam3 picks
its device through sam3.device.get_device() and the builders default to CPU
when CUDA is absent. One import is satisfied by a stand-in:
sam3/train/data/sam3_image_dataset.py (imported through the tracker base
for its collator) raises ImportError unless one of decord / torchcodec / cv2
is importable; the image path never decodes a video, so an inert `decord`
module whose readers raise is put in sys.modules. Everything else is the
pinned packages below.

Python environment (CPU only, PyPI), e.g. in a venv outside the repository:

    python3 -m venv /work/venv-sam3
    /work/venv-sam3/bin/pip install -r <(python3 tools/sam3_refenv.py --requirements)

torch's PyPI wheel pulls its CUDA libraries too; they are never loaded.
"""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
import tempfile
import types
from pathlib import Path

REF_REPO = "SimonZeng7108/efficientsam3"
REF_COMMIT = "c1f0b02"  # "Fix missing-keys warnings: strip unused timm ImageNet heads ..."
DEFAULT_MIRROR = "/work/.mirror/SimonZeng7108+efficientsam3/repo"

# What `import sam3.model_builder` and the image path need. Versions are the
# ones the goldens in tests/data/sam3 were produced with.
REQUIREMENTS = [
    "torch==2.15.0",
    "torchvision==0.29.2",
    "numpy",
    "safetensors",
    "timm==1.0.31",
    "iopath",
    "huggingface_hub",
    "ftfy==6.3.1",
    "regex",
    "psutil",
    "tqdm",
    "pillow",
    "einops",
    "pycocotools",
]


def export_reference(mirror: str, commit: str, dest: Path) -> Path:
    """Writes the text files and the BPE vocabulary of <commit>:sam3/ under
    dest and returns the directory to put on sys.path (the one holding the
    `sam3` package). Other binary assets are skipped (the mirror may lack
    their blobs)."""
    git = ["git", f"--git-dir={mirror}"]
    listing = subprocess.run(git + ["ls-tree", "-r", commit, "sam3"],
                             check=True, capture_output=True, text=True).stdout
    wanted = []
    for line in listing.splitlines():
        meta, path = line.split("\t", 1)
        _, kind, sha = meta.split()
        if kind == "blob" and path.endswith((".py", ".json", ".yaml", ".txt", ".txt.gz")):
            wanted.append((sha, path))
    batch = subprocess.run(git + ["cat-file", "--batch"],
                           input="".join(f"{sha}\n" for sha, _ in wanted).encode(),
                           check=True, capture_output=True).stdout
    pos = 0
    for sha, path in wanted:
        header_end = batch.index(b"\n", pos)
        header = batch[pos:header_end].decode().split()
        if header[-1] == "missing":
            pos = header_end + 1
            continue
        size = int(header[2])
        data = batch[header_end + 1:header_end + 1 + size]
        pos = header_end + 1 + size + 1
        target = dest / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    root = dest / "sam3"
    assert (root / "sam3" / "model_builder.py").is_file(), root
    assert (root / "assets" / "bpe_simple_vocab_16e6.txt.gz").is_file(), "BPE vocabulary missing"
    return root


def _inert_decord() -> types.ModuleType:
    mod = types.ModuleType("decord")

    def unavailable(*_args, **_kwargs):
        raise RuntimeError("decord stand-in (tools/sam3_refenv.py): video decoding is not available")

    mod.cpu = unavailable
    mod.VideoReader = unavailable
    return mod


@contextlib.contextmanager
def reference(mirror: str = DEFAULT_MIRROR, commit: str = REF_COMMIT):
    """Context in which `import sam3` is the reference at <commit>. Yields the
    exported package root (assets such as the BPE vocabulary are under
    <root>/assets)."""
    with tempfile.TemporaryDirectory(prefix="sam3-ref-") as tmp:
        root = export_reference(mirror, commit, Path(tmp))
        sys.path.insert(0, str(root))
        had_decord = "decord" in sys.modules
        if not had_decord:
            sys.modules["decord"] = _inert_decord()
        try:
            yield root
        finally:
            sys.path.remove(str(root))
            if not had_decord:
                del sys.modules["decord"]
            for name in [m for m in sys.modules if m == "sam3" or m.startswith("sam3.")]:
                del sys.modules[name]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requirements", action="store_true", help="print the pip requirements")
    ap.add_argument("--check", action="store_true", help="import the reference and build a tiny model")
    ap.add_argument("--mirror", default=DEFAULT_MIRROR)
    args = ap.parse_args()
    if args.requirements:
        print("\n".join(REQUIREMENTS))
    if args.check:
        with reference(args.mirror) as root:
            import sam3.model_builder as mb  # noqa: F401
            print("reference importable from", root)


if __name__ == "__main__":
    main()
