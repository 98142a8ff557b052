#!/bin/bash
# The GPU checks of the CUDA backend, on a machine with an NVIDIA GPU and
# none of the Debian libraries flick's CPU side needs (README "GPU tests").
#
#   tools/gpu_check.sh bundle BUILD DIR   (here, after building BUILD with
#       -DFLICK_CUDA=ON: cmake --build BUILD --target test_cuda flick_cuda
#       flick_cuda_bench flick_cudnn_probe) copies the four binaries into DIR;
#   tools/gpu_check.sh run DIR [OUTDIR]   (on the GPU machine) finds the CUDA
#       runtime, cuBLASLt and cuDNN (the toolkit's, or the Python wheels'),
#       runs the op tests against the reference (test_cuda), the PyTorch
#       peer (tools/gpu_torch_peer.py, if torch is there) and flick_cuda_bench
#       with the peer's measured bf16 peak, the GPU's cuDNN DEVICEPROP JSON
#       (device_prop.json, and the probe's graphs against it), and
#       compute-sanitizer's memcheck over the op tests. Logs go to OUTDIR
#       (default DIR/logs).
set -u
case "${1:-}" in
bundle)
  build=$2 dir=$3
  mkdir -p "$dir"
  cp "$build/tests/test_cuda" "$build/libflick_cuda.so" "$build/flick_cuda_bench" \
    "$build/runtime/cuda/flick_cudnn_probe" "$dir/"
  ls -la "$dir"
  exit 0
  ;;
run) dir=$(cd "$2" && pwd) out=${3:-$2/logs} ;;
*)
  echo "usage: $0 bundle BUILD DIR | run DIR [OUTDIR]" >&2
  exit 2
  ;;
esac
mkdir -p "$out"
here=$(cd "$(dirname "$0")/.." && pwd)

# The libraries' folders: the toolkit, then the pip wheels beside torch.
libdirs=""
for lib in libcudart.so.13 libcublasLt.so.13 libcudnn.so.9; do
  found=$(find /usr/local/cuda*/ /usr/lib/x86_64-linux-gnu /opt /usr/local/lib -name "$lib" \
    2>/dev/null | head -1)
  if [ -z "$found" ]; then
    echo "gpu_check: $lib not found" | tee -a "$out/summary.txt"
  else
    libdirs="$libdirs:$(dirname "$found")"
  fi
done
export LD_LIBRARY_PATH="${libdirs#:}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export FLICK_CUDA_MODULE="$dir/libflick_cuda.so"
{
  nvidia-smi -L
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  ldd "$dir/libflick_cuda.so" "$dir/test_cuda" "$dir/flick_cuda_bench" "$dir/flick_cudnn_probe" | grep -E "not found|cudnn|cublas|cudart"
} 2>&1 | tee -a "$out/summary.txt"

echo "== test_cuda" | tee -a "$out/summary.txt"
timeout 120 "$dir/test_cuda" 2>&1 | tee "$out/test_cuda.log" | grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|^\[ +OK|error|Expected|Which is|actual" \
  | head -80 | tee -a "$out/summary.txt"
echo "test_cuda exit ${PIPESTATUS[0]}" | tee -a "$out/summary.txt"

peak=0
if python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
  echo "== torch peer" | tee -a "$out/summary.txt"
  # torch brings its own cuDNN: the toolkit's folder on LD_LIBRARY_PATH may
  # hold an older one, which torch refuses.
  timeout 90 env -u LD_LIBRARY_PATH python3 "$here/tools/gpu_torch_peer.py" 2>&1 | tee "$out/torch_peer.log" | tee -a "$out/summary.txt"
  peak=$(awk '/^peak_tflops/ {print $2}' "$out/torch_peer.log")
fi
echo "== flick_cuda_bench" | tee -a "$out/summary.txt"
timeout 120 "$dir/flick_cuda_bench" --peak-tflops "${peak:-0}" 2>&1 | tee "$out/bench.log" | tee -a "$out/summary.txt"
echo "flick_cuda_bench exit ${PIPESTATUS[0]}" | tee -a "$out/summary.txt"

# This GPU's DEVICEPROP JSON (a fixture for tests/cuda/device_props), and the
# deviceless probe's graphs against it.
echo "== cuDNN device properties" | tee -a "$out/summary.txt"
if "$dir/flick_cudnn_probe" --dump-device >"$out/device_prop.json" 2>>"$out/summary.txt"; then
  timeout 120 "$dir/flick_cudnn_probe" "$out/device_prop.json" >"$out/probe.log" 2>&1
  echo "probe on this device's properties: exit $? (probe.log)" | tee -a "$out/summary.txt"
fi

if command -v compute-sanitizer >/dev/null && [ "${GPU_CHECK_SANITIZER:-1}" = 1 ]; then
  echo "== compute-sanitizer memcheck test_cuda" | tee -a "$out/summary.txt"
  timeout 100 compute-sanitizer --tool memcheck "$dir/test_cuda" --gtest_brief=1 >"$out/memcheck.log" 2>&1
  echo "memcheck exit $?" | tee -a "$out/summary.txt"
  grep -E "ERROR SUMMARY|Invalid|out of bounds" "$out/memcheck.log" | head -20 | tee -a "$out/summary.txt"
fi
