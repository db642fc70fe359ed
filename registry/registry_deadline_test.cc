// Issue 19: a registry that accepts connections and never answers cannot hold a caller past
// its RegistryDeadlineScope.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "common/sha256.h"
#include "registry/registry_client.h"

namespace kiln {
namespace {

// Listens on 127.0.0.1, accepts every connection and never writes a byte.
class StalledRegistry {
 public:
  StalledRegistry() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(fd_, 64), 0);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] {
      while (!stop_) {
        int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (c < 0) continue;
        std::lock_guard<std::mutex> l(mu_);
        held_.push_back(c);
        ++accepted_;
      }
    });
  }
  ~StalledRegistry() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    int wake = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port_);
    ::connect(wake, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::close(wake);
    thread_.join();
    ::close(fd_);
    for (int c : held_) ::close(c);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int accepted() {
    std::lock_guard<std::mutex> l(mu_);
    return accepted_;
  }

 private:
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mu_;
  std::vector<int> held_;
  int accepted_ = 0;
};

TEST(RegistryDeadline, StalledRegistryFailsUnavailableByTheDeadline) {
  StalledRegistry reg;
  RegistryClientOptions opts;  // defaults: 3 attempts of 30 s each (~90 s without a deadline)
  RegistryClient client({reg.url(), std::nullopt, std::nullopt}, opts);
  auto t0 = std::chrono::steady_clock::now();
  Status st;
  {
    RegistryDeadlineScope scope(t0 + std::chrono::seconds(1),
                                "the build's timeout (build.timeout_s = 1 s)");
    ASSERT_TRUE(RegistryDeadlineLeft().has_value());
    st = client.PutBlob("loop/app", "sha256:" + Sha256Hex("x"), "x");
  }
  auto elapsed = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(st.code(), Status::Code::kUnavailable) << st.ToString();
  EXPECT_NE(st.message().find("did not answer within the build's timeout (build.timeout_s = 1 s)"),
            std::string::npos)
      << st.message();
  EXPECT_GE(reg.accepted(), 1);  // it really reached the stalled server
  // A generous cap, far below the ~90 s the default options would wait.
  EXPECT_LT(elapsed, std::chrono::seconds(20));
  EXPECT_FALSE(RegistryDeadlineLeft().has_value());  // the scope ended
}

TEST(RegistryDeadline, PassedDeadlineFailsBeforeConnecting) {
  StalledRegistry reg;
  RegistryClient client({reg.url(), std::nullopt, std::nullopt});
  RegistryDeadlineScope scope(std::chrono::steady_clock::now() - std::chrono::seconds(1),
                              "the deploy's timeout");
  Status st = client.Ping();
  EXPECT_EQ(st.code(), Status::Code::kUnavailable);
  EXPECT_NE(st.message().find("did not answer within the deploy's timeout"), std::string::npos);
  EXPECT_EQ(reg.accepted(), 0);
}

TEST(RegistryDeadline, ScopesNestAndRestore) {
  auto now = std::chrono::steady_clock::now();
  EXPECT_FALSE(RegistryDeadlineLeft().has_value());
  {
    RegistryDeadlineScope outer(now + std::chrono::hours(1), "outer");
    {
      RegistryDeadlineScope inner(now + std::chrono::seconds(5), "inner");
      EXPECT_LE(RegistryDeadlineLeft()->count(), 5000);
    }
    EXPECT_GT(RegistryDeadlineLeft()->count(), 5000);
  }
  EXPECT_FALSE(RegistryDeadlineLeft().has_value());
}

}  // namespace
}  // namespace kiln
