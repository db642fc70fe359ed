// ProbeWorkerTls (issue 20): one TLS handshake with a worker, on the calling thread, with the
// scheduler's identity (scheduler.worker_tls), to say why a worker cannot be used before CAF
// is handed the connection.
//
// Why before CAF: CAF 0.17.6 runs the handshake on its network thread, the one thread serving
// every worker connection of the scheduler, and a failed certificate check leaves
// "certificate verify failed" in that thread's OpenSSL error queue, where it fails the next
// read of another, healthy connection (see ClearTransportErrors, pool/remote_builder.h):
// found by pool_discovery_test, where each connect to a worker with an untrusted certificate
// dropped a running build's connection. The probe keeps such a worker away from CAF, and
// names the cause in the operator's terms (which setting, OpenSSL's reason), never a path or
// key material.
//
// Thread-safety: a free function; uses its own SSL_CTX and the calling thread's error queue
// (left empty).
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "pool/remote_builder.h"

namespace kiln {

/// Ok when a TLS handshake with host:port verifies the worker's certificate against
/// `tls.peer_ca_file` and the worker accepts `tls.certificate_file` (the connection is then
/// closed with close_notify). Otherwise Unavailable with the reason, e.g. "its certificate is
/// not signed by the CA in scheduler.worker_tls.worker_ca (unable to get local issuer
/// certificate)", "it refused this scheduler's certificate (tlsv1 alert unknown ca) ...",
/// "nothing accepts connections there (Connection refused)". Waits at most `timeout_ms` for
/// the connect and for each read or write.
Status ProbeWorkerTls(const PoolTlsConfig& tls, const std::string& host, uint16_t port,
                      int timeout_ms = 3000);

}  // namespace kiln
