//go:build !linux

package ipvs

import "errors"

// nlBatch sends IPVS commands in batches: Linux only.
type nlBatch struct{}

func newNLBatch() (*nlBatch, error) { return nil, errors.New("ipvs: batches need Linux") }

func (*nlBatch) close() error { return nil }

func (*nlBatch) run(cmds []Command, errs []error, describe func(Command, error) error) int {
	for i, c := range cmds {
		if errs[i] == nil {
			errs[i] = describe(c, errors.ErrUnsupported)
		}
	}
	return 0
}
