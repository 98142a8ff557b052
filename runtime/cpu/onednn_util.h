// Shared oneDNN plumbing of the CPU backend: the one engine, a stream per
// calling thread, dtype and activation mapping.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>
#include <string>

#include "runtime/backend.h"

namespace flick::cpu {

// The process's oneDNN CPU engine, shared by every packed object.
const dnnl::engine& onednn_engine();
// A stream on that engine for the calling thread.
dnnl::stream& onednn_stream();

dnnl::memory::data_type onednn_dtype(DType t);

// Appends the eltwise post-op computing act (nothing for None).
void append_activation(dnnl::post_ops& po, Activation act);

// The implementation oneDNN picked ("brg:avx512_core_amx_int8", ...). Logs a
// warning the first time a slow reference implementation ("ref...") shows up,
// since that is a performance bug, not a correctness one.
std::string impl_name(const dnnl::primitive_desc_base& pd, const std::string& what);

}  // namespace flick::cpu
