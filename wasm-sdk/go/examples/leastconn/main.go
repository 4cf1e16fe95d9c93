//go:build wasip1

package main

import "github.com/switchyard-lb/switchyard/wasm-sdk/go/policy"

func evaluate(in *policy.Input, out *policy.Output) error {
	scale, err := policy.ParamUint(in.Params(), "scale", 10000)
	if err != nil {
		return err
	}
	scale = min(scale, policy.MaxWeight)
	for i := range in.Len() {
		e := in.Endpoint(i)
		if !in.Usable(i) {
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

func init() { policy.Register(evaluate) }

func main() {}
