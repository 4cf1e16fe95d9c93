package config

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-lb/switchyard/core/plugin/plugintest"
)

// configMapDir lays files out as the kubelet does for a ConfigMap volume:
// dir/config.yaml -> ..data/config.yaml, ..data -> ..<version>, and an
// update swaps the ..data symlink atomically.
type configMapDir struct {
	t       *testing.T
	dir     string
	version int
}

func newConfigMapDir(t *testing.T, content string) *configMapDir {
	d := &configMapDir{t: t, dir: t.TempDir()}
	d.update(content)
	if err := os.Symlink(filepath.Join("..data", "config.yaml"), d.path()); err != nil {
		t.Fatal(err)
	}
	return d
}

func (d *configMapDir) path() string { return filepath.Join(d.dir, "config.yaml") }

func (d *configMapDir) update(content string) {
	d.t.Helper()
	d.version++
	v := fmt.Sprintf("..v%d", d.version)
	if err := os.Mkdir(filepath.Join(d.dir, v), 0o755); err != nil {
		d.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d.dir, v, "config.yaml"), []byte(content), 0o644); err != nil {
		d.t.Fatal(err)
	}
	tmp := filepath.Join(d.dir, "..data_tmp")
	if err := os.Symlink(v, tmp); err != nil {
		d.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(d.dir, "..data")); err != nil {
		d.t.Fatal(err)
	}
}

func withScheduler(s string) string {
	return header + "dataplane:\n  ipvs:\n    scheduler: " + s + "\n"
}

// watchSchedulers stands for the dataplane's schedulers, which the
// daemon's Watcher checks every config against.
var watchSchedulers = SchedulerCheck(plugintest.NewSchedulers("rr", "wlc", "lc", "sh", "mh"))

func TestWatcherKeepsLastGood(t *testing.T) {
	d := newConfigMapDir(t, withScheduler("rr"))
	w, err := NewWatcher(d.path(), watchSchedulers)
	if err != nil {
		t.Fatalf("NewWatcher: %v", err)
	}

	// Each step changes the file (or not), polls, and checks what Poll
	// handed over and which config is in force afterwards.
	steps := []struct {
		name      string
		change    func()
		wantNew   string // scheduler of the config Poll returns; "" for none
		wantErr   string // substring of Poll's error; "" for none
		wantInUse string
	}{
		{name: "unchanged", change: func() {}, wantInUse: "rr"},
		{name: "good update", change: func() { d.update(withScheduler("wlc")) }, wantNew: "wlc", wantInUse: "wlc"},
		{name: "same content again", change: func() { d.update(withScheduler("wlc")) }, wantInUse: "wlc"},
		{
			name: "bad update", change: func() { d.update(withScheduler("foo")) },
			wantErr: `line 5: dataplane.ipvs.scheduler: unknown scheduler "foo"`, wantInUse: "wlc",
		},
		{name: "bad reported once", change: func() {}, wantInUse: "wlc"},
		{
			name: "unknown field", change: func() { d.update(withScheduler("sh") + "extra: 1\n") },
			wantErr: `line 6: extra: unknown field "extra"`, wantInUse: "wlc",
		},
		{
			name: "file gone", change: func() { os.Remove(filepath.Join(d.dir, "..data")) },
			wantErr: "no such file or directory", wantInUse: "wlc",
		},
		{name: "gone reported once", change: func() {}, wantInUse: "wlc"},
		{name: "good again", change: func() { d.update(withScheduler("mh")) }, wantNew: "mh", wantInUse: "mh"},
		{
			name:    "v1alpha1 file",
			change:  func() { d.update(headerV1alpha1 + "dataplane:\n  ipvs:\n    scheduler: lc\n    syncPeriod: 1m\n") },
			wantNew: "lc", wantInUse: "lc",
		},
		{
			name:    "v1alpha1 layout in a v1alpha2 file",
			change:  func() { d.update(header + "dataplane:\n  ipvs:\n    scheduler: sh\n    syncPeriod: 1m\n") },
			wantErr: `line 6: dataplane.ipvs.syncPeriod: unknown field "syncPeriod" (switchyard.dev/v1alpha2 has it at dataplane.syncPeriod`, wantInUse: "lc",
		},
		{
			name:    "bad v1alpha1 file",
			change:  func() { d.update(headerV1alpha1 + "dataplane:\n  ipvs:\n    scheduler: fastest\n") },
			wantErr: `line 5: dataplane.ipvs.scheduler: unknown scheduler "fastest" (want rr, wlc, lc, sh, mh)`, wantInUse: "lc",
		},
		{
			name: "bad value at a v1alpha2 place",
			change: func() {
				d.update(header + "dataplane:\n  syncPeriod: 1s\n  minSyncPeriod: 2s\n  ipvs:\n    scheduler: sh\n")
			},
			wantErr: `line 5: dataplane.minSyncPeriod: 2s is longer than syncPeriod 1s`, wantInUse: "lc",
		},
		{
			name:    "good v1alpha2 file",
			change:  func() { d.update(header + "dataplane:\n  syncPeriod: 1m\n  ipvs:\n    scheduler: sh\n") },
			wantNew: "sh", wantInUse: "sh",
		},
	}
	for _, s := range steps {
		s.change()
		got, err := w.Poll()
		gotNew := ""
		if got != nil {
			gotNew = got.Dataplane.IPVS.Scheduler
		}
		if gotNew != s.wantNew {
			t.Errorf("%s: Poll returned config with scheduler %q, want %q", s.name, gotNew, s.wantNew)
		}
		switch {
		case s.wantErr == "" && err != nil:
			t.Errorf("%s: Poll error: %v", s.name, err)
		case s.wantErr != "" && (err == nil || !strings.Contains(err.Error(), s.wantErr)):
			t.Errorf("%s: Poll error = %v, want one containing %q", s.name, err, s.wantErr)
		}
		if in := w.Config().Dataplane.IPVS.Scheduler; in != s.wantInUse {
			t.Errorf("%s: config in use has scheduler %q, want %q", s.name, in, s.wantInUse)
		}
	}
}

func TestNewWatcherRefusesBadConfig(t *testing.T) {
	d := newConfigMapDir(t, withScheduler("foo"))
	_, err := NewWatcher(d.path(), watchSchedulers)
	if err == nil || !strings.Contains(err.Error(), "dataplane.ipvs.scheduler") {
		t.Errorf("NewWatcher(bad) = %v, want an error naming dataplane.ipvs.scheduler", err)
	}
	if _, err := NewWatcher(filepath.Join(t.TempDir(), "missing.yaml"), watchSchedulers); err == nil {
		t.Error("NewWatcher(missing) succeeded")
	}
}

func TestWatcherRun(t *testing.T) {
	d := newConfigMapDir(t, withScheduler("rr"))
	w, err := NewWatcher(d.path(), watchSchedulers)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	changes := make(chan *Config)
	errs := make(chan error)
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Run(ctx, time.Millisecond,
			func(c *Config) { changes <- c },
			func(err error) { errs <- err })
	}()
	// Guards against a hang, not a performance threshold.
	deadline := time.After(30 * time.Second)

	d.update(withScheduler("foo"))
	select {
	case err := <-errs:
		if !strings.Contains(err.Error(), "dataplane.ipvs.scheduler") {
			t.Errorf("onError(%v), want the field named", err)
		}
	case c := <-changes:
		t.Fatalf("bad config handed over: %+v", c.Dataplane.IPVS)
	case <-deadline:
		t.Fatal("no error reported for a bad config")
	}

	d.update(withScheduler("lc"))
	select {
	case c := <-changes:
		if c.Dataplane.IPVS.Scheduler != "lc" {
			t.Errorf("onChange got scheduler %q, want lc", c.Dataplane.IPVS.Scheduler)
		}
	case err := <-errs:
		t.Fatalf("onError(%v) for a good config", err)
	case <-deadline:
		t.Fatal("no change reported for a good config")
	}

	cancel()
	<-done
}

// TestWatcherDeprecation: a v1alpha1 file is read, and the Watcher says
// it deserves a deprecation warning, at start and for each reload that
// reads one; a v1alpha2 file, or a bad file that is refused, deserves
// none (the last good config's warning stays).
func TestWatcherDeprecation(t *testing.T) {
	old := headerV1alpha1 + "dataplane:\n  ipvs:\n    syncPeriod: 20s\n"
	d := newConfigMapDir(t, old)
	w, err := NewWatcher(d.path(), watchSchedulers)
	if err != nil {
		t.Fatal(err)
	}
	want := "apiVersion switchyard.dev/v1alpha1 is deprecated (read and converted): set apiVersion switchyard.dev/v1alpha2 and move " +
		"dataplane.ipvs.syncPeriod, minSyncPeriod, masqueradeAll, clusterCIDRs, nodePortAddresses up to dataplane, as deploy/config.yaml shows"
	if got := w.Deprecation(); got != want {
		t.Errorf("at start: Deprecation() = %q, want %q", got, want)
	}
	steps := []struct {
		name, content string
		want          string
	}{
		{"v1alpha2", header + "dataplane:\n  syncPeriod: 20s\n", ""},
		{"v1alpha1 again", old, want},
		{"a bad v1alpha2 file is refused", header + "dataplane:\n  nope: 1\n", want},
		{"another v1alpha1 file", headerV1alpha1 + "dataplane:\n  ipvs:\n    syncPeriod: 30s\n", want},
		{"v1alpha2 again", header, ""},
	}
	for _, s := range steps {
		d.update(s.content)
		if _, err := w.Poll(); (err != nil) != strings.Contains(s.name, "refused") {
			t.Errorf("%s: Poll() error = %v", s.name, err)
		}
		if got := w.Deprecation(); got != s.want {
			t.Errorf("%s: Deprecation() = %q, want %q", s.name, got, s.want)
		}
	}
	if got := Deprecation([]byte("{not yaml")); got != "" {
		t.Errorf("Deprecation(garbage) = %q, want none", got)
	}
}
