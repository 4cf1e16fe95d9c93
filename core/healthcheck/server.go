package healthcheck

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/switchyard-lb/switchyard/core/model"
)

// MaxWeight caps the X-Load-Balancing-Endpoint-Weight header: Google
// Cloud's weighted load balancing reads integers from 0 to 1000, and while
// one backend reports a weight it cannot read it weighs every backend
// equally.
const MaxWeight = 1000

// Port is what one Service's health check serves.
type Port struct {
	Port           uint16
	LocalEndpoints int
}

// Option configures a Server.
type Option func(*Server)

// WithListen replaces net.Listen("tcp", addr) for opening ports.
func WithListen(listen func(network, addr string) (net.Listener, error)) Option {
	return func(s *Server) { s.listen = listen }
}

// WithProxyHealthy makes the servers report the proxy's health as
// serviceProxyHealthy (and answer 503 while it is false); the default is
// always healthy.
func WithProxyHealthy(healthy func() bool) Option {
	return func(s *Server) { s.healthy = healthy }
}

// Server runs the health check servers. It is goroutine-safe.
type Server struct {
	addrs   []netip.Addr
	log     *slog.Logger
	listen  func(network, addr string) (net.Listener, error)
	healthy func() bool

	mu       sync.Mutex
	closed   bool
	services map[model.ServiceKey]*instance
	wg       sync.WaitGroup
}

// instance is one Service's health check: one HTTP server per address.
type instance struct {
	key       model.ServiceKey
	port      uint16
	endpoints int // guarded by Server.mu
	servers   []*http.Server
}

// NewServer returns a Server that listens on each of addrs, or on every
// address (as kube-proxy does without --nodeport-addresses) when addrs is
// empty. A nil log discards.
func NewServer(addrs []netip.Addr, log *slog.Logger, opts ...Option) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		addrs:    slices.Clone(addrs),
		log:      log,
		listen:   net.Listen,
		healthy:  func() bool { return true },
		services: make(map[model.ServiceKey]*instance),
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Sync makes the open health checks those of want: it closes the servers
// of Services that left or changed port, opens the new ones and updates
// every local endpoint count. A port that fails to open is reported in the
// error and tried again by the next Sync; the others are served.
func (s *Server) Sync(want map[model.ServiceKey]Port) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("healthcheck: sync after close")
	}
	for k, inst := range s.services {
		if p, ok := want[k]; !ok || p.Port != inst.port {
			inst.close()
			delete(s.services, k)
			s.log.Debug("closed health check", "service", k.String(), "port", inst.port)
		}
	}
	var errs []error
	// Open in a stable order so that of two Services asking for the same
	// port the same one wins every time.
	for _, k := range slices.SortedFunc(maps.Keys(want), model.ServiceKey.Compare) {
		p := want[k]
		if inst := s.services[k]; inst != nil {
			inst.endpoints = p.LocalEndpoints
			continue
		}
		if p.Port == 0 {
			continue
		}
		inst := &instance{key: k, port: p.Port, endpoints: p.LocalEndpoints}
		if err := s.open(inst); err != nil {
			errs = append(errs, fmt.Errorf("healthcheck: service %s port %d: %w", k, p.Port, err))
			continue
		}
		s.services[k] = inst
		s.log.Debug("opened health check", "service", k.String(), "port", p.Port)
	}
	return errors.Join(errs...)
}

// open starts inst's servers; on error it closes those it started.
func (s *Server) open(inst *instance) error {
	addrs := s.addrs
	if len(addrs) == 0 {
		addrs = []netip.Addr{{}} // every address
	}
	for _, a := range addrs {
		host := ""
		if a.IsValid() {
			host = a.String()
		}
		l, err := s.listen("tcp", net.JoinHostPort(host, strconv.Itoa(int(inst.port))))
		if err != nil {
			inst.close()
			return err
		}
		srv := &http.Server{
			Handler:           handler{s: s, key: inst.key},
			ReadHeaderTimeout: 10 * time.Second,
			ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		}
		inst.servers = append(inst.servers, srv)
		s.wg.Go(func() {
			if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.log.Error("health check server stopped", "service", inst.key.String(), "addr", l.Addr().String(), "err", err)
			}
		})
	}
	return nil
}

func (inst *instance) close() {
	for _, srv := range inst.servers {
		_ = srv.Close() // Close returns the listener's close error only
	}
	inst.servers = nil
}

// SetEndpoints sets the local endpoints Service k's open health check
// reports, leaving the others as they are: Sync's form for a change of
// counts alone, whose cost does not grow with the Services. It reports
// false when k has no open health check (then Sync).
func (s *Server) SetEndpoints(k model.ServiceKey, n int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	inst := s.services[k]
	if inst == nil {
		return false
	}
	inst.endpoints = n
	return true
}

// Ports returns the open health checks by Service.
func (s *Server) Ports() map[model.ServiceKey]Port {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[model.ServiceKey]Port, len(s.services))
	for k, inst := range s.services {
		out[k] = Port{Port: inst.port, LocalEndpoints: inst.endpoints}
	}
	return out
}

// Close closes every server and waits for them to stop. Sync fails after
// Close.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	for k, inst := range s.services {
		inst.close()
		delete(s.services, k)
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

// response is kube-proxy's health check body; field order matters for
// byte-compatibility.
type response struct {
	Service struct {
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	} `json:"service"`
	LocalEndpoints      int  `json:"localEndpoints"`
	ServiceProxyHealthy bool `json:"serviceProxyHealthy"`
}

type handler struct {
	s   *Server
	key model.ServiceKey
}

// ServeHTTP answers any path and method, as kube-proxy does.
func (h handler) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	h.s.mu.Lock()
	inst := h.s.services[h.key]
	count := 0
	if inst != nil {
		count = inst.endpoints
	}
	h.s.mu.Unlock()
	if inst == nil {
		// Closed while this request was in flight.
		http.Error(w, "health check closed", http.StatusServiceUnavailable)
		return
	}
	var r response
	r.Service.Namespace, r.Service.Name = h.key.Namespace, h.key.Name
	r.LocalEndpoints = count
	r.ServiceProxyHealthy = h.s.healthy()
	body, err := json.MarshalIndent(r, "", "\t")
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	// As kube-proxy (v1.28+): load balancers that weigh nodes read the
	// count here, within the range they accept.
	w.Header().Set("X-Load-Balancing-Endpoint-Weight", strconv.Itoa(min(count, MaxWeight)))
	w.WriteHeader(statusFor(count, r.ServiceProxyHealthy))
	_, _ = w.Write(body)
}

func statusFor(localEndpoints int, healthy bool) int {
	if localEndpoints > 0 && healthy {
		return http.StatusOK
	}
	return http.StatusServiceUnavailable
}
