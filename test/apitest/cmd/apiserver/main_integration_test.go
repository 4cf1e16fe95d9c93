//go:build integration

package main

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// TestIntegrationRun runs the command as make demo does: it must print the
// kubeconfig path once ready, serve, and stop cleanly when cancelled.
func TestIntegrationRun(t *testing.T) {
	if os.Getenv("SWITCHYARD_KUBE_BIN") == "" {
		t.Fatal("SWITCHYARD_KUBE_BIN is unset: run test/tools/kube-binaries.sh")
	}
	dir := filepath.Join(t.TempDir(), "kube")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-dir", dir}, pw, slog.New(slog.DiscardHandler))
		pw.Close()
	}()

	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("no kubeconfig path printed: %v (run: %v)", err, <-done)
	}
	go io.Copy(io.Discard, pr)
	if got, want := strings.TrimSpace(line), filepath.Join(dir, "kubeconfig"); got != want {
		t.Errorf("printed %q, want %q", got, want)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dir, "kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Namespaces().Get(t.Context(), "default", metav1.GetOptions{}); err != nil {
		t.Errorf("get namespace default with the printed kubeconfig: %v", err)
	}

	cancel()
	if err := <-done; err != nil {
		t.Errorf("run after cancel: %v", err)
	}
	if _, err := client.CoreV1().Namespaces().Get(t.Context(), "default", metav1.GetOptions{}); err == nil {
		t.Error("API server still answers after run returned")
	}
}
