#pragma once
// Point-to-point messages within one group (the pipeline axis): what a stage
// sends to or receives from a neighbour. A batch is issued together and
// completed together, as torch's batch_isend_irecv (Megatron's
// p2p_communication) does, so two neighbours that each send and receive in one
// batch cannot deadlock. Include this header to call Communicator::exchange.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "harness/parallel/communicator.h"

namespace parity {

enum class PointToPointDirection : std::int8_t { send, recv };

struct PointToPointOp {
  PointToPointDirection direction = PointToPointDirection::send;
  int peer = 0;  // group rank of the other side
  // send: the data. recv: the agreed shape and dtype (values ignored).
  at::Tensor tensor;
  // What the message is, agreed by both sides in advance (the pipeline encodes
  // step, microbatch, chunk and activation or gradient). --check-collectives
  // compares it with the peer's before any data moves, so a message out of
  // order is a mismatch naming both ranks, not the wrong microbatch arriving.
  std::int64_t message = -1;
  std::string label;  // how reports name it: "activation of microbatch 2"
  // Messages pair per (peer, channel), each channel in its own order. The
  // pipeline sends activations on channel 0 and gradients on channel 1: with
  // pp 2 under the interleaved schedule one batch sends a gradient and then an
  // activation to the stage that receives the activation first, and on one
  // channel each would meet the other's receive (same shape: no error).
  int channel = 0;  // in [0, kPointToPointChannels)

  static PointToPointOp send(int peer, at::Tensor data, std::int64_t message, std::string label,
                             int channel = 0);
  static PointToPointOp recv(int peer, at::Tensor like, std::int64_t message, std::string label,
                             int channel = 0);
};
inline constexpr int kPointToPointChannels = 4;

// One message as a transport moves it: `tag` numbers the messages of one
// ordered pair and channel (the k-th message from a to b on a channel has the
// same tag on both sides), so each send meets the receive meant for it
// whatever order the batch lists them in.
struct PointToPointTransfer {
  PointToPointDirection direction = PointToPointDirection::send;
  int peer = 0;
  at::Tensor tensor;  // send: contiguous data; recv: a contiguous buffer the transport fills
  int tag = 0;
};

}  // namespace parity
