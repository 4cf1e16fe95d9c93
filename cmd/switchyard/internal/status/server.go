package status

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// Server is one HTTP server, listening from the moment Listen returns so
// that a busy port fails the daemon's start rather than a goroutine.
type Server struct {
	name string
	srv  *http.Server
	ln   net.Listener
}

// Listen opens addr (host:port) for h; name says which server it is in
// errors.
func Listen(name, addr string, h http.Handler) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s server: %w", name, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	return &Server{name: name, srv: srv, ln: ln}, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Serve serves until Shutdown; it returns nil after a Shutdown.
func (s *Server) Serve() error {
	if err := s.srv.Serve(s.ln); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("%s server: %w", s.name, err)
	}
	return nil
}

// Shutdown stops accepting connections and waits, until ctx is done, for
// the requests in flight.
func (s *Server) Shutdown(ctx context.Context) error {
	if err := s.srv.Shutdown(ctx); err != nil {
		s.srv.Close()
		return fmt.Errorf("%s server shutdown: %w", s.name, err)
	}
	return nil
}
