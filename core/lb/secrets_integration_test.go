//go:build integration

package lb

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/switchyard-lb/switchyard/core/config"
	"github.com/switchyard-lb/switchyard/core/election"
	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/test/apitest"
	"github.com/switchyard-lb/switchyard/test/harness"
)

// TestIntegrationLBSecretFollow runs a Manager against a real API server
// with an announcer type that follows a Secret and starts only once the
// nodes hold this node (after Run, as BGP does): the Secret's creation,
// update and deletion reach the announcer, each on its owner's
// goroutine, alone beside the loop's Announce calls. Another Secret of
// the namespace is never delivered.
func TestIntegrationLBSecretFollow(t *testing.T) {
	srv := apitest.Start(t)
	ns := srv.Namespace(t)
	ctx := t.Context()
	secrets := srv.Client.CoreV1().Secrets(ns)

	a := &serialAnnouncer{t: t}
	var mu sync.Mutex
	var got []string // "<name> <value>", "deleted"
	typ := Type{Mode: election.Layer2, NeedsNode: true, New: func(context.Context, Env, config.Announcer) (*Instance, error) {
		return &Instance{Announcer: a, Follow: []Follow{{Name: "key", Apply: func(_ context.Context, s *corev1.Secret) {
			defer a.enter("secret")()
			mu.Lock()
			defer mu.Unlock()
			if s == nil {
				got = append(got, "deleted")
				return
			}
			got = append(got, s.Name+" "+string(s.Data["k"]))
		}}}}, nil
	}}
	m, err := New(ctx, Config{
		Client: srv.Client, NodeName: "n1", Namespace: ns, Types: Types{"following": typ},
		Registerer: prometheus.NewRegistry(), Trigger: func() {}, Log: discard(),
	}, &config.Config{
		Announcers: []config.Announcer{{Name: "f", Type: "following"}},
		Membership: config.Membership{BindAddress: "127.0.0.1", Port: -1},
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); m.Run(runCtx) }()
	defer func() {
		cancel()
		<-done
		if err := m.Close(); err != nil {
			t.Errorf("Close = %v", err)
		}
	}()

	// The loop: nodes, then announcements, all along.
	m.SetNodes(map[string]*model.Node{"n1": {Name: "n1", Ready: true}})
	loopDone := make(chan struct{})
	go func() {
		defer close(loopDone)
		for runCtx.Err() == nil {
			_ = m.Elected()[0].Announcer.Announce(runCtx, nil)
			time.Sleep(time.Millisecond)
		}
	}()
	defer func() { cancel(); <-loopDone }()

	last := func(want string) {
		t.Helper()
		harness.Poll(t, 2*time.Minute, func() error {
			mu.Lock()
			n := len(got)
			var l string
			if n > 0 {
				l = got[n-1]
			}
			mu.Unlock()
			if l != want {
				return fmt.Errorf("the announcer last got %q, want %q", l, want)
			}
			return nil
		})
	}
	put := func(name, value string) {
		t.Helper()
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Data: map[string][]byte{"k": []byte(value)}}
		if _, err := secrets.Create(ctx, s, metav1.CreateOptions{}); err == nil {
			return
		}
		if _, err := secrets.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	put("other", "x")
	put("key", "one")
	last("key one")
	put("key", "two")
	last("key two")
	if err := secrets.Delete(ctx, "key", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	last("deleted")
	mu.Lock()
	defer mu.Unlock()
	for _, g := range got {
		if g != "deleted" && g[:4] != "key " {
			t.Errorf("delivered %q, want only the followed Secret", g)
		}
	}
	if a.count("announce") == 0 {
		t.Error("the loop's Announce never reached the announcer")
	}
}
