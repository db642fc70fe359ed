// remote_builder_bench DIR [N]: N (default 200) request/answer round trips to a worker's
// published builder over loopback mutual TLS (caf::openssl), in one process with two actor
// systems; prints the mean and the first connect. DIR holds scheduler.{crt,key},
// worker.{crt,key}, scheduler-ca.crt, worker-ca.crt (bench/remote_builder_bench.sh makes them).
// The builder answers at once: this is the transport's share of dispatch, not a build.
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "pool/remote_builder.h"

namespace {

kiln::remote_builder_actor::behavior_type Echo(kiln::remote_builder_actor::pointer) {
  return {[](kiln::remote_build_atom, const std::string& req) { return req; }};
}

double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: remote_builder_bench DIR [N]\n");
    return 2;
  }
  const std::string d = argv[1];
  const int n = argc > 2 ? std::atoi(argv[2]) : 200;
  kiln::PoolSystemConfig wc({d + "/worker.crt", d + "/worker.key", d + "/scheduler-ca.crt"});
  caf::actor_system ws(wc);
  auto builder = ws.spawn(Echo);
  uint16_t port = 0;
  kiln::Status st = kiln::PublishRemoteBuilder(builder, 0, &port);
  if (!st.ok()) {
    std::fprintf(stderr, "%s\n", st.message().c_str());
    return 1;
  }
  int rc = 0;
  {
    kiln::PoolSystemConfig sc({d + "/scheduler.crt", d + "/scheduler.key", d + "/worker-ca.crt"});
    caf::actor_system ss(sc);
    kiln::remote_builder_actor h;
    auto t0 = std::chrono::steady_clock::now();
    st = kiln::ConnectRemoteBuilder(ss, "127.0.0.1", port, &h);
    double connect_ms = MsSince(t0);
    if (!st.ok()) {
      std::fprintf(stderr, "%s\n", st.message().c_str());
      rc = 1;
    } else {
      caf::scoped_actor self{ss};
      const std::string req = "{\"domain\":\"d\",\"candidate\":\"c\",\"commit\":\"0123abcd\"}";
      int failed = 0;
      t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < n; ++i) {
        self->request(h, std::chrono::seconds(10), kiln::remote_build_atom::value, req)
            .receive([](const std::string&) {}, [&](const caf::error&) { ++failed; });
      }
      double total_ms = MsSince(t0);
      std::printf(
          "connect + TLS handshake: %.2f ms\nround trip (mean of %d): %.3f ms\nfailed: %d\n",
          connect_ms, n, total_ms / n, failed);
      rc = failed ? 1 : 0;
    }
  }
  caf::anon_send_exit(builder, caf::exit_reason::user_shutdown);
  return rc;
}
