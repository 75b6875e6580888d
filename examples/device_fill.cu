// Device code of the examples: fills a device buffer with one value, so that
// with --device cuda the examples' inputs are produced on the GPU itself.
// Built for sm_80 and sm_90 (Hopper) when CUDA is found.
#include <cuda_runtime_api.h>

#include "device_fill.h"

namespace examples {
namespace {

template <typename T>
__global__ void FillKernel(T* data, size_t n, T value) {
  size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) data[i] = value;
}

template <typename T>
int Launch(T* data, size_t n, T value, void* stream) {
  if (n == 0) return 0;
  const unsigned threads = 256;
  const unsigned blocks = static_cast<unsigned>((n + threads - 1) / threads);
  FillKernel<T><<<blocks, threads, 0, static_cast<cudaStream_t>(stream)>>>(data, n, value);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

int DeviceFill(float* data, size_t n, float value, void* stream) { return Launch(data, n, value, stream); }
int DeviceFill(double* data, size_t n, double value, void* stream) { return Launch(data, n, value, stream); }
int DeviceFill(long long* data, size_t n, long long value, void* stream) { return Launch(data, n, value, stream); }

}  // namespace examples
