// A synthetic Wan2.1 VAE checkpoint in memory: every key and shape of
// Wan2.1_VAE.pth (encoder.*, decoder.*, conv1.*, conv2.*; 194 tensors,
// 126,892,531 parameters at dim 96), F32, deterministic random values
// generated on first access (so a decoder-only load generates only the
// decoder's). For benchmarks and full-size shape tests without the 508 MB
// download; tools/mg2_synth_full.py writes the same layout to disk.
//
// Values with the statistics of mg2_synth_full.py's (conv weights mean 0,
// variance 1/fan_in; norm gammas 1 +- 0.1; biases 0.02), uniformly
// distributed, from a per-tensor stream seeded by (seed, name).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/status.h"
#include "runtime/weights/weight_store.h"

namespace flick::wan_vae {

// The architecture of Wan2.1's VideoVAE_: base width `dim` (96; the
// tiny goldens use 2), channel multipliers 1, 2, 4, 4, 2 residual blocks per
// encoder stage (3 per decoder stage), z_dim 16, time down / up in the last
// two / first two resamplers.
struct SyntheticTensor {
  std::string name;
  std::vector<int64_t> shape;
};
std::vector<SyntheticTensor> wan_vae_checkpoint_layout(int64_t dim);

// A store holding that layout (file name "synthetic:Wan2.1_VAE.pth").
Expected<WeightStore> make_synthetic_wan_vae(int64_t dim, uint64_t seed);

}  // namespace flick::wan_vae
