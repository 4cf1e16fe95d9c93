package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/switchyard-lb/switchyard/core/config"
)

// passwordSetter is what bgpPasswords needs of a speaker; *bgp.Speaker
// implements it.
type passwordSetter interface {
	SetPassword(ctx context.Context, peer netip.Addr, password string) error
}

// secretPeer is a BGP peer whose TCP MD5 password is a key of a Secret.
type secretPeer struct {
	announcer string
	peer      netip.Addr
	ref       config.SecretKeyRef
	speaker   passwordSetter
}

// bgpPasswords keeps the passwords of BGP peers in step with their
// Secrets, in the daemon's namespace: one watch per Secret name (a field
// selector, so nothing else of the namespace is cached). A peer whose
// Secret or key is missing stays down (bgp.Peer.AdminDown) until it
// appears; a later deletion keeps the password in force (the session
// stays up) and is reported.
type bgpPasswords struct {
	client kubernetes.Interface
	ns     string
	log    *slog.Logger
	peers  []*secretPeer

	mu   sync.Mutex
	errs map[*secretPeer]error // the last failure of each peer's password
}

func newBGPPasswords(client kubernetes.Interface, ns string, log *slog.Logger) *bgpPasswords {
	return &bgpPasswords{client: client, ns: ns, log: log, errs: map[*secretPeer]error{}}
}

// secretPassword returns the password ref names in s (nil: no such
// Secret), with surrounding white space trimmed as for passwordFile.
func secretPassword(ns string, ref config.SecretKeyRef, s *corev1.Secret) (string, error) {
	if s == nil {
		return "", fmt.Errorf("password Secret %s/%s not found", ns, ref.Name)
	}
	v, ok := s.Data[ref.Key]
	if !ok {
		return "", fmt.Errorf("password Secret %s/%s has no key %q", ns, ref.Name, ref.Key)
	}
	pw := strings.TrimSpace(string(v))
	if pw == "" {
		return "", fmt.Errorf("password Secret %s/%s: key %q is empty", ns, ref.Name, ref.Key)
	}
	return pw, nil
}

// initial reads ref's Secret once, before the speaker starts, so that a
// peer whose Secret exists comes up with its password at once.
func (b *bgpPasswords) initial(ctx context.Context, ref config.SecretKeyRef) (string, error) {
	s, err := getSecret(ctx, b.client, b.ns, ref.Name)
	if err != nil {
		return "", err
	}
	return secretPassword(b.ns, ref, s)
}

// add registers a peer to keep in step; err is its initial failure.
func (b *bgpPasswords) add(p *secretPeer, err error) {
	b.peers = append(b.peers, p)
	b.record(p, err)
}

func (b *bgpPasswords) record(p *secretPeer, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err == nil {
		delete(b.errs, p)
		return
	}
	b.errs[p] = err
}

// apply sets the password of every peer whose Secret is name; s nil
// means the Secret is gone.
func (b *bgpPasswords) apply(ctx context.Context, name string, s *corev1.Secret) {
	if ctx.Err() != nil {
		return // shutting down: the speakers are closing
	}
	for _, p := range b.peers {
		if p.ref.Name != name {
			continue
		}
		pw, err := secretPassword(b.ns, p.ref, s)
		if err == nil {
			err = p.speaker.SetPassword(ctx, p.peer, pw)
		}
		if err != nil {
			err = fmt.Errorf("bgp peer %s: password: %w", p.peer, err)
			b.log.Error("bgp password not applied; the peer keeps its last password, or stays down without one",
				"announcer", p.announcer, "peer", p.peer, "err", err)
		}
		b.record(p, err)
	}
}

// failures returns the current password failures of announcer's peers.
func (b *bgpPasswords) failures(announcer string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	var errs []error
	for _, p := range b.peers {
		if err := b.errs[p]; err != nil && p.announcer == announcer {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// run watches every referenced Secret until ctx is done.
func (b *bgpPasswords) run(ctx context.Context, wg *sync.WaitGroup) {
	var names []string
	for _, p := range b.peers {
		if !slices.Contains(names, p.ref.Name) {
			names = append(names, p.ref.Name)
		}
	}
	for _, name := range names {
		watchSecret(ctx, wg, b.client, b.ns, name, b.log, func(s *corev1.Secret) { b.apply(ctx, name, s) })
	}
}
