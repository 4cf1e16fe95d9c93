package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/switchyard-lb/switchyard/plugins/scenario"
	"github.com/switchyard-lb/switchyard/plugins/wasm"
)

// Exit statuses.
const (
	exitOK    = 0
	exitError = 1 // the command failed
	exitUsage = 2 // the command line is wrong
)

// command is one yardctl subcommand.
type command struct {
	name  string
	short string // one line for the command list
	usage string // arguments after the name, for the usage line
	long  string // paragraph for --help
	// flags declares the command's flags on fs, returning what run reads.
	setup func(fs *flag.FlagSet) func(ctx context.Context, io ioStreams, args []string) error
}

type ioStreams struct {
	out, err io.Writer
}

// usageError is a wrong command line: it exits with exitUsage.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// commands is every subcommand, in the order help lists them.
var commands = []*command{policyCommand, stateCommand, versionCommand}

func findCommand(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

// run runs yardctl with args and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	streams := ioStreams{out: stdout, err: stderr}
	err := dispatch(ctx, args, streams)
	var ue usageError
	var je jsonError
	var re reportedError
	code := exitError
	switch {
	case err == nil || errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.As(err, &ue):
		code = exitUsage
		fmt.Fprintf(stderr, "yardctl: %s (see yardctl --help)\n", oneLine(err.Error()))
	case keepsLines(err):
		fmt.Fprintf(stderr, "yardctl: %s\n", strings.TrimRight(err.Error(), "\n"))
	default:
		fmt.Fprintf(stderr, "yardctl: %s\n", oneLine(err.Error()))
	}
	if errors.As(err, &je) && !errors.As(err, &re) {
		_ = writeJSON(stdout, struct {
			Error    string `json:"error"`
			ExitCode int    `json:"exitCode"`
		}{strings.TrimRight(je.err.Error(), "\n"), code})
	}
	return code
}

// linesError is an error whose lines mean something (a list of
// differences): run prints it as it is instead of on one line.
type linesError struct{ err error }

func (e linesError) Error() string { return e.err.Error() }
func (e linesError) Unwrap() error { return e.err }

// keepsLines says whether err is printed on several lines: a scenario
// parse error (with its excerpt of the file), a trap (with its wasm stack
// trace, one function a line) or a linesError.
func keepsLines(err error) bool {
	var le linesError
	var se *scenario.Error
	return errors.As(err, &le) || errors.As(err, &se) || errors.Is(err, wasm.ErrTrap)
}

// jsonError is the error of a command run with -o json: run prints it on
// stdout as {"error": ..., "exitCode": ...} too, so scripts reading the
// JSON see the failure.
type jsonError struct{ err error }

func (e jsonError) Error() string { return e.err.Error() }
func (e jsonError) Unwrap() error { return e.err }

// withOutput marks err as a JSON error when fs's -o flag asks for JSON.
func withOutput(fs *flag.FlagSet, err error) error {
	if err == nil {
		return nil
	}
	if f := fs.Lookup("o"); f != nil && f.Value.String() == "json" {
		return jsonError{err}
	}
	return err
}

func dispatch(ctx context.Context, args []string, streams ioStreams) error {
	if len(args) == 0 {
		mainUsage(streams.err)
		return usageError{"no command given"}
	}
	name := args[0]
	switch name {
	case "-h", "-help", "--help":
		mainUsage(streams.out)
		return nil
	case "help":
		if len(args) == 1 {
			mainUsage(streams.out)
			return nil
		}
		c := findCommand(args[1])
		if c == nil {
			return usageError{fmt.Sprintf("unknown command %q", args[1])}
		}
		fs, _ := c.flagSet(streams.out)
		fs.Usage()
		return nil
	}
	c := findCommand(name)
	if c == nil {
		return usageError{fmt.Sprintf("unknown command %q", name)}
	}
	fs, runFn := c.flagSet(streams.err)
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err.Error()}
	}
	return withOutput(fs, runFn(ctx, streams, fs.Args()))
}

// flagSet returns the command's flags, printing errors and --help to w.
func (c *command) flagSet(w io.Writer) (*flag.FlagSet, func(context.Context, ioStreams, []string) error) {
	fs := flag.NewFlagSet("yardctl "+c.name, flag.ContinueOnError)
	fs.SetOutput(w)
	runFn := c.setup(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: yardctl %s%s\n\n%s\n", c.name, c.usage, c.long)
		var hasFlags bool
		fs.VisitAll(func(*flag.Flag) { hasFlags = true })
		if hasFlags {
			fmt.Fprintf(fs.Output(), "\nFlags:\n")
			fs.PrintDefaults()
		}
	}
	return fs, runFn
}

func mainUsage(w io.Writer) {
	fmt.Fprintf(w, "yardctl: Switchyard's command-line tool.\n\nUsage: yardctl <command> [flags]\n\nCommands:\n")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.short)
	}
	fmt.Fprintf(w, "\nRun 'yardctl <command> --help' for a command's flags.\n")
}

// outputFlag declares -o; "text" (the default) or "json".
func outputFlag(fs *flag.FlagSet) *string {
	return fs.String("o", "text", "output format: text or json")
}

func checkOutput(o string) error {
	if o != "text" && o != "json" {
		return usageError{fmt.Sprintf("unknown output format %q (want text or json)", o)}
	}
	return nil
}

func noArgs(args []string) error {
	if len(args) > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q", args[0])}
	}
	return nil
}

// oneLine folds a multi-line message onto one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
