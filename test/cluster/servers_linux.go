package cluster

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"
)

// serve starts pod's servers inside its namespace: HTTP on PodHTTPPort,
// the line protocol on PodTCPPort and UDP on PodUDPPort, each answering
// with the pod's name and the client address it saw; HTTP adds a body of
// filler when asked (Download).
func serve(pod *Pod) (io.Closer, error) {
	var (
		httpLn, tcpLn net.Listener
		udp           net.PacketConn
	)
	err := pod.NS.Do(func() error {
		var err error
		if httpLn, err = net.Listen("tcp", fmt.Sprintf(":%d", PodHTTPPort)); err != nil {
			return err
		}
		if tcpLn, err = net.Listen("tcp", fmt.Sprintf(":%d", PodTCPPort)); err != nil {
			httpLn.Close()
			return err
		}
		if udp, err = net.ListenPacket("udp", fmt.Sprintf(":%d", PodUDPPort)); err != nil {
			httpLn.Close()
			tcpLn.Close()
			return err
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("cluster: pod %s: listen: %w", pod.Name, err)
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "%s %s", pod.Name, r.RemoteAddr)
			// ?bytes=N: N filler bytes after a newline (Download).
			if n, err := strconv.ParseInt(r.URL.Query().Get("bytes"), 10, 64); err == nil && n > 0 {
				w.Write([]byte{'\n'})
				io.CopyN(w, zeros{}, n)
			}
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go srv.Serve(httpLn)
	go func() {
		for {
			c, err := tcpLn.Accept()
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				continue
			}
			go answerLines(pod.Name, c)
		}
	}()
	go func() {
		buf := make([]byte, 1500)
		for {
			_, from, err := udp.ReadFrom(buf)
			if err != nil {
				return // closed
			}
			udp.WriteTo([]byte(pod.Name+" "+from.String()), from)
		}
	}()
	return closers{srv, tcpLn, udp}, nil
}

// answerLines answers every line on c until the client closes it.
func answerLines(name string, c net.Conn) {
	defer c.Close()
	answer := []byte(name + " " + c.RemoteAddr().String() + "\n")
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		if _, err := c.Write(answer); err != nil {
			return
		}
	}
}

// zeros reads as endless zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

type closers []io.Closer

func (cs closers) Close() error {
	var errs []error
	for _, c := range cs {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}
