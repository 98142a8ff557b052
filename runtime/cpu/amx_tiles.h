// AMX tile configuration shared by the AMX kernels and the peak benchmark.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace flick::cpu::amx {

// Palette 1 with all eight tiles 16 rows x 64 bytes, the shape every flick
// AMX kernel uses; loaded on the calling thread (tile state is per thread).
// Static and target-attributed: usable from files built without AMX flags.
__attribute__((target("amx-tile"))) static inline void configure_full_tiles() {
  struct alignas(64) TileConfig {
    uint8_t palette = 1;
    uint8_t start_row = 0;
    uint8_t reserved[14] = {};
    uint16_t colsb[16] = {};
    uint8_t rows[16] = {};
  } cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  _tile_loadconfig(&cfg);
}

}  // namespace flick::cpu::amx
