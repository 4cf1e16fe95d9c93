package config

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"sync"
	"time"
)

// Watcher keeps the last good config of a file and notices when the
// file's content changes. It compares a hash of the content, so it follows
// a ConfigMap volume's symlink swap as well as an in-place write.
// It is safe for concurrent use.
type Watcher struct {
	path   string
	checks []Check

	mu      sync.Mutex
	current *Config
	// deprecation is Deprecation of current's file.
	deprecation string
	// seen is the hash of the content last looked at, good or bad, so that
	// a bad file is reported once rather than on every poll.
	seen [sha256.Size]byte
	// lastErr is the text of the last read failure, reported once.
	lastErr string
}

// NewWatcher loads the config at path; it fails when the file is
// unreadable or invalid, so a daemon never starts on a bad config. Every
// config it reads is parsed with checks (Parse), at start and on change.
func NewWatcher(path string, checks ...Check) (*Watcher, error) {
	c, data, err := load(path, checks...)
	if err != nil {
		return nil, err
	}
	return &Watcher{path: path, checks: checks, current: c, deprecation: Deprecation(data), seen: sha256.Sum256(data)}, nil
}

// Deprecation returns the warning the file of the last good config
// deserves (the package's Deprecation), "" when its format is current.
func (w *Watcher) Deprecation() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.deprecation
}

// Config returns the last good config.
func (w *Watcher) Config() *Config {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.current
}

// Poll re-reads the file. It returns the new config when the content
// changed and is valid (it becomes the last good one); an error when the
// content changed and is invalid, or the file became unreadable (the last
// good config stays); and nil, nil when nothing changed or the problem was
// already reported.
func (w *Watcher) Poll() (*Config, error) {
	data, err := os.ReadFile(w.path)
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		if msg := err.Error(); msg != w.lastErr {
			w.lastErr = msg
			return nil, fmt.Errorf("read config: %w", err)
		}
		return nil, nil
	}
	w.lastErr = ""
	sum := sha256.Sum256(data)
	if bytes.Equal(sum[:], w.seen[:]) {
		return nil, nil
	}
	w.seen = sum
	c, err := Parse(data, w.checks...)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", w.path, err)
	}
	w.current, w.deprecation = c, Deprecation(data)
	return c, nil
}

// Run polls every interval until ctx is done, calling onChange with each
// new good config and onError with each new problem. Both are called from
// Run's goroutine.
func (w *Watcher) Run(ctx context.Context, interval time.Duration, onChange func(*Config), onError func(error)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c, err := w.Poll()
		switch {
		case err != nil:
			onError(err)
		case c != nil:
			onChange(c)
		}
	}
}
