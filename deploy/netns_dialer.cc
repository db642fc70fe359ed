#include "deploy/netns_dialer.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace kiln {
namespace {

using Clock = std::chrono::steady_clock;

int RemainingMs(Clock::time_point deadline) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return ms < 0 ? 0 : static_cast<int>(ms);
}

}  // namespace

Status NetnsDialer::Open(pid_t pid, std::shared_ptr<NetnsDialer>* out) {
  std::string path = "/proc/" + std::to_string(pid) + "/ns/net";
  int nsfd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (nsfd < 0)
    return Status::NotFound("network namespace of pid " + std::to_string(pid) + ": " +
                            std::strerror(errno));
  std::shared_ptr<NetnsDialer> d(new NetnsDialer());
  int rc = 0, err = 0;
  d->thread_.Run([&] {
    rc = setns(nsfd, CLONE_NEWNET);
    err = errno;
  });
  close(nsfd);
  if (rc != 0)
    return Status::Internal(std::string("setns into the candidate's network: ") +
                            std::strerror(err));
  *out = std::move(d);
  return Status::Ok();
}

NetnsDialer::~NetnsDialer() { Close(); }

void NetnsDialer::Close() { thread_.Stop(); }

Status NetnsDialer::Socket(int* fd) {
  int s = -1, err = 0;
  if (!thread_.Run([&] {
        s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        err = errno;
      }))
    return Status::Unavailable("the candidate's network is closed");
  if (s < 0) return Status::Internal(std::string("socket: ") + std::strerror(err));
  *fd = s;
  return Status::Ok();
}

Status NetnsDialer::Connect(int port, std::chrono::milliseconds timeout, int* fd) {
  int s = -1;
  if (Status st = Socket(&s); !st.ok()) return st;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    if (errno != EINPROGRESS) {
      Status st = Status::Unavailable(std::string("connect: ") + std::strerror(errno));
      close(s);
      return st;
    }
    pollfd p{s, POLLOUT, 0};
    int n = poll(&p, 1, static_cast<int>(timeout.count()));
    int soerr = 0;
    socklen_t len = sizeof(soerr);
    if (n <= 0 || getsockopt(s, SOL_SOCKET, SO_ERROR, &soerr, &len) != 0 || soerr != 0) {
      Status st = Status::Unavailable(n <= 0 ? std::string("connect: timed out")
                                             : std::string("connect: ") + std::strerror(soerr));
      close(s);
      return st;
    }
  }
  *fd = s;
  return Status::Ok();
}

Status HttpGetStatus(int fd, const std::string& path, std::chrono::milliseconds timeout,
                     int* status) {
  auto deadline = Clock::now() + timeout;
  std::string req =
      "GET " + path +
      " HTTP/1.0\r\nHost: 127.0.0.1\r\nUser-Agent: kiln-health\r\nConnection: close\r\n\r\n";
  size_t off = 0;
  while (off < req.size()) {
    ssize_t w = send(fd, req.data() + off, req.size() - off, MSG_NOSIGNAL);
    if (w > 0) {
      off += static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno != EAGAIN && errno != EINTR)
      return Status::Unavailable(std::string("send: ") + std::strerror(errno));
    pollfd p{fd, POLLOUT, 0};
    if (poll(&p, 1, RemainingMs(deadline)) <= 0) return Status::Unavailable("send: timed out");
  }
  std::string resp;
  while (resp.find("\r\n") == std::string::npos && resp.size() < 1024) {
    char buf[512];
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n > 0) {
      resp.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n == 0) break;
    if (errno != EAGAIN && errno != EINTR)
      return Status::Unavailable(std::string("recv: ") + std::strerror(errno));
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, RemainingMs(deadline)) <= 0)
      return Status::Unavailable("no reply within the probe timeout");
  }
  // "HTTP/1.x NNN ..."
  if (resp.size() < 12 || resp.compare(0, 5, "HTTP/") != 0)
    return Status::Unavailable("not an HTTP reply");
  size_t sp = resp.find(' ');
  if (sp == std::string::npos || sp + 4 > resp.size())
    return Status::Unavailable("malformed HTTP status line");
  int code = 0;
  for (size_t i = sp + 1; i < sp + 4; ++i) {
    if (resp[i] < '0' || resp[i] > '9') return Status::Unavailable("malformed HTTP status line");
    code = code * 10 + (resp[i] - '0');
  }
  *status = code;
  return Status::Ok();
}

}  // namespace kiln
