#include "net/http_client.h"

#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <cctype>
#include <random>
#include <thread>

namespace kiln {

namespace asio = boost::asio;
namespace ssl = boost::asio::ssl;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = boost::asio::ip::tcp;

namespace {

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string LowerMessage(const boost::system::error_code& ec) {
  std::string m = ec.message();
  if (!m.empty()) m[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(m[0])));
  return m;
}

bool IsIpLiteral(const std::string& host) {
  boost::system::error_code ec;
  asio::ip::make_address(host, ec);
  return !ec;
}

// Runs one async operation on `ioc` to completion; returns its error code.
template <class Start>
beast::error_code RunOp(asio::io_context& ioc, Start&& start) {
  beast::error_code result = asio::error::operation_aborted;
  start([&result](beast::error_code ec, auto&&...) { result = ec; });
  ioc.restart();
  ioc.run();
  return result;
}

template <class Stream>
HttpResult WriteRead(asio::io_context& ioc, Stream& stream, beast::tcp_stream& lowest,
                     http::request<http::string_body>& req, size_t limit,
                     std::chrono::milliseconds timeout, HttpClientResponse* out) {
  lowest.expires_after(timeout);
  beast::error_code ec = RunOp(ioc, [&](auto h) { http::async_write(stream, req, h); });
  if (ec) return {HttpFailure::kIo, LowerMessage(ec)};
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(limit);
  if (req.method() == http::verb::head) parser.skip(true);
  lowest.expires_after(timeout);
  ec = RunOp(ioc, [&](auto h) { http::async_read(stream, buffer, parser, h); });
  if (ec == http::error::body_limit) return {HttpFailure::kBodyLimit, "response body too large"};
  if (ec) return {HttpFailure::kIo, LowerMessage(ec)};
  auto& res = parser.get();
  out->status = static_cast<int>(res.result_int());
  for (const auto& f : res) {
    out->headers[Lower(std::string(f.name_string()))] = std::string(f.value());
  }
  out->body = std::move(res.body());
  return {};
}

// The OpenSSL reason of the last queued error, or the error code's message.
std::string SslReason(const boost::system::error_code& ec) { return LowerMessage(ec); }

}  // namespace

bool ParseHttpUrl(const std::string& url, HttpOrigin* o, std::string* rest) {
  std::string u = url;
  if (u.rfind("https://", 0) == 0) {
    o->tls = true;
    u = u.substr(8);
  } else if (u.rfind("http://", 0) == 0) {
    o->tls = false;
    u = u.substr(7);
  } else {
    return false;
  }
  o->host.clear();
  o->port.clear();
  size_t slash = u.find_first_of("/?");
  std::string authority = u.substr(0, slash);
  *rest = slash == std::string::npos ? "" : u.substr(slash);
  if (authority.empty() || authority.find('@') != std::string::npos) return false;
  size_t colon = authority.rfind(':');
  if (authority[0] == '[') {  // IPv6 literal
    size_t close = authority.find(']');
    if (close == std::string::npos) return false;
    o->host = authority.substr(1, close - 1);
    if (close + 1 < authority.size()) {
      if (authority[close + 1] != ':') return false;
      o->port = authority.substr(close + 2);
    }
  } else if (colon != std::string::npos) {
    o->host = authority.substr(0, colon);
    o->port = authority.substr(colon + 1);
  } else {
    o->host = authority;
  }
  if (o->port.empty()) o->port = o->tls ? "443" : "80";
  if (o->host.empty() || o->port.size() > 5 ||
      !std::all_of(o->port.begin(), o->port.end(), ::isdigit))
    return false;
  return true;
}

Status HttpFailureStatus(const HttpResult& x, const std::string& where, const std::string& path,
                         size_t body_limit, bool* retryable) {
  *retryable = false;
  switch (x.failure) {
    case HttpFailure::kConnect:
      *retryable = true;
      return Status::Unavailable(where + " unreachable: " + x.detail);
    case HttpFailure::kIo:
      *retryable = true;
      return Status::Unavailable(where + " connection failed: " + x.detail);
    case HttpFailure::kTls:  // certificate problems do not heal on retry
      return Status::FailedPrecondition(where + " TLS handshake failed: " + x.detail);
    case HttpFailure::kBodyLimit:
      return Status::ResourceExhausted(where + ": response to " + path + " exceeds " +
                                       std::to_string(body_limit) + " bytes");
    case HttpFailure::kNone:
      break;
  }
  return Status::Ok();
}

void SleepBeforeRetry(std::chrono::milliseconds base, int attempt) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  auto delay = base * (1 << std::min(std::max(attempt, 1) - 1, 10));
  std::uniform_int_distribution<long> jitter(0, delay.count() / 2 + 1);
  std::this_thread::sleep_for(delay + std::chrono::milliseconds(jitter(rng)));
}

std::string UrlEncode(const std::string& s) {
  static const char* hex = "0123456789ABCDEF";
  std::string r;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      r.push_back(static_cast<char>(c));
    } else {
      r.push_back('%');
      r.push_back(hex[c >> 4]);
      r.push_back(hex[c & 15]);
    }
  }
  return r;
}

TlsContext::~TlsContext() { delete static_cast<ssl::context*>(ctx_); }

Status TlsContext::Create(const TlsOptions& o, std::shared_ptr<const TlsContext>* out) {
  std::shared_ptr<TlsContext> t(new TlsContext());
  auto* ctx = new ssl::context(ssl::context::tls_client);
  t->ctx_ = ctx;
  boost::system::error_code ec;
  if (o.ca_file && o.ca_pem)
    return Status::FailedPrecondition("give either a CA file or CA data, not both");
  if (o.ca_file) {
    ctx->load_verify_file(*o.ca_file, ec);
    if (ec)
      return Status::FailedPrecondition("cannot load CA file " + *o.ca_file + ": " +
                                        LowerMessage(ec));
  } else if (o.ca_pem) {
    ctx->add_certificate_authority(asio::buffer(*o.ca_pem), ec);
    if (ec) return Status::FailedPrecondition("cannot load CA data: " + SslReason(ec));
  } else {
    ctx->set_default_verify_paths(ec);
  }
  bool has_cert = o.client_cert_file || o.client_cert_pem;
  bool has_key = o.client_key_file || o.client_key_pem;
  if (has_cert != has_key)
    return Status::FailedPrecondition("client certificate and key must be given together");
  if (o.client_cert_file) {
    ctx->use_certificate_chain_file(*o.client_cert_file, ec);
    if (ec)
      return Status::FailedPrecondition("cannot load client certificate " + *o.client_cert_file +
                                        ": " + SslReason(ec));
  } else if (o.client_cert_pem) {
    ctx->use_certificate_chain(asio::buffer(*o.client_cert_pem), ec);
    if (ec)
      return Status::FailedPrecondition("cannot load client certificate data: " + SslReason(ec));
  }
  if (o.client_key_file) {
    ctx->use_private_key_file(*o.client_key_file, ssl::context::pem, ec);
    if (ec)
      return Status::FailedPrecondition("cannot load client key " + *o.client_key_file + ": " +
                                        SslReason(ec));
  } else if (o.client_key_pem) {
    ctx->use_private_key(asio::buffer(*o.client_key_pem), ssl::context::pem, ec);
    if (ec) return Status::FailedPrecondition("cannot load client key data: " + SslReason(ec));
  }
  if (has_cert && SSL_CTX_check_private_key(ctx->native_handle()) != 1)
    return Status::FailedPrecondition("client key does not match the client certificate");
  ctx->set_verify_mode(ssl::verify_peer);
  *out = std::move(t);
  return Status::Ok();
}

HttpResult HttpRoundTrip(const HttpOrigin& o, const TlsContext* tls, const HttpClientRequest& r,
                         std::chrono::milliseconds timeout, HttpClientResponse* out) {
  *out = HttpClientResponse();
  http::verb method = http::string_to_verb(r.method);
  if (method == http::verb::unknown) return {HttpFailure::kIo, "unknown method"};
  http::request<http::string_body> req{method, r.target, 11};
  req.set(http::field::host, o.HostPort());
  req.set(http::field::user_agent, "kiln");
  for (const auto& [k, v] : r.headers) req.set(k, v);
  if (!r.body.empty() || method == http::verb::put || method == http::verb::post ||
      method == http::verb::patch) {
    req.body() = r.body;
    req.prepare_payload();
  }

  asio::io_context ioc;
  tcp::resolver resolver(ioc);
  beast::error_code ec;
  auto endpoints = resolver.resolve(o.host, o.port, ec);
  if (ec) return {HttpFailure::kConnect, LowerMessage(ec)};
  if (!o.tls) {
    beast::tcp_stream stream(ioc);
    stream.expires_after(timeout);
    ec = RunOp(ioc, [&](auto h) { stream.async_connect(endpoints, h); });
    if (ec) return {HttpFailure::kConnect, LowerMessage(ec)};
    HttpResult x = WriteRead(ioc, stream, stream, req, r.body_limit, timeout, out);
    stream.socket().shutdown(tcp::socket::shutdown_both, ec);
    return x;
  }
  if (!tls || !tls->native()) return {HttpFailure::kTls, "TLS is not configured"};
  beast::ssl_stream<beast::tcp_stream> stream(ioc, *static_cast<ssl::context*>(tls->native()));
  SSL* ssl_handle = stream.native_handle();
  if (IsIpLiteral(o.host)) {
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl_handle), o.host.c_str());
  } else {
    SSL_set_tlsext_host_name(ssl_handle, o.host.c_str());
    SSL_set1_host(ssl_handle, o.host.c_str());
  }
  stream.set_verify_mode(ssl::verify_peer);
  auto& lowest = beast::get_lowest_layer(stream);
  lowest.expires_after(timeout);
  ec = RunOp(ioc, [&](auto h) { lowest.async_connect(endpoints, h); });
  if (ec) return {HttpFailure::kConnect, LowerMessage(ec)};
  lowest.expires_after(timeout);
  ec = RunOp(ioc, [&](auto h) { stream.async_handshake(ssl::stream_base::client, h); });
  // The peer reset, closed or stalled the connection before TLS gave a verdict (a server that
  // is restarting or dying): a network failure, retried like a failed connect. Only errors of
  // TLS itself (certificate verification, protocol) are kTls.
  if (ec && ec.category() != asio::error::get_ssl_category())
    return {HttpFailure::kIo, LowerMessage(ec)};
  if (ec) {
    std::string detail = LowerMessage(ec);
    long v = SSL_get_verify_result(ssl_handle);
    if (v != X509_V_OK) detail += " (" + std::string(X509_verify_cert_error_string(v)) + ")";
    return {HttpFailure::kTls, detail};
  }
  HttpResult x = WriteRead(ioc, stream, lowest, req, r.body_limit, timeout, out);
  lowest.socket().shutdown(tcp::socket::shutdown_both, ec);
  return x;
}

}  // namespace kiln
