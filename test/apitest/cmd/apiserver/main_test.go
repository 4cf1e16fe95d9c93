package main

import (
	"io"
	"log/slog"
	"strings"
	"testing"
)

func TestRunWithoutBinaries(t *testing.T) {
	t.Setenv("SWITCHYARD_KUBE_BIN", "")
	err := run(t.Context(), []string{"-dir", t.TempDir()}, io.Discard, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "kube-binaries.sh") {
		t.Fatalf("run without binaries: err = %v, want one naming test/tools/kube-binaries.sh", err)
	}
}

func TestRunBadFlag(t *testing.T) {
	if err := run(t.Context(), []string{"-nosuchflag"}, io.Discard, slog.New(slog.DiscardHandler)); err == nil {
		t.Fatal("run with an unknown flag succeeded")
	}
}
