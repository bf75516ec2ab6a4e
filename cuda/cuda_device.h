#pragma once
// Which CUDA device a rank of the CUDA backend uses, and whether there is one.
// A process that runs one rank (process or torchrun launch: LOCAL_RANK set)
// takes device LOCAL_RANK mod the visible device count, so one rank per GPU;
// thread ranks share device 0 (one GPU cannot hold two NCCL ranks: their
// collectives go through the host, device_transport.h).
#include <string>

namespace parity::gpu {

// Empty when a CUDA device is visible; else one line saying why not.
std::string cuda_unavailable_reason();

// The device index this process's ranks use.
int rank_device_index();

}  // namespace parity::gpu
