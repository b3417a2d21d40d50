// Devices a rank can compute on. CPU is always present; CUDA when built with it and a GPU is
// visible. The kernels of kernels.h pick their implementation from the device of the buffers.
#pragma once
#include <string>

namespace pn {

enum class Device { CPU, CUDA };

bool cuda_built();          // compiled with the CUDA path
int cuda_device_count();    // GPUs visible to this process (0 when not built)
std::string device_name(Device d);
// Threads for this rank's OpenMP loops and GEMMs.
void set_num_threads(int n);
int num_threads();
int hardware_cores();

}  // namespace pn
