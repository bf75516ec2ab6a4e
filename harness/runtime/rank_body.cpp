#include "harness/runtime/rank_body.h"

#include <dlfcn.h>
#include <signal.h>

#include <cmath>
#include <mutex>
#include <optional>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "harness/base/error_kind.h"
#include "harness/faults/code_path_faults.h"
#include "harness/parallel/c10_error_text.h"
#include "harness/parallel/communicator.h"
#include "harness/parallel/errors.h"
#include "harness/parallel/process_groups.h"
#include "harness/runtime/failure_report.h"

namespace parity {

std::chrono::milliseconds timeout_ms(const LaunchSpec& spec) {
  return std::chrono::milliseconds(std::llround(spec.timeout_seconds * 1000.0));
}

void single_intra_op_thread() {
  static std::once_flag once;
  std::call_once(once, [] {
    // OpenBLAS (Debian's libblas alternative) keeps its own pthread pool, which
    // at::set_num_threads does not limit: with one rank per thread every rank's
    // GEMMs would start BLAS threads that spin against each other (measured:
    // 2-3x slower steps at 2 thread ranks on 2 cores). Limit it too when present.
    using SetThreads = void (*)(int);
    if (auto set = reinterpret_cast<SetThreads>(::dlsym(RTLD_DEFAULT, "openblas_set_num_threads")))
      set(1);
    // First calls of some CPU kernels are not safe to race on pip LibTorch 2.11
    // (MKL inside): when two rank threads ran the model's first GELU at once,
    // about 1 run in 150 got a few elements with other rounding (seen as
    // digest differences in layer 0's first microbatch only, never later).
    // One call of each kernel family here, before any rank thread exists,
    // takes their lazy set-up off the rank threads.
    at::NoGradGuard no_grad;
    const at::Tensor x = at::linspace(-3.0, 3.0, 1024, at::kFloat).view({32, 32});
    const at::Tensor w = x.t().contiguous();
    const at::Tensor y = at::matmul(x.view({16, 2, 32}), w.t()) + x[0];
    (void)(y * 0.5 * (1.0 + at::erf(y * 0.7071067811865476)));
    (void)at::softmax(y, -1);
    (void)(at::rsqrt(y * y + 1.0) * at::exp(-y) * at::sigmoid(y) * at::tanh(y) *
           at::log1p(y.abs()));
    (void)at::matmul(y.view({2, 16, 32}), y.view({2, 16, 32}).transpose(-2, -1));
    (void)y.sum();
  });
  // Per thread, every call: OpenMP's thread count and MKL's (pip LibTorch 2.x
  // links MKL, whose mkl_set_num_threads_local is per thread) are thread-local.
  // A rank thread that left them alone ran its first GEMMs with MKL's default
  // team, whose split of the work is scheduled at run time: CI saw run-to-run
  // digest differences on torch 2.11 in the same scenario.
  at::set_num_threads(1);
}

// A peer that died closes its sockets; a write to them must fail the
// collective (EPIPE), not kill this process with SIGPIPE and make a victim
// look like a crashed culprit.
void ignore_sigpipe() {
  static std::once_flag once;
  std::call_once(once, [] { ::signal(SIGPIPE, SIG_IGN); });
}

nlohmann::json gather_results(Communicator& world, const nlohmann::json& mine) {
  const std::string text = mine.dump();
  const at::Tensor len = at::full({1}, static_cast<std::int64_t>(text.size()), at::kLong);
  const at::Tensor lens = world.all_gather(len, 0);
  const std::int64_t longest = std::max<std::int64_t>(lens.max().item<std::int64_t>(), 1);
  at::Tensor bytes = at::zeros({1, longest}, at::kByte);
  std::copy(text.begin(), text.end(), reinterpret_cast<char*>(bytes.data_ptr<std::uint8_t>()));
  const at::Tensor all = world.all_gather(bytes, 0).contiguous();
  const auto* data = reinterpret_cast<const char*>(all.data_ptr<std::uint8_t>());
  nlohmann::json out = nlohmann::json::array();
  for (std::int64_t r = 0; r < all.size(0); ++r)
    out.push_back(nlohmann::json::parse(
        std::string(data + r * longest, static_cast<std::size_t>(lens[r].item<std::int64_t>()))));
  return out;
}

// Under --check-collectives every group ends with a barrier, before the world
// gathers the results: a rank that ends its program while a peer still waits
// in a call of a group they share (one this rank skipped) meets that call with
// its barrier, a fingerprint mismatch naming both ranks instead of a hang. EP
// first: an EP group lies inside the cp x dp groups, so a peer left in an EP
// call would otherwise wait there while this rank waits for it in cp or dp.
// The pipeline group last: it joins stages whose own groups end first.
static void exit_barriers(RankGroups& groups) {
  if (groups.etp) {
    // The expert layout's own groups lie inside the stage too.
    for (Communicator* group : {groups.etp.get(), groups.edp.get()})
      if (group->size() > 1) group->barrier();
  }
  for (Axis axis : {Axis::ep, Axis::tp, Axis::cp, Axis::dp, Axis::pp}) {
    Communicator& group = groups.get(axis);
    if (group.size() > 1) group.barrier();
  }
}

// The CPU allocator's refusal ("DefaultCPUAllocator: can't allocate memory: you
// tried to allocate 4000000000000 bytes. Error code 12 ...") as a person reads it.
static std::string out_of_memory_text(const std::string& message) {
  const std::string key = "you tried to allocate ";
  const std::size_t at = message.find(key);
  if (message.find("can't allocate memory") == std::string::npos || at == std::string::npos)
    return message;
  const std::size_t begin = at + key.size();
  const std::string bytes = message.substr(begin, message.find(' ', begin) - begin);
  return "out of memory: an allocation of " + bytes +
         " bytes failed (shrink the model or the batch, or shard over more ranks)";
}

RankEnd run_rank_body(const RankRun& run, int rank, RankStatus& status, const CancelToken& cancel) {
  single_intra_op_thread();            // this rank's thread: see there
  RankStatusScope this_rank(&status);  // GraphCaptureScope finds it here
  RankEnd end;
  auto failed = [&](const std::string& message, ThrownError thrown, const KindedError* kinded) {
    end.outcome = Outcome::threw;
    end.error = one_line(message);
    end.thrown = thrown;
    if (kinded) end.error_kind = std::string(kinded->error_kind());
    // The communicator leaves a collective only when it completed.
    end.in_collective = status.state() == RankState::in_collective;
    status.set_error(end.error);
    status.set_state(RankState::failed);
  };
  // The groups outlive the handlers below: tearing them down closes this rank's
  // sockets, which is how its peers learn it is gone. The failure must be in
  // the status record before that, or a peer's "connection closed" can reach
  // the supervisor first and the culprit looks like a victim.
  std::shared_ptr<Rendezvous> rdv;
  std::optional<RankGroups> groups;
  // The run's code-path faults hold on this rank thread, for its collectives too.
  const CodePathFaultScope code_path_faults(run.spec.faults);
  try {
    status.set_state(RankState::starting);
    rdv = run.rendezvous();
    // Every rank alive before any creates a group: group creation is bounded by
    // the Gloo timeout, process start-up only by the start-up grace.
    if (run.topology.world_size() > 1) {
      const auto limit =
          timeout_ms(run.spec) +
          std::chrono::milliseconds(static_cast<long long>(2000 * kStartupGraceSeconds));
      rdv->wait_for_every_rank("parity-started", rank, run.topology.world_size(), limit, [&] {
        status.mark_progress();
        if (cancel.cancelled()) throw RankCancelled();
      });
    }
    std::unique_ptr<TransportFactory> factory = make_transport_factory(run.spec.transport);
    GroupOptions options;
    options.timeout = timeout_ms(run.spec);
    options.communicator.check_collectives = run.spec.check_collectives;
    groups.emplace(make_rank_groups(run.topology, rank, *rdv, *factory, &status, options));
    status.set_state(RankState::running);
    RankContext ctx{run.spec, run.arguments, run.topology, rank,   run.topology.coordinates(rank),
                    *groups,  status,        run.faults,   cancel, run.own_process};
    nlohmann::json result = run.program(ctx);
    if (run.spec.check_collectives) exit_barriers(*groups);
    if (run.gather) result = gather_results(groups->get(Axis::world), result);
    // Exit barrier (as dist.barrier() before destroy_process_group): a rank
    // whose program issued no collective could otherwise tear its groups down
    // while a peer is still completing its handshake with it ("Connection
    // closed by peer" in the peer's group creation).
    if (groups->get(Axis::world).size() > 1) groups->get(Axis::world).barrier();
    status.set_state(RankState::finished);
    end.outcome = Outcome::ok;
    end.result = std::move(result);
  } catch (const SimulatedCrash&) {
    end.outcome = Outcome::crashed;
    end.in_collective = status.state() == RankState::in_collective;
    status.set_state(RankState::failed);
  } catch (const RankCancelled&) {
    end.outcome = Outcome::cancelled;
    end.in_collective = status.state() == RankState::in_collective;
  } catch (const CollectiveMismatch& e) {
    failed(e.what(), ThrownError::collective_mismatch, nullptr);
  } catch (const std::exception& e) {
    // c10::Error's what() carries a C++ backtrace: the message alone, one line.
    failed(out_of_memory_text(c10_error_text(e)),
           dynamic_cast<const CollectiveTimeout*>(&e) ? ThrownError::collective_timeout
                                                      : ThrownError::other,
           dynamic_cast<const KindedError*>(&e));
  } catch (...) {
    failed("unknown exception (not a std::exception)", ThrownError::other, nullptr);
  }
  return end;
}

}  // namespace parity
