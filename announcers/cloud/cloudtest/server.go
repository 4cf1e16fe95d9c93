package cloudtest

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
)

// Address is the provider's state for one address, as the contract's
// ensure body describes it.
type Address struct {
	Address  string   `json:"address"`
	Owner    string   `json:"owner"`
	Services []string `json:"services"`
	Nodes    []Node   `json:"nodes"`
}

// Node is a backend node of an Address.
type Node struct {
	Name      string   `json:"name"`
	Addresses []string `json:"addresses"`
	// Weight is the node's share of the address's new connections.
	Weight int `json:"weight"`
}

// Request is a request the server received.
type Request struct {
	Method, Path, Query string
	Authorization       string
	IdempotencyKey      string
	Body                string
	Status              int // the status answered
}

// Fault makes matching requests fail.
type Fault struct {
	// Method matches requests with this method; "" matches all.
	Method string
	// Status is answered; RetryAfter, when set, is sent as Retry-After.
	Status     int
	RetryAfter string
}

// Server is a fake provider. Its methods are safe for concurrent use.
type Server struct {
	*httptest.Server
	token string

	mu        sync.Mutex
	addresses map[string]Address
	requests  []Request
	faults    []Fault
	hang      chan struct{}
	arrived   chan struct{}
}

// New starts a provider that wants the bearer token token ("" accepts
// requests without one).
func New(token string) *Server {
	s := &Server{token: token, addresses: map[string]Address{}, arrived: make(chan struct{}, 1024)}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// FailNext makes the next len(faults) matching requests fail, in turn.
func (s *Server) FailNext(faults ...Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, faults...)
}

// Hang makes requests block until release is called or the client gives
// up. Arrived tells when one is blocked.
func (s *Server) Hang() (release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := make(chan struct{})
	s.hang = ch
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			s.hang = nil
			s.mu.Unlock()
			close(ch)
		})
	}
}

// Arrived receives a value whenever a request arrives.
func (s *Server) Arrived() <-chan struct{} { return s.arrived }

// Addresses returns the addresses the provider serves.
func (s *Server) Addresses() map[string]Address {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]Address, len(s.addresses))
	for k, v := range s.addresses {
		out[k] = v
	}
	return out
}

// Requests returns the requests received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Ensure sets an address's state directly, as another owner's PUT would.
func (s *Server) Ensure(a Address) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.addresses[a.Address] = a
}

// Forget drops an address, as an operator deleting the balancer by hand
// would.
func (s *Server) Forget(addr string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.addresses, addr)
}

const prefix = "/v1/addresses/"

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	select {
	case s.arrived <- struct{}{}:
	default:
	}
	body, _ := io.ReadAll(r.Body)
	rec := Request{
		Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery,
		Authorization:  r.Header.Get("Authorization"),
		IdempotencyKey: r.Header.Get("Idempotency-Key"),
		Body:           string(body),
	}
	s.mu.Lock()
	hang := s.hang
	s.mu.Unlock()
	if hang != nil {
		select {
		case <-hang:
		case <-r.Context().Done():
			return
		}
	}
	status, msg, retryAfter := s.handle(r, body)
	rec.Status = status
	s.mu.Lock()
	s.requests = append(s.requests, rec)
	s.mu.Unlock()
	if retryAfter != "" {
		w.Header().Set("Retry-After", retryAfter)
	}
	if msg != "" {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
		return
	}
	w.WriteHeader(status)
}

// handle answers with an injected fault or by the contract.
func (s *Server) handle(r *http.Request, body []byte) (status int, msg, retryAfter string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, f := range s.faults {
		if f.Method == "" || f.Method == r.Method {
			s.faults = append(s.faults[:i:i], s.faults[i+1:]...)
			return f.Status, "injected fault", f.RetryAfter
		}
	}
	status, msg = s.apply(r, body)
	return status, msg, ""
}

// apply applies the contract; it returns the status and an error
// reason.
func (s *Server) apply(r *http.Request, body []byte) (int, string) {
	if s.token != "" && r.Header.Get("Authorization") != "Bearer "+s.token {
		return http.StatusUnauthorized, "missing or wrong bearer token"
	}
	raw, ok := strings.CutPrefix(r.URL.Path, prefix)
	if !ok {
		return http.StatusNotFound, "no such endpoint"
	}
	addr, err := netip.ParseAddr(raw)
	if err != nil || addr.String() != raw {
		return http.StatusBadRequest, "address not in canonical form"
	}
	switch r.Method {
	case http.MethodPut:
		if r.Header.Get("Content-Type") != "application/json" {
			return http.StatusUnsupportedMediaType, "want application/json"
		}
		var a Address
		dec := json.NewDecoder(strings.NewReader(string(body)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&a); err != nil {
			return http.StatusBadRequest, "bad body: " + err.Error()
		}
		if a.Address != raw || a.Owner == "" || a.Services == nil || a.Nodes == nil {
			return http.StatusUnprocessableEntity, "address, owner, services and nodes are required"
		}
		for _, n := range a.Nodes {
			if n.Weight < 0 {
				return http.StatusUnprocessableEntity, "node " + n.Name + ": negative weight"
			}
		}
		_, existed := s.addresses[raw]
		s.addresses[raw] = a
		if existed {
			return http.StatusOK, ""
		}
		return http.StatusCreated, ""
	case http.MethodDelete:
		owner := r.URL.Query().Get("owner")
		if owner == "" {
			return http.StatusBadRequest, "owner is required"
		}
		a, ok := s.addresses[raw]
		switch {
		case !ok:
			return http.StatusNotFound, "unknown address"
		case a.Owner != owner:
			return http.StatusConflict, "owned by " + a.Owner
		}
		delete(s.addresses, raw)
		return http.StatusNoContent, ""
	}
	return http.StatusMethodNotAllowed, "method not allowed"
}
