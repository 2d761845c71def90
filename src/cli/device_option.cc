// --device / PAGEDKV_DEVICE (see device_option.h).
#include "cli/device_option.h"

#include "util/knobs.h"

#ifdef PAGEDKV_HAVE_CUDA
#include "model/cuda/cuda_model.h"
#endif

namespace pagedkv::cli {

void add_device_option(ArgParser& p) {
  p.add_option("device", "DEV",
               "where the model runs: cpu, cuda or cuda:N (env PAGEDKV_DEVICE; default cpu)");
}

std::string requested_device(const ArgParser& p) {
  if (auto d = p.get_optional("device"); d && !d->empty()) return *d;
  if (auto e = env_string("PAGEDKV_DEVICE"); e && !e->empty()) return *e;
  return "cpu";
}

StatusOr<std::unique_ptr<model::Model>> load_model_on(const std::string& dir,
                                                      const std::string& device) {
  if (device == "cpu") return model::load_model(dir);
  int ordinal = -1;
  if (device == "cuda") {
    ordinal = 0;
  } else if (device.rfind("cuda:", 0) == 0 && device.size() > 5 && device.size() < 9 &&
             device.find_first_not_of("0123456789", 5) == std::string::npos) {
    ordinal = std::stoi(device.substr(5));
  } else {
    return invalid_argument("--device / PAGEDKV_DEVICE: '" + device +
                            "' is not cpu, cuda or cuda:N");
  }
#ifdef PAGEDKV_HAVE_CUDA
  return model::cuda::load_cuda_model(dir, {}, ordinal);
#else
  (void)ordinal;
  return failed_precondition("--device " + device +
                             ": this pagedkv was built without the CUDA backend (configure "
                             "with -DPAGEDKV_CUDA=ON on a machine with nvcc)");
#endif
}

}  // namespace pagedkv::cli
