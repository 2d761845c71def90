// The switch of programmatic dependent launch for every kernel of the CUDA backend
// (launch.cuh explains what it does and why it never changes a result), and the
// device fact that launch shapes are chosen by (the SM count).
#pragma once

namespace pagedkv::backend::cuda {

// Whether launch_kernel() (launch.cuh) asks for programmatic dependent launch.
// Process-wide; starts from PAGEDKV_CUDA_PDL (default on; "0" turns it off). A CUDA
// graph keeps the setting it was captured with.
bool programmatic_launch();
void set_programmatic_launch(bool on);

// SMs of the current device (asked once per device; 132, an H100/H200's, when it
// cannot be read). Launch shapes only: no kernel's bits depend on it.
int sm_count();

}  // namespace pagedkv::backend::cuda
