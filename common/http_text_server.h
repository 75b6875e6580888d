// A minimal HTTP/1.1 server for one read-only text page (the Prometheus
// scrape endpoint, GET /metrics). One thread; one connection at a time, each
// bounded in time and size; no keep-alive. Plain POSIX sockets.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace meshrun {

class HttpTextServer {
 public:
  // Listens on numeric `host` ("0.0.0.0", "::", "127.0.0.1", ...) and `port`
  // (0: the OS picks; read it back with port()). Answers `GET <path>` with
  // 200 and render()'s text as `content_type`; any other path 404, any other
  // method 405; a request line not complete within 8 KiB 400. Each
  // connection gets at most `io_timeout` for reading and for writing.
  // ALREADY_EXISTS naming host:port when the bind fails, INVALID_ARGUMENT for
  // a host that is not a numeric address. `render` runs on the server's
  // thread and must be thread-safe against the rest of the program.
  static absl::StatusOr<std::unique_ptr<HttpTextServer>> Start(const std::string& host, int port, std::string path,
                                                               std::string content_type,
                                                               std::function<std::string()> render,
                                                               absl::Duration io_timeout = absl::Seconds(2));
  // Stops listening and joins the thread (a connection in progress finishes
  // within io_timeout).
  ~HttpTextServer();
  HttpTextServer(const HttpTextServer&) = delete;
  HttpTextServer& operator=(const HttpTextServer&) = delete;

  int port() const { return port_; }

 private:
  HttpTextServer() = default;
  void Loop();
  void Serve(int fd);

  int listen_fd_ = -1;
  int stop_fd_ = -1;
  int port_ = 0;
  std::string path_, content_type_;
  std::function<std::string()> render_;
  absl::Duration io_timeout_;
  std::thread thread_;
};

}  // namespace meshrun
