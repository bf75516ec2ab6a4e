// Rendezvous::node_file: the FileStore the ranks of one node share under a
// torchrun whose store this LibTorch cannot speak to.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <chrono>
#include <string>
#include <vector>

#include "harness/base/files.h"
#include "harness/parallel/errors.h"
#include "harness/parallel/rendezvous.h"
#include "harness/parallel/rendezvous_store.h"

namespace parity {
namespace {

constexpr std::chrono::milliseconds kTimeout{20000};

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }

// A store file a dead run left behind: its keys were set, its ranks never all left.
void leave_a_dead_runs_store(const std::string& dir) {
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  const std::shared_ptr<Rendezvous> dead = Rendezvous::file(dir + "/store", 2, kTimeout);
  dead->store().store->set("tp.cp0.dp0/g0/rank_0", bytes("10.0.0.9:4242"));
}

TEST(Rendezvous, NodeFileDiscardsADeadRunsStoreAndSharesTheLiveOne) {
  const files::TempDir tmp("parity-test-rendezvous");
  const std::string dir = tmp.path() + "/run";
  leave_a_dead_runs_store(dir);
  ASSERT_TRUE(files::exists(dir + "/store"));
  {
    const std::shared_ptr<Rendezvous> a = Rendezvous::node_file(dir, 2, kTimeout);
    EXPECT_EQ(a->describe(), "FileStore " + dir + "/store");
    // The dead run's key is gone: a rank would have dialled its address.
    EXPECT_FALSE(a->store().store->check({"tp.cp0.dp0/g0/rank_0"}));
    a->store().store->set("from-a", bytes("1"));
    // The second rank arrives while the first holds the store: nothing is discarded.
    const std::shared_ptr<Rendezvous> b = Rendezvous::node_file(dir, 2, kTimeout);
    EXPECT_EQ(b->store().store->get("from-a"), bytes("1"));
    b->store().store->set("from-b", bytes("2"));
    EXPECT_EQ(a->store().store->get("from-b"), bytes("2"));
  }
  // The last rank out removed the directory.
  EXPECT_FALSE(files::exists(dir));
}

TEST(Rendezvous, NodeFileRefusesADirectoryOthersMayWrite) {
  const files::TempDir tmp("parity-test-rendezvous");
  const std::string dir = tmp.path() + "/run";
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(dir.c_str(), 0777), 0);
  try {
    Rendezvous::node_file(dir, 2, kTimeout);
    FAIL() << "a world-writable directory was used";
  } catch (const RendezvousError& e) {
    EXPECT_EQ(std::string(e.what()),
              "cannot use the rendezvous directory " + dir +
                  ": not private to this user (another user's, or group/other may write it)");
  }
  files::write_atomically(tmp.path() + "/file", "x");
  EXPECT_THROW(Rendezvous::node_file(tmp.path() + "/file", 2, kTimeout), RendezvousError);
}

}  // namespace
}  // namespace parity
