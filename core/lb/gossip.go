package lb

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/switchyard-lb/switchyard/core/config"
	"github.com/switchyard-lb/switchyard/core/membership"
)

// GossipTiming is membership's LAN timing with the failure detector's
// knobs the config sets (core/config fills their defaults): the timing
// the daemon gossips with.
func GossipTiming(mc config.Membership) membership.Timing {
	t := membership.LANTiming()
	if mc.ProbeInterval > 0 {
		t.ProbeInterval = mc.ProbeInterval.Std()
	}
	if mc.ProbeTimeout > 0 {
		t.ProbeTimeout = mc.ProbeTimeout.Std()
	}
	if mc.SuspicionMult > 0 {
		t.SuspicionMult = mc.SuspicionMult
	}
	return t
}

// restartGrace is membership's restart grace; unset (a config whose
// defaults were not filled) is none.
func restartGrace(mc config.Membership) time.Duration {
	if mc.RestartGrace == nil {
		return 0
	}
	return mc.RestartGrace.Std()
}

// gossipKeys reads the gossip encryption keys membership's config names:
// nil when it names none. A missing or invalid Secret, key or file is an
// error naming it: the daemon does not gossip in clear when told to
// encrypt.
func gossipKeys(ctx context.Context, secrets *Secrets, mc config.Membership) ([][]byte, error) {
	switch {
	case mc.SecretKeyFile != "":
		data, err := os.ReadFile(mc.SecretKeyFile)
		if err != nil {
			return nil, fmt.Errorf("membership.secretKeyFile: %w", err)
		}
		keys, err := parseGossipKeys(data)
		if err != nil {
			return nil, fmt.Errorf("membership.secretKeyFile %s: %w", mc.SecretKeyFile, err)
		}
		return keys, nil
	case mc.SecretKeySecret != nil:
		s, err := secrets.Get(ctx, mc.SecretKeySecret.Name)
		if err != nil {
			return nil, fmt.Errorf("membership.secretKeySecret: %w", err)
		}
		return secretGossipKeys(secrets.Namespace(), *mc.SecretKeySecret, s)
	}
	return nil, nil
}

// secretGossipKeys returns the keys ref names in s (nil: no such
// Secret).
func secretGossipKeys(ns string, ref config.SecretKeyRef, s *corev1.Secret) ([][]byte, error) {
	if s == nil {
		return nil, fmt.Errorf("membership.secretKeySecret: Secret %s/%s not found", ns, ref.Name)
	}
	data, ok := s.Data[ref.Key]
	if !ok {
		return nil, fmt.Errorf("membership.secretKeySecret: Secret %s/%s has no key %q", ns, ref.Name, ref.Key)
	}
	keys, err := parseGossipKeys(data)
	if err != nil {
		return nil, fmt.Errorf("membership.secretKeySecret: Secret %s/%s key %q: %w", ns, ref.Name, ref.Key, err)
	}
	return keys, nil
}

// parseGossipKeys is membership.ParseKeys, refusing no key at all.
func parseGossipKeys(data []byte) ([][]byte, error) {
	keys, err := membership.ParseKeys(data)
	if err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return nil, errors.New("no gossip key (want one base64 key of 16, 24 or 32 bytes per line)")
	}
	return keys, nil
}

// keySetter is what gossipRotation needs of membership.
type keySetter interface{ SetKeys([][]byte) error }

// gossipRotation applies changes of the gossip keys' Secret to a running
// membership. A deleted Secret or an invalid change keeps the keys in
// force. Membership is its own single writer of the keys (SetKeys holds
// its lock), so the watch's goroutine calls it directly.
type gossipRotation struct {
	ns  string
	ref config.SecretKeyRef
	m   keySetter
	log *slog.Logger
}

// apply sets the keys of s (nil: the Secret is gone) and returns why it
// did not.
func (g *gossipRotation) apply(s *corev1.Secret) error {
	keys, err := secretGossipKeys(g.ns, g.ref, s)
	if err == nil {
		err = g.m.SetKeys(keys)
	}
	if err != nil {
		g.log.Error("gossip keys not changed; the keys in force stay", "err", err)
	}
	return err
}
