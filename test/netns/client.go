package netns

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync/atomic"
	"time"
)

// sourcePorts hands out client source ports, each used once per process,
// below the kernel's ephemeral range: a reused 4-tuple still in TIME_WAIT
// on a backend delays a new connection by a SYN retransmission and lets
// IPVS reschedule it (kernel-lab.md pitfall 1).
var sourcePorts atomic.Int32

const firstSourcePort, lastSourcePort = 10000, 32000

// NextSourcePort returns a client source port no earlier call in this
// process returned, or an error once they run out.
func NextSourcePort() (int, error) {
	p := firstSourcePort + int(sourcePorts.Add(1)) - 1
	if p > lastSourcePort {
		return 0, errors.New("out of unique client source ports")
	}
	return p, nil
}

// HTTPGet makes one HTTP/1.0 request for path on a fresh connection from
// srcPort to target, within timeout, and returns the body of a 200 answer.
// It dials itself, so that no transport can retry on another connection
// unseen (kernel-lab.md pitfall 12). Call it inside the client's
// namespace (Unnamed.Do).
func HTTPGet(ctx context.Context, srcPort int, target netip.AddrPort, path string, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	d := net.Dialer{LocalAddr: &net.TCPAddr{Port: srcPort}}
	conn, err := d.DialContext(ctx, "tcp", target.String())
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n", path, target); err != nil {
		return "", fmt.Errorf("send request: %w", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return "", fmt.Errorf("read response: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", fmt.Errorf("read body: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("status %s: %s", resp.Status, body)
	}
	return string(body), nil
}
