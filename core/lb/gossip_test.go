package lb

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/switchyard-lb/switchyard/core/config"
	"github.com/switchyard-lb/switchyard/core/membership"
)

func TestGossipKeys(t *testing.T) {
	k16 := []byte("0123456789abcdef")
	k32 := []byte("0123456789abcdef0123456789abcdef")
	b64 := base64.StdEncoding.EncodeToString
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name    string
		mc      config.Membership
		want    [][]byte
		wantErr string
	}{
		{name: "none configured", mc: config.Membership{}},
		{name: "file, rotating", mc: config.Membership{SecretKeyFile: file("two", b64(k32)+"\n"+b64(k16)+"\n")}, want: [][]byte{k32, k16}},
		{name: "file with a short key", mc: config.Membership{SecretKeyFile: file("short", b64([]byte("short"))+"\n")},
			wantErr: "gossip key on line 1: key is 5 bytes, want 16, 24 or 32"},
		{name: "empty file", mc: config.Membership{SecretKeyFile: file("empty", "# none yet\n")}, wantErr: "no gossip key"},
		{name: "missing file", mc: config.Membership{SecretKeyFile: filepath.Join(dir, "missing")}, wantErr: "membership.secretKeyFile: open "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := gossipKeys(context.Background(), nil, tt.mc)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("gossipKeys error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("gossipKeys (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSecretGossipKeys(t *testing.T) {
	ref := config.SecretKeyRef{Name: "gossip", Key: "keys"}
	k24 := []byte("0123456789abcdef01234567")
	tests := []struct {
		name    string
		secret  *corev1.Secret
		want    [][]byte
		wantErr string
	}{
		{name: "one key", secret: &corev1.Secret{Data: map[string][]byte{"keys": []byte(base64.StdEncoding.EncodeToString(k24))}}, want: [][]byte{k24}},
		{name: "no Secret", wantErr: "membership.secretKeySecret: Secret ns/gossip not found"},
		{name: "no key", secret: &corev1.Secret{}, wantErr: `membership.secretKeySecret: Secret ns/gossip has no key "keys"`},
		{name: "not base64", secret: &corev1.Secret{Data: map[string][]byte{"keys": []byte("!!")}},
			wantErr: `membership.secretKeySecret: Secret ns/gossip key "keys": gossip key on line 1: illegal base64 data at input byte 0`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := secretGossipKeys("ns", ref, tt.secret)
			gotErr := ""
			if err != nil {
				gotErr = err.Error()
			}
			if gotErr != tt.wantErr {
				t.Fatalf("secretGossipKeys error = %q, want %q", gotErr, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("secretGossipKeys (-want +got):\n%s", diff)
			}
		})
	}
}

// recordingKeys is a keySetter that records what it was given.
type recordingKeys struct {
	got [][]byte
	err error
}

func (r *recordingKeys) SetKeys(keys [][]byte) error { r.got = keys; return r.err }

func TestGossipRotation(t *testing.T) {
	k16 := []byte("0123456789abcdef")
	valid := &corev1.Secret{Data: map[string][]byte{"keys": []byte(base64.StdEncoding.EncodeToString(k16))}}
	m := &recordingKeys{}
	g := &gossipRotation{ns: "ns", ref: config.SecretKeyRef{Name: "gossip", Key: "keys"}, m: m, log: slog.New(slog.NewTextHandler(io.Discard, nil))}

	err := g.apply(valid)
	if diff := cmp.Diff([][]byte{k16}, m.got); diff != "" || err != nil {
		t.Fatalf("after a valid Secret: keys (-want +got):\n%s; failure %v", diff, err)
	}
	m.got = nil
	err = g.apply(nil) // deleted: the keys in force stay
	if m.got != nil || err == nil {
		t.Errorf("after the Secret's deletion: SetKeys(%v), failure %v; want no call and a failure", m.got, err)
	}
	m.err = errors.New("refused")
	if err := g.apply(valid); err == nil || err.Error() != "refused" {
		t.Errorf("failure after SetKeys failed = %v, want refused", err)
	}
	m.err = nil
	if err := g.apply(valid); err != nil {
		t.Errorf("failure after a later success = %v, want nil", err)
	}
}

// TestGossipTiming: the config's defaults are membership's LAN timing,
// and the failure detector's knobs the config sets reach membership.
func TestGossipTiming(t *testing.T) {
	defaults := config.Default().Membership
	if diff := cmp.Diff(membership.LANTiming(), GossipTiming(defaults)); diff != "" {
		t.Errorf("the config's defaults are not membership's LAN timing (-want +got):\n%s", diff)
	}
	tolerant := defaults
	tolerant.ProbeInterval = config.Duration(time.Second)
	tolerant.ProbeTimeout = config.Duration(500 * time.Millisecond)
	tolerant.SuspicionMult = 4
	want := membership.LANTiming()
	want.ProbeInterval, want.ProbeTimeout, want.SuspicionMult = time.Second, 500*time.Millisecond, 4
	if diff := cmp.Diff(want, GossipTiming(tolerant)); diff != "" {
		t.Errorf("tolerant timing (-want +got):\n%s", diff)
	}
}
