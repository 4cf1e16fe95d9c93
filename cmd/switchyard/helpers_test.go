package main

import (
	"fmt"

	"github.com/switchyard-lb/switchyard/test/harness"
)

// The parts of the daemon harness every daemon-level suite shares
// (test/harness), under this package's names. daemonProc is one daemon a
// test runs in a goroutine (harness.Go: run, as main runs it, or
// runDaemon).
type (
	syncBuffer = harness.Buffer
	daemonProc = harness.Daemon
)

var (
	httpGet  = harness.Get
	poll     = harness.Poll
	goDaemon = harness.Go
)

// testConfig is a config with the servers on free loopback ports
// (harness.WriteConfig).
type testConfig = harness.Config

var writeTestConfig = harness.WriteConfig

// debugState is the part of /debug/state the tests read.
type debugState struct {
	Node      string `json:"node"`
	Synced    bool   `json:"synced"`
	LastError string `json:"lastError"`
	Desired   []struct {
		Service         string `json:"service"`
		Rejected        string `json:"rejected"`
		VirtualServices []struct {
			Protocol     string `json:"protocol"`
			Address      string `json:"address"`
			Kind         string `json:"kind"`
			Scheduler    string `json:"scheduler"`
			Destinations []struct {
				Address string `json:"address"`
			} `json:"destinations"`
		} `json:"virtualServices"`
	} `json:"desired"`
}

func getState(metricsAddr string) (*debugState, error) {
	var st debugState
	if err := harness.DebugState(metricsAddr, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// vsSummary flattens a state's virtual services into comparable strings
// "service proto address scheduler -> destinations".
func vsSummary(st *debugState) []string {
	var out []string
	for _, s := range st.Desired {
		for _, vs := range s.VirtualServices {
			line := fmt.Sprintf("%s %s %s %s %s ->", s.Service, vs.Kind, vs.Protocol, vs.Address, vs.Scheduler)
			for _, d := range vs.Destinations {
				line += " " + d.Address
			}
			out = append(out, line)
		}
	}
	return out
}
