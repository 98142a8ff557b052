// load_cuda_backend() on a machine or build without the CUDA module: an
// unavailable() Status that names the path tried and how to get the module
// (the daemon reports it for a pipeline with backend = "cuda").
#include <gtest/gtest.h>

#include <cstdlib>

#include "runtime/backend.h"

namespace flick {
namespace {

TEST(CudaLoader, MissingModuleIsAClearError) {
  const char* old = std::getenv("FLICK_CUDA_MODULE");
  const std::string saved = old ? old : "";
  setenv("FLICK_CUDA_MODULE", "/nonexistent/libflick_cuda.so", 1);
  auto b = load_cuda_backend();
  if (old) {
    setenv("FLICK_CUDA_MODULE", saved.c_str(), 1);
  } else {
    unsetenv("FLICK_CUDA_MODULE");
  }
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kUnavailable);
  const std::string& m = b.status().message();
  EXPECT_NE(m.find("/nonexistent/libflick_cuda.so"), std::string::npos) << m;
  EXPECT_NE(m.find("-DFLICK_CUDA=ON"), std::string::npos) << m;
}

}  // namespace
}  // namespace flick
