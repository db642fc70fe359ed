#include "pool/remote_builder.h"

#include <openssl/err.h>
#include <spdlog/spdlog.h>

#include <caf/io/middleman.hpp>
#include <caf/io/network/multiplexer.hpp>
#include <caf/openssl/manager.hpp>
#include <caf/openssl/publish.hpp>
#include <caf/openssl/remote_actor.hpp>

namespace kiln {

PoolSystemConfig::PoolSystemConfig(const PoolTlsConfig& tls) {
  load<caf::io::middleman>();
  load<caf::openssl::manager>();
  openssl_certificate = tls.certificate_file;
  openssl_key = tls.key_file;
  openssl_cafile = tls.peer_ca_file;
}

Status PublishRemoteBuilder(const remote_builder_actor& builder, uint16_t port, uint16_t* bound,
                            const std::string& host) {
  auto res = caf::openssl::publish(builder, port, host.c_str(), true);
  if (!res) {
    return Status::Unavailable("cannot publish the worker's builder on port " +
                               std::to_string(port) + ": " +
                               builder.home_system().render(res.error()));
  }
  *bound = *res;
  return Status::Ok();
}

Status ConnectRemoteBuilder(caf::actor_system& sys, const std::string& host, uint16_t port,
                            remote_builder_actor* out) {
  auto res = caf::openssl::remote_actor<remote_builder_actor>(sys, host, port);
  if (!res) {
    return Status::Unavailable(
        "worker " + host + ":" + std::to_string(port) +
        " refused the connection or its certificate: " + sys.render(res.error()));
  }
  *out = std::move(*res);
  return Status::Ok();
}

void ClearTransportErrors(caf::actor_system& sys) {
  sys.middleman().backend().post([] {
    // Said in the log: what the dead connection left behind (the evidence for the cause).
    if (unsigned long e = ERR_peek_error(); e != 0) {
      char buf[256];
      ERR_error_string_n(e, buf, sizeof buf);
      spdlog::info("pool: cleared a TLS error left in the network thread's queue: {}", buf);
    }
    ERR_clear_error();
  });
}

}  // namespace kiln
