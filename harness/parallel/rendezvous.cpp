#include "harness/parallel/rendezvous.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "harness/base/check.h"
#include "harness/base/files.h"
#include "harness/compat/torch_compat.h"
#include "harness/parallel/c10_error_text.h"
#include "harness/parallel/errors.h"
#include "harness/parallel/rendezvous_store.h"

namespace parity {

namespace {

bool contains(const std::string& s, const char* what) { return s.find(what) != std::string::npos; }

std::string ms(std::chrono::milliseconds t) { return std::to_string(t.count()) + " ms"; }

std::string errno_text() { return std::strerror(errno); }

int flock_retrying(int fd, int operation) {
  int rc;
  do rc = ::flock(fd, operation);
  while (rc != 0 && errno == EINTR);
  return rc;
}

// The run's directory, private to this user; its lock file, open and held
// shared for as long as this rank uses the store. Whoever can lock it
// exclusively is alone: no live rank of the run has opened the store yet, so a
// store file there is a dead run's and goes.
int enter_node_dir(const std::string& dir) {
  const auto fail = [&](const std::string& what) {
    throw RendezvousError("cannot use the rendezvous directory " + dir + ": " + what);
  };
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) fail(errno_text());
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) fail(errno_text());
  if (!S_ISDIR(st.st_mode)) fail("not a directory");
  if (st.st_uid != ::getuid() || (st.st_mode & 022) != 0)
    fail("not private to this user (another user's, or group/other may write it)");
  const std::string lock = dir + "/lock";
  const int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) fail(lock + ": " + errno_text());
  if (flock_retrying(fd, LOCK_EX | LOCK_NB) == 0) {
    if (::unlink((dir + "/store").c_str()) != 0 && errno != ENOENT) {
      const std::string why = errno_text();
      ::close(fd);
      fail("cannot remove a dead run's store: " + why);
    }
  } else if (errno != EWOULDBLOCK) {
    const std::string why = errno_text();
    ::close(fd);
    fail(lock + ": " + why);
  }
  if (flock_retrying(fd, LOCK_SH) != 0) {
    const std::string why = errno_text();
    ::close(fd);
    fail(lock + ": " + why);
  }
  // FileStore's reads wait for a missing file (until the timeout): make it now.
  const std::string store = dir + "/store";
  const int created = ::open(store.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (created < 0) {
    const std::string why = errno_text();
    ::close(fd);
    fail(store + ": " + why);
  }
  ::close(created);
  return fd;
}

void leave_node_dir(int fd, const std::string& dir) noexcept {
  // Every rank unlocks before it tries: the last to try finds nobody left.
  flock_retrying(fd, LOCK_UN);
  if (flock_retrying(fd, LOCK_EX | LOCK_NB) == 0) files::remove_tree(dir);
  ::close(fd);
}

}  // namespace

Rendezvous::Rendezvous(std::unique_ptr<Store> store) : store_(std::move(store)) {}
Rendezvous::~Rendezvous() {
  if (store_ && store_->release) {
    store_->store.reset();
    store_->release();
  }
}

std::string Rendezvous::describe() const { return store_->description; }
int Rendezvous::port() const { return store_->port; }

void Rendezvous::wait_for_every_rank(const std::string& key, int rank, int world_size,
                                     std::chrono::milliseconds limit,
                                     const std::function<void()>& poll) const {
  auto arrived = [&](int r) { return key + "/" + std::to_string(r); };
  c10d::Store& store = *store_->store;
  try {
    store.set(arrived(rank), std::vector<std::uint8_t>{1});
    std::vector<std::string> keys;
    keys.reserve(static_cast<std::size_t>(world_size));
    for (int r = 0; r < world_size; ++r) keys.push_back(arrived(r));
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!store.check(keys)) {
      if (std::chrono::steady_clock::now() > deadline) {
        std::string missing;
        for (int r = 0; r < world_size; ++r)
          if (!store.check({arrived(r)}))
            missing += (missing.empty() ? "" : ", ") + std::to_string(r);
        throw RendezvousError("rank(s) " + missing + " of " + std::to_string(world_size) +
                              " did not reach the rendezvous (" + describe() + ") within " +
                              ms(limit));
      }
      if (poll) poll();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  } catch (const RendezvousError&) {
    throw;
  } catch (const c10::Error& e) {
    throw RendezvousError("start-up barrier on " + describe() + " failed: " + c10_error_text(e));
  }
}

std::shared_ptr<Rendezvous> Rendezvous::in_process(std::chrono::milliseconds timeout) {
  auto s = std::make_unique<Store>();
  s->store = c10::make_intrusive<c10d::HashStore>();
  s->store->setTimeout(timeout);
  s->description = "in-process HashStore";
  return std::make_shared<Rendezvous>(std::move(s));
}

std::shared_ptr<Rendezvous> Rendezvous::file(const std::string& path, int world_size,
                                             std::chrono::milliseconds timeout) {
  PARITY_CHECK(world_size >= 1, "FileStore: world size must be >= 1");
  auto s = std::make_unique<Store>();
  try {
    s->store = c10::make_intrusive<c10d::FileStore>(path, world_size);
  } catch (const std::exception& e) {
    throw RendezvousError("cannot open FileStore " + path + ": " + c10_error_text(e));
  }
  s->store->setTimeout(timeout);
  s->description = "FileStore " + path;
  return std::make_shared<Rendezvous>(std::move(s));
}

std::shared_ptr<Rendezvous> Rendezvous::node_file(const std::string& dir, int world_size,
                                                  std::chrono::milliseconds timeout) {
  PARITY_CHECK(world_size >= 1, "FileStore: world size must be >= 1");
  const int fd = enter_node_dir(dir);
  std::shared_ptr<Rendezvous> r;
  try {
    r = file(dir + "/store", world_size, timeout);
  } catch (...) {
    leave_node_dir(fd, dir);
    throw;
  }
  r->store_->release = [fd, dir] { leave_node_dir(fd, dir); };
  return r;
}

std::shared_ptr<Rendezvous> Rendezvous::tcp(const std::string& host, int port, int world_size,
                                            bool is_master, std::chrono::milliseconds timeout,
                                            const std::string& key_prefix) {
  if (port < 0 || port > 65535)
    throw RendezvousError("TCPStore port " + std::to_string(port) + " is not a port (0-65535)");
  if (!is_master && port == 0)
    throw RendezvousError("cannot connect to TCPStore on " + host +
                          ":0: a worker needs the master's actual port");
  PARITY_CHECK(world_size >= 1, "TCPStore: world size must be >= 1");
  const std::string where = host + ":" + std::to_string(port);
  auto s = std::make_unique<Store>();
  try {
    s->store = c10::make_intrusive<c10d::TCPStore>(
        host, compat::tcp_store_options<c10d::TCPStoreOptions>(static_cast<std::uint16_t>(port),
                                                               world_size, is_master, timeout));
  } catch (const std::exception& e) {
    const std::string m = c10_error_text(e);
    if (is_master) {
      std::string why = m;
      if (contains(m, "ddress already in use"))
        why = "address in use";
      else if (contains(m, "annot assign requested address"))
        why = "no such local address";
      throw RendezvousError("cannot bind TCPStore on " + where + ": " + why);
    }
    std::string why = m;
    if (contains(m, "timed out") || contains(m, "imeout"))
      why = "nobody answered within " + ms(timeout) + " (" + m + ")";
    throw RendezvousError("cannot connect to TCPStore on " + where + ": " + why);
  }
  auto* tcp = static_cast<c10d::TCPStore*>(s->store.get());
  s->port = tcp->getPort();
  s->description =
      "TCPStore " + host + ":" + std::to_string(s->port) + (is_master ? " (master)" : " (worker)");
  if (!key_prefix.empty()) {
    s->store = c10::make_intrusive<c10d::PrefixStore>(key_prefix, s->store);
    s->description += ", keys under " + key_prefix;
  }
  return std::make_shared<Rendezvous>(std::move(s));
}

}  // namespace parity
