//go:build wasip1

package main

import "github.com/switchyard-lb/switchyard/wasm-sdk/go/policy"

func evaluate(in *policy.Input, out *policy.Output) error {
	params := in.Params()
	windowSec, err := policy.ParamUint(params, "windowSec", 60)
	if err != nil {
		return err
	}
	weight, err := policy.ParamUint(params, "weight", 100)
	if err != nil {
		return err
	}
	full := uint64(min(weight, policy.MaxWeight))
	window := uint64(windowSec) * 1000
	ramping := false
	for i := range in.Len() {
		e := in.Endpoint(i)
		if !in.Usable(i) {
			continue
		}
		w := full
		ageNs, known := e.Age()
		if ageMs := ageNs / 1e6; window > 0 && known && ageMs < window {
			ramping = true
			w = full * ageMs / window
			if w == 0 && full > 0 {
				w = 1
			}
		}
		out.SetWeight(i, uint32(w))
	}
	out.SetScheduler("wrr")
	if ramping {
		out.SetReevaluate(1000)
	}
	return nil
}

func init() { policy.Register(evaluate) }

func main() {}
