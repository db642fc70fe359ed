#include "deploy/tcp_forwarder.h"

#include <unistd.h>

#include <array>
#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <set>
#include <vector>

#include "deploy/netns_dialer.h"

namespace kiln {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

struct TcpForwarder::Impl {
  asio::io_context io;
  tcp::acceptor acceptor{io};
  std::thread thread;
  mutable std::mutex mu;
  std::shared_ptr<NetnsDialer> target;  // guarded by mu
  bool listening = false;               // guarded by mu
  bool stopped = false;                 // guarded by mu
  std::atomic<int> open{0};
  std::set<class Session*> sessions;  // only touched on the I/O thread
  int port = 0;

  void Accept();
};

// One relayed connection; lives as long as one of its handlers is pending.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket client, TcpForwarder::Impl* owner)
      : client_(std::move(client)), upstream_(client_.get_executor()), owner_(owner) {
    ++owner_->open;
    owner_->sessions.insert(this);
  }
  ~Session() {
    if (dialer_) dialer_->AddConnections(-1);
    owner_->sessions.erase(this);
    --owner_->open;
  }

  void Start(const std::shared_ptr<NetnsDialer>& dialer, int port) {
    int fd = -1;
    boost::system::error_code ec;
    dialer_ = dialer;                                  // already counted by the acceptor
    if (!dialer || !dialer->Socket(&fd).ok()) return;  // dropping `this` closes the client
    upstream_.assign(tcp::v4(), fd, ec);
    if (ec) {
      ::close(fd);
      return;
    }
    auto self = shared_from_this();
    upstream_.async_connect(
        tcp::endpoint(asio::ip::address_v4::loopback(), static_cast<unsigned short>(port)),
        [self](const boost::system::error_code& connect_ec) {
          if (connect_ec) return self->CloseBoth();
          self->Pump(self->client_, self->upstream_, self->up_buf_);
          self->Pump(self->upstream_, self->client_, self->down_buf_);
        });
  }

 private:
  using Buffer = std::array<char, 16384>;

  void Pump(tcp::socket& from, tcp::socket& to, Buffer& buf) {
    auto self = shared_from_this();
    from.async_read_some(
        asio::buffer(buf), [self, &from, &to, &buf](const boost::system::error_code& ec, size_t n) {
          if (ec == asio::error::eof) {
            boost::system::error_code ignored;
            to.shutdown(tcp::socket::shutdown_send, ignored);
            return;
          }
          if (ec) return self->CloseBoth();
          asio::async_write(
              to, asio::buffer(buf.data(), n),
              [self, &from, &to, &buf](const boost::system::error_code& write_ec, size_t) {
                if (write_ec) return self->CloseBoth();
                self->Pump(from, to, buf);
              });
        });
  }

 public:
  void CloseBoth() {
    boost::system::error_code ignored;
    client_.close(ignored);
    upstream_.close(ignored);
  }

  tcp::socket client_;
  tcp::socket upstream_;
  Buffer up_buf_{};
  Buffer down_buf_{};
  TcpForwarder::Impl* owner_;
  std::shared_ptr<NetnsDialer> dialer_;  // the namespace this session relays into
};

void TcpForwarder::Impl::Accept() {
  Impl* self = this;  // outlives every handler: the I/O thread is joined before it goes away
  acceptor.async_accept([self](const boost::system::error_code& ec, tcp::socket sock) {
    if (ec == asio::error::operation_aborted || !self->acceptor.is_open()) return;
    if (!ec) {
      std::shared_ptr<NetnsDialer> current;
      {
        // Counted under the lock: once SetTarget() returns, every connection still headed for
        // the old target is visible in its count.
        std::lock_guard<std::mutex> lock(self->mu);
        current = self->target;
        if (current) current->AddConnections(1);
      }
      auto s = std::make_shared<Session>(std::move(sock), self);
      s->Start(current, self->port);
    }
    self->Accept();
  });
}

TcpForwarder::TcpForwarder(int port) : port_(port), impl_(std::make_shared<Impl>()) {
  impl_->port = port;
}

TcpForwarder::~TcpForwarder() { Stop(); }

Status TcpForwarder::Listen() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (impl_->stopped) return Status::FailedPrecondition("the forwarder is stopped");
  if (impl_->listening) return Status::Ok();
  boost::system::error_code ec;
  tcp::endpoint ep(asio::ip::address_v4::loopback(), static_cast<unsigned short>(port_));
  tcp::acceptor& a = impl_->acceptor;
  a.open(ep.protocol(), ec);
  if (!ec) a.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) a.bind(ep, ec);
  if (!ec) a.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    boost::system::error_code ignored;
    a.close(ignored);
    return Status::Unavailable("local deploy target cannot listen on 127.0.0.1:" +
                               std::to_string(port_) + ": " + ec.message());
  }
  impl_->listening = true;
  impl_->Accept();
  auto impl = impl_;
  impl_->thread = std::thread([impl] { impl->io.run(); });
  return Status::Ok();
}

void TcpForwarder::SetTarget(std::shared_ptr<NetnsDialer> target) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->target = std::move(target);
}

int TcpForwarder::open_connections() const { return impl_->open.load(); }

void TcpForwarder::Stop() {
  std::thread t;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->stopped) return;
    impl_->stopped = true;
    impl_->target.reset();
    t = std::move(impl_->thread);
  }
  Impl* impl = impl_.get();
  if (!t.joinable()) return;
  // Close the listener and every relayed connection on the I/O thread; their handlers then
  // finish with errors, the sessions go away and run() returns once nothing is pending.
  asio::post(impl->io, [impl] {
    boost::system::error_code ignored;
    impl->acceptor.close(ignored);
    std::vector<Session*> all(impl->sessions.begin(), impl->sessions.end());
    for (Session* s : all) s->CloseBoth();
  });
  t.join();
}

}  // namespace kiln
