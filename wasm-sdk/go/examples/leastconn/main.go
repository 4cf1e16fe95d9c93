//go:build wasip1

package main

import "github.com/switchyard-lb/switchyard/wasm-sdk/go/policy"

func evaluate(in *policy.Input, out *policy.Output) error {
	scale, err := policy.ParamUint(in.Params(), "scale", 10000)
	if err != nil {
		return err
	}
	scale = min(scale, policy.MaxWeight)
	ready := anyReady(in)
	for i := range in.Len() {
		e := in.Endpoint(i)
		if !usable(e, ready) {
			continue
		}
		w := uint32(uint64(scale) / (1 + uint64(e.ActiveConns())))
		if w == 0 && scale > 0 {
			w = 1
		}
		out.SetWeight(i, w)
	}
	out.SetScheduler("wrr")
	out.SetReevaluate(5000)
	return nil
}

func anyReady(in *policy.Input) bool {
	for i := range in.Len() {
		if in.Endpoint(i).Ready() {
			return true
		}
	}
	return false
}

// usable: the ready endpoints, or when none is ready, the serving
// terminating ones.
func usable(e policy.Endpoint, anyReady bool) bool {
	if anyReady {
		return e.Ready()
	}
	return e.Serving() && e.Terminating()
}

func init() { policy.Register(evaluate) }

func main() {}
