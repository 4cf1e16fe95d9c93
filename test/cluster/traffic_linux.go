package cluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/switchyard-lb/switchyard/test/netns"
)

// Answer is what a pod answered: its name and the client address it saw.
type Answer struct {
	Pod    string
	Client netip.AddrPort
}

// parseAnswer reads "<pod> <addr:port>".
func parseAnswer(s string) (Answer, error) {
	name, addr, ok := strings.Cut(strings.TrimSpace(s), " ")
	if !ok {
		return Answer{}, fmt.Errorf("malformed answer %q", s)
	}
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return Answer{}, fmt.Errorf("malformed answer %q: %w", s, err)
	}
	return Answer{Pod: name, Client: netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())}, nil
}

// RequestTimeout bounds one Get and each exchange of a flow.
const RequestTimeout = 5 * time.Second

// Get makes one HTTP request from namespace from to target on a fresh
// connection from a unique source port, and returns the answer.
func Get(ctx context.Context, from *Namespace, target netip.AddrPort) (Answer, error) {
	var body string
	err := from.Do(func() error {
		port, err := netns.NextSourcePort()
		if err != nil {
			return err
		}
		body, err = netns.HTTPGet(ctx, port, target, "/", RequestTimeout)
		return err
	})
	if err != nil {
		return Answer{}, fmt.Errorf("GET http://%s from %s: %w", target, from.Name, err)
	}
	return parseAnswer(body)
}

// Download fetches n bytes of filler from a pod's HTTP server at target
// (path /?bytes=n) from namespace from, on a fresh connection from a
// unique source port, within timeout; it returns the pod's answer and
// how many bytes of filler arrived.
func Download(ctx context.Context, from *Namespace, target netip.AddrPort, n int64, timeout time.Duration) (Answer, int64, error) {
	var body string
	err := from.Do(func() error {
		port, err := netns.NextSourcePort()
		if err != nil {
			return err
		}
		body, err = netns.HTTPGet(ctx, port, target, fmt.Sprintf("/?bytes=%d", n), timeout)
		return err
	})
	if err != nil {
		return Answer{}, 0, fmt.Errorf("download %d bytes from %s from %s: %w", n, target, from.Name, err)
	}
	line, filler, _ := strings.Cut(body, "\n")
	a, err := parseAnswer(line)
	return a, int64(len(filler)), err
}

// BreakKind says how a flow broke.
type BreakKind string

// The ways a flow breaks.
const (
	BreakReset    BreakKind = "reset"    // a TCP RST (or refused)
	BreakTimeout  BreakKind = "timeout"  // no answer within the timeout
	BreakBackend  BreakKind = "backend"  // answered by another pod than at first
	BreakClosed   BreakKind = "closed"   // the connection ended (EOF)
	BreakError    BreakKind = "error"    // anything else (see Detail)
	BreakNeverSet BreakKind = "no-setup" // the flow never got its first answer
)

// Break is the first failure of a flow.
type Break struct {
	At     time.Time
	Kind   BreakKind
	Detail string
}

// Flow is one long-lived flow's record.
type Flow struct {
	Local       netip.AddrPort // the client's address and source port
	Backend     string         // the pod that answered first
	Client      netip.AddrPort // the client address that pod saw
	Established time.Time      // first answer
	Answers     int            // answered exchanges
	Break       *Break         // nil while it survives
}

// TrafficSpec describes the flows of StartTraffic.
type TrafficSpec struct {
	Network  string         // "tcp" (the pods' line protocol) or "udp"
	Target   netip.AddrPort // a service address and port
	Flows    int            // how many; default 10
	Interval time.Duration  // between exchanges of a flow; default 200ms
	// Timeout bounds each exchange; default RequestTimeout. A UDP
	// exchange resends its datagram (same flow) every Timeout/3.
	Timeout time.Duration
}

// Traffic is a set of running flows from one namespace.
type Traffic struct {
	spec   TrafficSpec
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	flows  []*Flow
}

// StartTraffic opens spec.Flows flows from namespace from, each from its
// own source port, and waits until each has its first answer (or broke
// trying). They then exchange a message every Interval until Stop, each
// flow ending at its first break.
func StartTraffic(ctx context.Context, from *Namespace, spec TrafficSpec) (*Traffic, error) {
	if spec.Flows == 0 {
		spec.Flows = 10
	}
	if spec.Interval == 0 {
		spec.Interval = 200 * time.Millisecond
	}
	if spec.Timeout == 0 {
		spec.Timeout = RequestTimeout
	}
	if spec.Network != "tcp" && spec.Network != "udp" {
		return nil, fmt.Errorf("cluster: traffic network %q: want tcp or udp", spec.Network)
	}
	ctx, cancel := context.WithCancel(ctx)
	t := &Traffic{spec: spec, cancel: cancel}
	var setup sync.WaitGroup
	for range spec.Flows {
		port, err := netns.NextSourcePort()
		if err != nil {
			cancel()
			t.wg.Wait()
			return nil, err
		}
		f := &Flow{Local: netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(port))}
		t.flows = append(t.flows, f)
		var ex exchanger
		if err := from.Do(func() error {
			var err error
			ex, err = dialFlow(ctx, spec, port)
			return err
		}); err != nil {
			t.record(f, breakOf(err))
			continue
		}
		setup.Add(1)
		t.wg.Go(func() {
			defer ex.Close()
			t.run(ctx, f, ex, &setup)
		})
	}
	setup.Wait()
	return t, nil
}

// Stop ends the flows and returns their records.
func (t *Traffic) Stop() Report {
	t.cancel()
	t.wg.Wait()
	return t.Report()
}

// Report returns the flows' records so far.
func (t *Traffic) Report() Report {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := Report{}
	for _, f := range t.flows {
		c := *f
		if f.Break != nil {
			b := *f.Break
			c.Break = &b
		}
		r.Flows = append(r.Flows, c)
	}
	return r
}

func (t *Traffic) record(f *Flow, b *Break) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if f.Break == nil {
		f.Break = b
	}
}

func (t *Traffic) run(ctx context.Context, f *Flow, ex exchanger, setup *sync.WaitGroup) {
	settled := false
	settle := func() {
		if !settled {
			settled = true
			setup.Done()
		}
	}
	defer settle()
	for i := 0; ; i++ {
		s, err := ex.Exchange(t.spec.Timeout)
		if ctx.Err() != nil {
			return // stopped: what failed then is no break
		}
		if err != nil {
			b := breakOf(err)
			if i == 0 {
				b.Kind, b.Detail = BreakNeverSet, string(b.Kind)+": "+b.Detail
			}
			t.record(f, b)
			return
		}
		a, err := parseAnswer(s)
		if err != nil {
			t.record(f, &Break{At: time.Now(), Kind: BreakError, Detail: err.Error()})
			return
		}
		t.mu.Lock()
		if i == 0 {
			f.Backend, f.Client, f.Established = a.Pod, a.Client, time.Now()
			f.Local = ex.Local()
		}
		f.Answers++
		backend := f.Backend
		t.mu.Unlock()
		if a.Pod != backend {
			t.record(f, &Break{At: time.Now(), Kind: BreakBackend, Detail: fmt.Sprintf("answered by %s, was %s", a.Pod, backend)})
			return
		}
		settle()
		select {
		case <-ctx.Done():
			return
		case <-time.After(t.spec.Interval):
		}
	}
}

// breakOf classifies an exchange error.
func breakOf(err error) *Break {
	b := &Break{At: time.Now(), Kind: BreakError, Detail: err.Error()}
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.EPIPE):
		b.Kind = BreakReset
	case errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		b.Kind = BreakTimeout
	case errors.Is(err, io.EOF):
		b.Kind = BreakClosed
	}
	return b
}

// exchanger is one flow's transport: one message out, one answer back.
type exchanger interface {
	Exchange(timeout time.Duration) (string, error)
	Local() netip.AddrPort
	Close() error
}

func dialFlow(ctx context.Context, spec TrafficSpec, port int) (exchanger, error) {
	switch spec.Network {
	case "tcp":
		ctx, cancel := context.WithTimeout(ctx, spec.Timeout)
		defer cancel()
		d := net.Dialer{LocalAddr: &net.TCPAddr{Port: port}}
		c, err := d.DialContext(ctx, "tcp", spec.Target.String())
		if err != nil {
			return nil, err
		}
		return &tcpFlow{c: c, r: bufio.NewReader(c)}, nil
	default:
		network := "udp4"
		if spec.Target.Addr().Is6() {
			network = "udp6"
		}
		c, err := net.ListenUDP(network, &net.UDPAddr{Port: port})
		if err != nil {
			return nil, err
		}
		return &udpFlow{c: c, to: net.UDPAddrFromAddrPort(spec.Target), want: spec.Target, buf: make([]byte, 1500)}, nil
	}
}

type tcpFlow struct {
	c net.Conn
	r *bufio.Reader
}

func (f *tcpFlow) Exchange(timeout time.Duration) (string, error) {
	f.c.SetDeadline(time.Now().Add(timeout))
	if _, err := io.WriteString(f.c, "ping\n"); err != nil {
		return "", err
	}
	return f.r.ReadString('\n')
}

func (f *tcpFlow) Local() netip.AddrPort { return f.c.LocalAddr().(*net.TCPAddr).AddrPort() }
func (f *tcpFlow) Close() error          { return f.c.Close() }

type udpFlow struct {
	c    *net.UDPConn
	to   *net.UDPAddr
	want netip.AddrPort
	buf  []byte
}

// Exchange sends a datagram and waits for the answer, resending from the
// same port (the same flow) every timeout/3.
func (f *udpFlow) Exchange(timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	for {
		if _, err := f.c.WriteToUDP([]byte("ping"), f.to); err != nil {
			return "", err
		}
		next := time.Now().Add(timeout / 3)
		if next.After(deadline) {
			next = deadline
		}
		f.c.SetReadDeadline(next)
		n, from, err := f.c.ReadFromUDPAddrPort(f.buf)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) && time.Now().Before(deadline) {
				continue
			}
			return "", err
		}
		if from.Addr().Unmap() != f.want.Addr() || from.Port() != f.want.Port() {
			return "", fmt.Errorf("answer from %s, want %s", from, f.want)
		}
		return string(f.buf[:n]), nil
	}
}

func (f *udpFlow) Local() netip.AddrPort {
	return f.c.LocalAddr().(*net.UDPAddr).AddrPort()
}
func (f *udpFlow) Close() error { return f.c.Close() }

// Report is the flows' records.
type Report struct {
	Flows []Flow
}

// Established counts the flows that got a first answer.
func (r Report) Established() int {
	n := 0
	for _, f := range r.Flows {
		if !f.Established.IsZero() {
			n++
		}
	}
	return n
}

// Survived counts the established flows without a break.
func (r Report) Survived() int {
	n := 0
	for _, f := range r.Flows {
		if !f.Established.IsZero() && f.Break == nil {
			n++
		}
	}
	return n
}

// Backends counts established flows per first backend.
func (r Report) Backends() map[string]int {
	out := map[string]int{}
	for _, f := range r.Flows {
		if !f.Established.IsZero() {
			out[f.Backend]++
		}
	}
	return out
}

// String is "of N established flows (M opened), K survived", then the
// breaks by kind and the first few in full.
func (r Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "of %d established flows (%d opened), %d survived", r.Established(), len(r.Flows), r.Survived())
	kinds := map[BreakKind]int{}
	var order []BreakKind
	var first []string
	for _, f := range r.Flows {
		if f.Break == nil {
			continue
		}
		if kinds[f.Break.Kind] == 0 {
			order = append(order, f.Break.Kind)
		}
		kinds[f.Break.Kind]++
		if len(first) < 5 {
			first = append(first, fmt.Sprintf("%s (%s) %s at %s: %s", f.Local, f.Backend, f.Break.Kind, f.Break.At.Format("15:04:05.000"), f.Break.Detail))
		}
	}
	for _, k := range order {
		fmt.Fprintf(&b, "; %s %d", k, kinds[k])
	}
	for _, s := range first {
		fmt.Fprintf(&b, "\n  %s", s)
	}
	return b.String()
}
