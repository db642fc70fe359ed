// RemoteBuilder transport (issue 20, step 5 — the transport only): the scheduler↔worker actor
// protocol over CAF's network layer with mutual TLS (caf::io + caf::openssl, CAF 0.17.6).
//
// What is here: the typed protocol a worker publishes (`remote_builder_actor`), an actor
// system config that loads the middleman and the OpenSSL manager with a certificate, key and
// the one CA whose certificates it accepts (mutual TLS: a peer without a certificate from that
// CA fails the handshake), and publish / connect helpers. What is not: the worker role that
// runs real builders behind it (`kiln worker`), source fetch, push-lane grants, retry on a
// lost worker (docs/architecture.md, "Worker pool").
//
// Messages carry JSON text (build request in, result out), so nothing new needs a CAF type id.
//
// Ownership / thread-safety: a PoolTlsConfig is a plain value; each actor system made from it
// owns its middleman. PublishRemoteBuilder and ConnectRemoteBuilder block the calling thread
// (TCP + TLS handshake); call them from a thread of your own, never inside an event-based actor.
#pragma once

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/atom.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>
#include <cstdint>
#include <string>

#include "common/status.h"

namespace kiln {

using remote_build_atom = caf::atom_constant<caf::atom("k_rbuild")>;

/// A worker's builder as the scheduler sees it: a build request (JSON text) in, the build's
/// result (JSON text) out.
using remote_builder_actor =
    caf::typed_actor<caf::replies_to<remote_build_atom, std::string>::with<std::string>>;

/// Files of one side's TLS identity: its certificate and key, and the CA whose certificates it
/// accepts from the other side.
struct PoolTlsConfig {
  std::string certificate_file;
  std::string key_file;
  std::string peer_ca_file;
};

/// An actor_system_config with caf::io and caf::openssl loaded and `tls` set (mutual TLS).
class PoolSystemConfig : public caf::actor_system_config {
 public:
  explicit PoolSystemConfig(const PoolTlsConfig& tls);
};

/// Publishes `builder` on `host`:`port` (0: any free port) over TLS; *bound gets the port.
/// Unavailable with CAF's reason when it cannot listen. The builder must be ended (exit
/// message) before its actor system is destroyed, or the destructor waits for it forever.
Status PublishRemoteBuilder(const remote_builder_actor& builder, uint16_t port, uint16_t* bound,
                            const std::string& host = "127.0.0.1");

/// Connects to a worker's builder at host:port over TLS. Unavailable "worker host:port refused
/// the connection or its certificate: ..." when the TCP connect, the TLS handshake (a
/// certificate of the wrong CA on either side) or the handshake of CAF's protocol fails.
Status ConnectRemoteBuilder(caf::actor_system& sys, const std::string& host, uint16_t port,
                            remote_builder_actor* out);

/// Empties the OpenSSL error queue of `sys`'s network thread (asynchronously: queued behind the
/// I/O already scheduled there). Why: CAF 0.17.6's OpenSSL session does not clear that queue
/// after a failed TLS read (a peer killed without close_notify leaves "unexpected eof while
/// reading" there; CAF only drains it when its logging is compiled in, which Debian's is not),
/// and OpenSSL's SSL_get_error reports any error left in the thread's queue as the error of
/// the next call. All connections of an actor system share one network thread, so the next
/// read that merely would block — on any other, healthy connection — is taken for a fatal
/// error and that connection is closed: its remote actor goes down although it is alive.
/// Call this when a connection was seen to die (a down message), before sending on others.
void ClearTransportErrors(caf::actor_system& sys);

}  // namespace kiln
