package cloud

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plugin"
)

// Name is the announcer's type in configuration and metrics.
const Name = "cloud"

// Defaults of Options.
const (
	DefaultTimeout        = 10 * time.Second
	DefaultInitialBackoff = 500 * time.Millisecond
	DefaultMaxBackoff     = 30 * time.Second
	DefaultResync         = 5 * time.Minute
)

// ErrClosed is returned by Announce and SetNodes after Close.
var ErrClosed = errors.New("cloud announcer closed")

// Options configure an Announcer.
type Options struct {
	// URL is the provider's base URL; paths of CONTRACT.md are appended.
	// Required.
	URL string
	// NodeName is this node's name, sent as the owner. Required.
	NodeName string
	// TokenFile, when set, holds the bearer token; it is read for every
	// request, so a rotated Secret is picked up.
	TokenFile string
	// Client sends the requests; default a plain http.Client.
	Client *http.Client
	// Timeout bounds one call; default DefaultTimeout.
	Timeout time.Duration
	// InitialBackoff and MaxBackoff bound the waits between retries;
	// defaults DefaultInitialBackoff and DefaultMaxBackoff.
	InitialBackoff, MaxBackoff time.Duration
	// ResyncInterval is how often every desired address is ensured
	// again even though the provider confirmed it, and rejected calls
	// are tried again: it repairs state changed behind the announcer's
	// back. 0 means DefaultResync; negative disables it.
	ResyncInterval time.Duration
	// OnCall, when set, is called after every webhook call, from the
	// Announcer's goroutine: a hook for logs and metrics. It must not
	// block or call the Announcer.
	OnCall func(Call)
}

// Call describes one webhook call, for Options.OnCall.
type Call struct {
	Op       Op
	Addr     netip.Addr
	Status   int // 0 when no response arrived
	Duration time.Duration
	// Err is nil on success; Retry says whether it will be retried.
	Err   error
	Retry bool
}

// Op is a webhook operation.
type Op uint8

const (
	OpEnsure Op = iota + 1
	OpRelease
)

func (o Op) String() string {
	switch o {
	case OpEnsure:
		return "ensure"
	case OpRelease:
		return "release"
	}
	return "Op(" + strconv.Itoa(int(o)) + ")"
}

// Announcer keeps a provider's load balancers in line with the addresses
// this node announces. It is safe for concurrent use.
type Announcer struct {
	opts Options
	base *url.URL

	ctx    context.Context // cancelled by Close: aborts calls in flight
	cancel context.CancelFunc
	wake   chan struct{}
	done   chan struct{}

	mu       sync.Mutex
	desired  map[netip.Addr]target
	nodes    []Node
	haveNode bool
	// sent is what the provider may hold: the body it confirmed, or nil
	// when a call was attempted without confirmation.
	sent map[netip.Addr][]byte
	// rejected holds permanent failures by address, with the body (nil
	// for a release) they apply to.
	rejected  map[netip.Addr]rejection
	transient error // the last pass's transient failures
	gen       uint64
	doneGen   uint64
	passDone  chan struct{}
	closed    bool
}

type rejection struct {
	body []byte
	err  error
}

// target is the desired state of one address.
type target struct {
	services []model.ServiceKey // sorted, without duplicates
	// only, when non-nil, holds the nodes that serve the address
	// (model.Announcement.Nodes) with their weights: the address goes to
	// these of SetNodes' nodes. Nil: to all of them, each of weight 1.
	only map[string]int
}

var (
	_ plugin.Announcer      = (*Announcer)(nil)
	_ plugin.HealthReporter = (*Announcer)(nil)
)

// New validates opts and starts the Announcer's goroutine; nothing is
// sent before the first Announce and SetNodes.
func New(opts Options) (*Announcer, error) {
	base, err := url.Parse(opts.URL)
	if err != nil {
		return nil, fmt.Errorf("cloud announcer: url: %w", err)
	}
	if base.Scheme != "http" && base.Scheme != "https" || base.Host == "" {
		return nil, fmt.Errorf("cloud announcer: url %q: want an absolute http or https URL", opts.URL)
	}
	if opts.NodeName == "" {
		return nil, errors.New("cloud announcer: node name is required")
	}
	if opts.Client == nil {
		opts.Client = &http.Client{}
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.InitialBackoff <= 0 {
		opts.InitialBackoff = DefaultInitialBackoff
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = DefaultMaxBackoff
	}
	opts.MaxBackoff = max(opts.MaxBackoff, opts.InitialBackoff)
	if opts.ResyncInterval == 0 {
		opts.ResyncInterval = DefaultResync
	}
	ctx, cancel := context.WithCancel(context.Background())
	a := &Announcer{
		opts: opts, base: base, ctx: ctx, cancel: cancel,
		wake:     make(chan struct{}, 1),
		done:     make(chan struct{}),
		desired:  map[netip.Addr]target{},
		sent:     map[netip.Addr][]byte{},
		rejected: map[netip.Addr]rejection{},
		passDone: make(chan struct{}),
	}
	go a.run()
	return a, nil
}

// Name returns Name.
func (a *Announcer) Name() string { return Name }

// Announce sets the complete set of addresses this node announces; an
// empty set releases everything. It returns at once: the calls happen on
// the Announcer's goroutine (see Synced and Healthy).
//
// An address whose announcements carry Nodes goes only to those of
// SetNodes' nodes (the union over its announcements), each with its
// weight from Weights (1 when Weights is nil; the largest when
// announcements differ); one announcement without Nodes sends it to all
// of them, each of weight 1.
func (a *Announcer) Announce(ctx context.Context, set []model.Announcement) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("cloud announce: %w", err)
	}
	desired := map[netip.Addr]target{}
	all := map[netip.Addr]bool{} // an announcement without Nodes
	for _, an := range set {
		if !an.Addr.IsValid() {
			return fmt.Errorf("cloud announce: invalid address for %s", an.Service)
		}
		if an.Weights != nil && len(an.Weights) != len(an.Nodes) {
			return fmt.Errorf("cloud announce: %s of %s: %d weights for %d nodes", an.Addr, an.Service, len(an.Weights), len(an.Nodes))
		}
		addr := an.Addr.WithZone("").Unmap()
		t := desired[addr]
		t.services = append(t.services, an.Service)
		if an.Nodes == nil {
			all[addr] = true
		} else if t.only == nil {
			t.only = make(map[string]int, len(an.Nodes))
		}
		for i, name := range an.Nodes {
			w := 1
			if an.Weights != nil {
				w = an.Weights[i]
			}
			if w < 0 {
				return fmt.Errorf("cloud announce: %s of %s: node %s has negative weight %d", an.Addr, an.Service, name, w)
			}
			t.only[name] = max(t.only[name], w)
		}
		desired[addr] = t
	}
	for addr, t := range desired {
		slices.SortFunc(t.services, model.ServiceKey.Compare)
		t.services = slices.Compact(t.services)
		if all[addr] {
			t.only = nil
		}
		desired[addr] = t
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return ErrClosed
	}
	a.desired = desired
	a.changedLocked()
	return nil
}

// SetNodes sets the nodes the addresses' traffic goes to (see the
// package documentation): all of them, or those an address's
// announcements name; a change re-ensures every address it changes.
func (a *Announcer) SetNodes(nodes []Node) error {
	cp := make([]Node, len(nodes))
	for i, n := range nodes {
		if n.Name == "" {
			return errors.New("cloud announcer: node without a name")
		}
		cp[i] = Node{Name: n.Name, Addrs: slices.Clone(n.Addrs)}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return ErrClosed
	}
	a.nodes, a.haveNode = cp, true
	a.changedLocked()
	return nil
}

func (a *Announcer) changedLocked() {
	a.gen++
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// Healthy reports the rejected calls and the last transient failure, or
// nil when the provider confirmed everything asked so far.
func (a *Announcer) Healthy() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.healthLocked()
}

func (a *Announcer) healthLocked() error {
	addrs := make([]netip.Addr, 0, len(a.rejected))
	for addr := range a.rejected {
		addrs = append(addrs, addr)
	}
	slices.SortFunc(addrs, netip.Addr.Compare)
	var errs []error
	for _, addr := range addrs {
		errs = append(errs, a.rejected[addr].err)
	}
	if a.transient != nil {
		errs = append(errs, a.transient)
	}
	return errors.Join(errs...)
}

// Synced waits until the provider confirmed, or permanently rejected,
// everything asked before the call, and returns Healthy. While calls
// fail transiently it keeps waiting, until ctx is done. Ensures held back
// until the first SetNodes do not count as asked.
func (a *Announcer) Synced(ctx context.Context) error {
	a.mu.Lock()
	target := a.gen
	for a.doneGen < target {
		if a.closed {
			a.mu.Unlock()
			return ErrClosed
		}
		ch := a.passDone
		a.mu.Unlock()
		select {
		case <-ctx.Done():
			return fmt.Errorf("cloud announcer: wait for the provider: %w", ctx.Err())
		case <-ch:
		}
		a.mu.Lock()
	}
	defer a.mu.Unlock()
	return a.healthLocked()
}

// Close stops the goroutine, aborting a call in flight. It releases
// nothing: the provider keeps serving the addresses.
func (a *Announcer) Close() error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil
	}
	a.closed = true
	close(a.passDone) // wake Synced callers
	a.passDone = make(chan struct{})
	a.mu.Unlock()
	a.cancel()
	<-a.done
	return nil
}

// run is the Announcer's goroutine: one pass per wake-up, and after a
// transient failure a retry after a growing wait.
func (a *Announcer) run() {
	defer close(a.done)
	var resync <-chan time.Time
	if a.opts.ResyncInterval > 0 {
		t := time.NewTicker(a.opts.ResyncInterval)
		defer t.Stop()
		resync = t.C
	}
	failures := 0
	var retry <-chan time.Time
	for {
		select {
		case <-a.ctx.Done():
			return
		case <-resync:
			a.forgetConfirmations()
			if retry != nil {
				continue
			}
		case <-a.wake:
			if retry != nil {
				continue // already scheduled: keep backing off
			}
		case <-retry:
			retry = nil
		}
		wait, ok := a.pass()
		if a.ctx.Err() != nil {
			return
		}
		if ok {
			failures = 0
			continue
		}
		failures++
		t := time.NewTimer(a.backoff(failures, wait))
		retry = t.C
	}
}

// forgetConfirmations makes the next pass ensure every desired address
// and retry rejected calls.
func (a *Announcer) forgetConfirmations() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for addr := range a.sent {
		a.sent[addr] = nil
	}
	clear(a.rejected)
}

// backoff is the wait before retry n (1-based): doubling from
// InitialBackoff, at least hint, capped at MaxBackoff, plus up to 20%
// jitter.
func (a *Announcer) backoff(n int, hint time.Duration) time.Duration {
	d := a.opts.InitialBackoff
	for i := 1; i < n && d < a.opts.MaxBackoff; i++ {
		d *= 2
	}
	d = min(max(d, hint), a.opts.MaxBackoff)
	return d + rand.N(d/5+1)
}

// op is one call to make.
type op struct {
	kind Op
	addr netip.Addr
	body []byte // ensure only
}

// plan lists the calls that bring the provider to the desired state.
func (a *Announcer) planLocked() []op {
	var ops []op
	if a.haveNode {
		for addr := range a.desired {
			body := a.bodyLocked(addr)
			if sent, ok := a.sent[addr]; ok && sent != nil && bytes.Equal(sent, body) {
				continue
			}
			if r, ok := a.rejected[addr]; ok && bytes.Equal(r.body, body) {
				continue
			}
			ops = append(ops, op{OpEnsure, addr, body})
		}
	}
	for addr := range a.sent {
		if _, want := a.desired[addr]; want {
			continue
		}
		if r, ok := a.rejected[addr]; ok && r.body == nil {
			continue
		}
		ops = append(ops, op{kind: OpRelease, addr: addr})
	}
	slices.SortFunc(ops, func(x, y op) int { return x.addr.Compare(y.addr) })
	return ops
}

// bodyLocked returns the ensure body of a desired address: its Services
// and the nodes it goes to, with their weights.
func (a *Announcer) bodyLocked(addr netip.Addr) []byte {
	t := a.desired[addr]
	nodes := a.nodes
	weight := func(string) int { return 1 }
	if t.only != nil {
		nodes = slices.DeleteFunc(slices.Clone(a.nodes), func(n Node) bool {
			_, found := t.only[n.Name]
			return !found
		})
		weight = func(name string) int { return t.only[name] }
	}
	return encodeEnsure(addr, a.opts.NodeName, t.services, nodes, weight)
}

// pass makes the calls the desired state needs. ok is false when one
// failed transiently; wait is the longest Retry-After asked.
func (a *Announcer) pass() (wait time.Duration, ok bool) {
	a.mu.Lock()
	gen := a.gen
	ops := a.planLocked()
	a.mu.Unlock()

	var transient []error
	for _, o := range ops {
		res := a.call(o)
		a.mu.Lock()
		switch {
		case res.err == nil && o.kind == OpEnsure:
			a.sent[o.addr] = o.body
			delete(a.rejected, o.addr)
		case res.err == nil:
			delete(a.sent, o.addr)
			delete(a.rejected, o.addr)
		case res.retry:
			if _, ok := a.sent[o.addr]; !ok && o.kind == OpEnsure {
				a.sent[o.addr] = nil // it may exist now: release it if unwanted
			}
			transient = append(transient, res.err)
			wait = max(wait, res.retryAfter)
		default:
			if o.kind == OpEnsure {
				if _, ok := a.sent[o.addr]; !ok {
					a.sent[o.addr] = nil
				}
			}
			a.rejected[o.addr] = rejection{body: o.body, err: res.err}
		}
		a.mu.Unlock()
		if a.opts.OnCall != nil {
			a.opts.OnCall(Call{Op: o.kind, Addr: o.addr, Status: res.status, Duration: res.took, Err: res.err, Retry: res.retry})
		}
		if a.ctx.Err() != nil {
			return 0, false
		}
	}

	a.mu.Lock()
	defer a.mu.Unlock()
	a.transient = errors.Join(transient...)
	// Rejections of a state no longer desired are moot.
	for addr, r := range a.rejected {
		if _, want := a.desired[addr]; want != (r.body != nil) ||
			(want && a.haveNode && !bytes.Equal(r.body, a.bodyLocked(addr))) {
			delete(a.rejected, addr)
		}
	}
	if len(transient) == 0 {
		a.doneGen = max(a.doneGen, gen)
		close(a.passDone)
		a.passDone = make(chan struct{})
		return 0, true
	}
	return wait, false
}

type result struct {
	status     int
	err        error
	retry      bool
	retryAfter time.Duration
	took       time.Duration
}

// call makes one webhook call and classifies its outcome by CONTRACT.md.
func (a *Announcer) call(o op) (res result) {
	start := time.Now()
	defer func() { res.took = time.Since(start) }()
	method, path := http.MethodPut, addressPath(o.addr)
	u := *a.base
	u.Path = strings.TrimSuffix(u.Path, "/") + path
	u.RawPath = ""
	var body io.Reader
	if o.kind == OpRelease {
		method = http.MethodDelete
		u.RawQuery = url.Values{"owner": {a.opts.NodeName}}.Encode()
	} else {
		body = bytes.NewReader(o.body)
	}
	fail := func(retry bool, format string, args ...any) result {
		res.err = fmt.Errorf("cloud %s %s: "+format, append([]any{o.kind, o.addr}, args...)...)
		res.retry = retry
		return res
	}

	ctx, cancel := context.WithTimeout(a.ctx, a.opts.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return fail(false, "build request: %w", err)
	}
	req.Header.Set("User-Agent", "switchyard-cloud/1")
	req.Header.Set("Idempotency-Key", idempotencyKey(method, path, o.body))
	if o.kind == OpEnsure {
		req.Header.Set("Content-Type", "application/json")
	}
	if a.opts.TokenFile != "" {
		tok, err := os.ReadFile(a.opts.TokenFile)
		if err != nil {
			return fail(true, "read token: %w", err)
		}
		t := strings.TrimSpace(string(tok))
		if t == "" {
			return fail(true, "token file %s is empty", a.opts.TokenFile)
		}
		req.Header.Set("Authorization", "Bearer "+t)
	}
	resp, err := a.opts.Client.Do(req)
	if err != nil {
		return fail(true, "%w", err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	res.status = resp.StatusCode
	switch c := resp.StatusCode; {
	case c >= 200 && c < 300:
		return res
	case o.kind == OpRelease && (c == http.StatusNotFound || c == http.StatusConflict):
		return res // already released, or another node's now
	case c == http.StatusUnauthorized || c == http.StatusRequestTimeout ||
		c == http.StatusTooManyRequests || c >= 500:
		res.retryAfter = parseRetryAfter(resp.Header.Get("Retry-After"))
		return fail(true, "%s%s", resp.Status, reason(msg))
	default:
		return fail(false, "%s%s", resp.Status, reason(msg))
	}
}

// reason extracts the provider's explanation from an error body.
func reason(body []byte) string {
	var e errorBody
	if json.Unmarshal(body, &e) == nil && e.Error != "" {
		return ": " + e.Error
	}
	s := strings.TrimSpace(string(body))
	if s == "" {
		return ""
	}
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return ": " + s
}

// maxRetryAfter caps a Retry-After: the wait is capped at MaxBackoff
// anyway, and more seconds than this would overflow a Duration.
const maxRetryAfter = 24 * time.Hour

// parseRetryAfter reads a Retry-After in seconds; dates are ignored.
func parseRetryAfter(v string) time.Duration {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 0 {
		return 0
	}
	if n > int(maxRetryAfter/time.Second) {
		return maxRetryAfter
	}
	return time.Duration(n) * time.Second
}
