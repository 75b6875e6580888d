// Host entry points of the examples' device code (examples/device_fill.cu).
#pragma once

#include <cstddef>

namespace examples {

// Sets data[0..n) (device memory) to `value` on `stream` (a cudaStream_t;
// nullptr = default). Returns the cudaError_t of the launch (0 = success).
int DeviceFill(float* data, size_t n, float value, void* stream = nullptr);
int DeviceFill(double* data, size_t n, double value, void* stream = nullptr);
int DeviceFill(long long* data, size_t n, long long value, void* stream = nullptr);

}  // namespace examples
