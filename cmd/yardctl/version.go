package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"runtime"

	"github.com/switchyard-lb/switchyard/core/version"
)

var versionCommand = &command{
	name:  "version",
	short: "print yardctl's version",
	long:  "Prints the version yardctl was built from, and the Go version and platform.",
	setup: func(fs *flag.FlagSet) func(context.Context, ioStreams, []string) error {
		output := outputFlag(fs)
		return func(_ context.Context, s ioStreams, args []string) error {
			if err := checkOutput(*output); err != nil {
				return err
			}
			if err := noArgs(args); err != nil {
				return err
			}
			v := struct {
				Version  string `json:"version"`
				Go       string `json:"go"`
				Platform string `json:"platform"`
			}{version.Version, runtime.Version(), runtime.GOOS + "/" + runtime.GOARCH}
			if *output == "json" {
				b, _ := json.Marshal(v)
				_, err := fmt.Fprintf(s.out, "%s\n", b)
				return err
			}
			_, err := fmt.Fprintf(s.out, "yardctl %s (%s, %s)\n", v.Version, v.Go, v.Platform)
			return err
		}
	},
}
