#include "pool/tls_probe.h"

#include <netdb.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

namespace kiln {

namespace {

// A TCP connection to host:port within timeout_ms, blocking afterwards with that timeout on
// reads and writes; -1 and *why on failure.
int Dial(const std::string& host, uint16_t port, int timeout_ms, std::string* why) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int e = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res); e != 0) {
    *why = std::string("its address does not resolve (") + ::gai_strerror(e) + ")";
    return -1;
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> guard(res, ::freeaddrinfo);
  int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *why = std::string("no socket (") + std::strerror(errno) + ")";
    return -1;
  }
  int rc = ::connect(fd, res->ai_addr, res->ai_addrlen);
  if (rc != 0 && errno == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    rc = ::poll(&p, 1, timeout_ms) == 1 ? 0 : -1;
    int err = rc == 0 ? 0 : ETIMEDOUT;
    socklen_t len = sizeof err;
    if (rc == 0) ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    errno = err;
    rc = err == 0 ? 0 : -1;
  }
  if (rc != 0) {
    *why = std::string("nothing accepts connections there (") + std::strerror(errno) + ")";
    ::close(fd);
    return -1;
  }
  int flags = 0;  // blocking from here on, each read and write bounded by the timeout
  ::ioctl(fd, FIONBIO, &flags);
  timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  return fd;
}

std::string LastSslReason() {
  unsigned long e = ERR_peek_last_error();
  const char* r = e ? ERR_reason_error_string(e) : nullptr;
  return r ? r : "no reason given";
}

std::string RefusedUs(const std::string& reason) {
  return "it refused this scheduler's certificate (" + reason +
         "): its worker.tls.scheduler_ca must be the CA that signed "
         "scheduler.worker_tls.certificate";
}

}  // namespace

Status ProbeWorkerTls(const PoolTlsConfig& tls, const std::string& host, uint16_t port,
                      int timeout_ms) {
  ERR_clear_error();
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ctx(SSL_CTX_new(TLS_client_method()),
                                                        SSL_CTX_free);
  // The identity files were checked when the configuration was read; their names stay out of
  // the message (the setting is named instead).
  if (!ctx || SSL_CTX_use_certificate_chain_file(ctx.get(), tls.certificate_file.c_str()) != 1 ||
      SSL_CTX_use_PrivateKey_file(ctx.get(), tls.key_file.c_str(), SSL_FILETYPE_PEM) != 1 ||
      SSL_CTX_load_verify_locations(ctx.get(), tls.peer_ca_file.c_str(), nullptr) != 1) {
    std::string r = LastSslReason();
    ERR_clear_error();
    return Status::Unavailable("this scheduler's scheduler.worker_tls files cannot be used (" + r +
                               ")");
  }
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
  std::string why;
  int fd = Dial(host, port, timeout_ms, &why);
  if (fd < 0) return Status::Unavailable(why);
  std::unique_ptr<SSL, decltype(&SSL_free)> ssl(SSL_new(ctx.get()), SSL_free);
  Status st;
  char peek = 0;
  if (!ssl || SSL_set_fd(ssl.get(), fd) != 1) {
    st = Status::Unavailable("no TLS session (" + LastSslReason() + ")");
  } else if (SSL_connect(ssl.get()) != 1) {
    long v = SSL_get_verify_result(ssl.get());
    if (v != X509_V_OK) {
      st = Status::Unavailable(
          std::string(
              "its certificate is not signed by the CA in scheduler.worker_tls.worker_ca (") +
          X509_verify_cert_error_string(v) + ")");
    } else if (std::string r = LastSslReason(); r.find("alert") != std::string::npos) {
      st = Status::Unavailable(RefusedUs(r));
    } else if (ERR_peek_last_error() == 0) {
      st = Status::Unavailable("it closed the connection during the TLS handshake");
    } else {
      st = Status::Unavailable("the TLS handshake failed (" + r + ")");
    }
  } else if (SSL_version(ssl.get()) == TLS1_3_VERSION && SSL_peek(ssl.get(), &peek, 1) <= 0 &&
             SSL_get_error(ssl.get(), 0) == SSL_ERROR_SSL) {
    // Under TLS 1.3 the worker checks this scheduler's certificate after the client's side of
    // the handshake ended: its refusal is an alert on the first read. (CAF's protocol starts
    // with the worker's side, so an accepted connection has bytes to peek; a read that times
    // out proves nothing either way and counts as accepted.)
    st = Status::Unavailable(RefusedUs(LastSslReason()));
  } else {
    SSL_shutdown(ssl.get());  // close_notify: the worker sees a clean close, not an error
  }
  ssl.reset();
  ::close(fd);
  ERR_clear_error();
  return st;
}

}  // namespace kiln
