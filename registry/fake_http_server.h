// FakeServer: a minimal HTTP server on 127.0.0.1 for tests of registry clients. It serves one
// connection at a time on its own thread: reads one request, answers with `handler`'s response,
// closes the connection. Test-only (header-only).
// Ownership: owns its thread and socket; the destructor stops and joins. Thread-safety: the
// handler runs on the server's thread; construct and destroy on one thread.
#pragma once

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <functional>
#include <string>
#include <thread>
#include <utility>

namespace kiln::testing {

class FakeServer {
 public:
  using Request = boost::beast::http::request<boost::beast::http::string_body>;
  using Response = boost::beast::http::response<boost::beast::http::string_body>;
  using Handler = std::function<Response(const Request&)>;
  explicit FakeServer(Handler h)
      : handler_(std::move(h)),
        acceptor_(ioc_,
                  boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), 0)) {
    port_ = acceptor_.local_endpoint().port();
    thread_ = std::thread([this] { Loop(); });
  }
  ~FakeServer() {
    stop_ = true;
    boost::system::error_code ec;
    boost::asio::ip::tcp::socket s(ioc_);
    s.connect(acceptor_.local_endpoint(), ec);
    thread_.join();
  }
  FakeServer(const FakeServer&) = delete;
  FakeServer& operator=(const FakeServer&) = delete;
  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  void Loop() {
    namespace http = boost::beast::http;
    while (!stop_) {
      boost::asio::ip::tcp::socket sock(ioc_);
      boost::system::error_code ec;
      acceptor_.accept(sock, ec);
      if (ec || stop_) continue;
      boost::beast::flat_buffer buf;
      Request req;
      http::read(sock, buf, req, ec);
      if (ec) continue;
      auto res = handler_(req);
      res.version(11);
      res.prepare_payload();
      http::write(sock, res, ec);
      sock.shutdown(boost::asio::ip::tcp::socket::shutdown_both, ec);
    }
  }
  Handler handler_;
  boost::asio::io_context ioc_;
  boost::asio::ip::tcp::acceptor acceptor_;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

inline FakeServer::Response Reply(int status, std::string body = "") {
  FakeServer::Response r{static_cast<boost::beast::http::status>(status), 11};
  r.body() = std::move(body);
  return r;
}

}  // namespace kiln::testing
