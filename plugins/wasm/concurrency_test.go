package wasm_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-lb/switchyard/plugins/wasm"
)

// TestCallsRunInParallel proves that nothing serialises guest calls: as
// many calls as the policy has instances are inside the guest at once.
// Each call's guest logs (mode "log"), and the log sink, which guest calls
// reach from inside sy_evaluate, waits until that many are inside it.
func TestCallsRunInParallel(t *testing.T) {
	const callers = 4
	const wait = 30 * time.Second // only reached when the calls do not overlap
	var (
		mu      sync.Mutex
		inside  int
		most    int
		all     = make(chan struct{})
		release sync.Once
	)
	waitCtx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	sink := func(wasm.LogRecord) {
		mu.Lock()
		inside++
		most = max(most, inside)
		if inside == callers {
			release.Do(func() { close(all) })
		}
		mu.Unlock()
		select {
		case <-all:
		case <-waitCtx.Done():
		}
		mu.Lock()
		inside--
		mu.Unlock()
	}
	r := newRuntime(t, wasm.Config{Log: sink, LogBurst: 1000, MaxInstances: callers, Deadline: 2 * wait})
	p := load(t, r, "hostile")
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for range callers {
		wg.Go(func() {
			if _, err := p.Evaluate(context.Background(), input(3, "log")); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	select {
	case <-all:
	default:
		t.Errorf("at most %d of %d calls were inside the guest at once", most, callers)
	}
}
