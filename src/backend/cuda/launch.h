// The switch of programmatic dependent launch for every kernel of the CUDA backend
// (launch.cuh explains what it does and why it never changes a result).
#pragma once

namespace pagedkv::backend::cuda {

// Whether launch_kernel() (launch.cuh) asks for programmatic dependent launch.
// Process-wide; starts from PAGEDKV_CUDA_PDL (default on; "0" turns it off). A CUDA
// graph keeps the setting it was captured with.
bool programmatic_launch();
void set_programmatic_launch(bool on);

}  // namespace pagedkv::backend::cuda
