#include "backend_choice.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <string>

#include "trainrun/backend/cuda_plugin.h"
#include "trainrun/core/errors.h"

namespace trainrun {

std::unique_ptr<Backend> choose_backend(const Experiment& exp, int local_rank) {
  if (exp.device == DeviceChoice::cpu) return make_cpu_backend();
  std::string why;
  // Without a driver no GPU can be used: the plugin is not loaded (it maps the CUDA runtime and
  // cuBLASLt, 160 MiB resident per rank, to find no device).
  if (exp.device == DeviceChoice::automatic && !cuda_driver_present(&why)) {
    spdlog::info("device: auto -> cpu ({})", why);
    return make_cpu_backend();
  }
  auto be = make_cuda_backend(local_rank, &why);
  if (be) return be;
  if (exp.device == DeviceChoice::cuda)
    throw DeviceError(
        "device: cuda was requested but CUDA is not usable here: " + why +
        "\n  fix: run on a machine with an NVIDIA GPU, or --set device=cpu (or auto)");
  spdlog::info("device: auto -> cpu ({})", why);
  return make_cpu_backend();
}

void require_bf16(const Backend& be) {
  std::string missing;
  auto lacks = [&](const std::string& what) { missing += (missing.empty() ? "" : ", ") + what; };
  for (int i = 0; i < kOpCount; ++i) {
    const Op op = static_cast<Op>(i);
    if (op == Op::copy || op == Op::adamw || op == Op::sum_squares) continue;
    if (!be.supports(op, DType::bf16)) lacks(std::string(op_name(op)) + " in bf16");
  }
  if (!be.supports(Op::cast, DType::f32)) lacks("the f32 -> bf16 cast");
  if (!be.f32_param_grads_with_bf16())
    lacks("f32 parameter gradients beside bf16 activations (Backend::f32_param_grads_with_bf16)");
  if (!missing.empty())
    throw ConfigError(
        fmt::format("train.precision=bf16: the {} backend lacks {}: use --set train.precision=fp32",
                    be.describe(), missing));
}

std::unique_ptr<Communicator> make_device_communicator(const Backend& be, Communicator& host) {
  if (be.device() != Device::cuda || host.size() == 1) return nullptr;
  NcclId id{};
  if (host.rank() == 0) id = nccl_unique_id();
  host.broadcast_bytes(id.data(), id.size(), 0);
  return make_nccl_communicator(id, host.rank(), host.size(), host.local_rank());
}

}  // namespace trainrun
