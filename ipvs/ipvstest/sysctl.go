package ipvstest

import (
	"fmt"
	"maps"
	"strings"
	"sync"

	"github.com/switchyard-lb/switchyard/ipvs"
)

// FakeSysctls is an in-memory ipvs.Sysctls. Like /proc/sys, it only knows
// the parameters it was created with: others are ipvs.ErrNotFound.
type FakeSysctls struct {
	mu     sync.Mutex
	values map[string]string
}

var _ ipvs.Sysctls = (*FakeSysctls)(nil)

// NewFakeSysctls returns a fake holding a copy of initial.
func NewFakeSysctls(initial map[string]string) *FakeSysctls {
	return &FakeSysctls{values: maps.Clone(initial)}
}

func (f *FakeSysctls) Get(name string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.values[name]
	if !ok {
		return "", fmt.Errorf("ipvstest: read sysctl %s: %w", name, ipvs.ErrNotFound)
	}
	return v, nil
}

func (f *FakeSysctls) Set(name, value string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.values[name]; !ok {
		return fmt.Errorf("ipvstest: write sysctl %s: %w", name, ipvs.ErrNotFound)
	}
	f.values[name] = strings.TrimSpace(value)
	return nil
}

// Values returns a copy of every parameter.
func (f *FakeSysctls) Values() map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.values)
}
