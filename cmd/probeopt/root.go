package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
)

// Exit statuses of the probeopt command.
const (
	exitOK     = 0 // everything asked for was done
	exitFailed = 1 // some inputs failed (reported on stderr or in the JSON "error" field)
	exitUsage  = 2 // the command line was wrong: unknown command or flag, bad flag value, missing argument
)

// usageError marks a mistake in the command line. It makes the exit status 2
// and adds a hint about --help to the message.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// usagef returns a usageError with a formatted message.
func usagef(format string, args ...any) error {
	return &usageError{fmt.Errorf(format, args...)}
}

// runError marks an error that happened while a command ran, after its
// command line was accepted. It makes the exit status 1.
type runError struct{ err error }

func (e *runError) Error() string { return e.err.Error() }
func (e *runError) Unwrap() error { return e.err }

// errReported is returned by a command that has already reported every
// failure itself (one message per failed input): the exit status is 1 and
// nothing more is printed.
var errReported = errors.New("some inputs failed")

// exitCodeError ends the command with status code, everything having been
// reported: trace exits with the status of the command it ran.
type exitCodeError struct{ code int }

func (e *exitCodeError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// runE adapts a command body so that its errors count as run-time failures
// (exit status 1) unless they are usage errors. Errors that cobra returns on
// its own (unknown command or flag, wrong number of arguments) never pass
// through here and count as usage errors.
func runE(f func(cmd *cobra.Command, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		err := f(cmd, args)
		var ue *usageError
		var ec *exitCodeError
		if err == nil || errors.As(err, &ue) || errors.Is(err, errReported) || errors.As(err, &ec) {
			return err
		}
		return &runError{err}
	}
}

// writeReport writes a command's report to w: rep as one line of JSON when
// asJSON is set (--json), otherwise what print writes.
func writeReport(w io.Writer, asJSON bool, rep any, print func() error) error {
	if asJSON {
		if err := json.NewEncoder(w).Encode(rep); err != nil {
			return fmt.Errorf("write JSON: %w", err)
		}
		return nil
	}
	if err := print(); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	return nil
}

// argsRange returns an argument validator that accepts between lo and hi
// positional arguments (hi < 0: no upper bound); want describes them for the
// message, such as "HEX" or "PATH". Its complaints are usage errors.
func argsRange(lo, hi int, want string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		switch {
		case len(args) < lo:
			return usagef("%s: missing %s argument", cmd.Name(), want)
		case hi == 0 && len(args) > 0:
			return usagef("%s takes no arguments, got %q", cmd.Name(), args)
		case hi >= 0 && len(args) > hi:
			return usagef("%s takes at most %d %s argument, got %d", cmd.Name(), hi, want, len(args))
		}
		return nil
	}
}

// groupCmd makes c, a command that only groups subcommands, print its help
// when it is run without arguments and reject any argument as an unknown
// subcommand: a usage error naming it, with the subcommands it may be a
// misspelling of. (Left alone, cobra prints the help of such a command and
// succeeds, except for the root, where its suggestions span several lines.)
func groupCmd(c *cobra.Command) *cobra.Command {
	c.Args = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return nil
		}
		return unknownCommand(cmd, args[0])
	}
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		return cmd.Help()
	}
	return c
}

// unknownCommand returns the usage error for name, which is no subcommand
// of cmd.
func unknownCommand(cmd *cobra.Command, name string) error {
	msg := fmt.Sprintf("unknown command %q for %q", name, cmd.CommandPath())
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2 // cobra's default, which it sets on the root only
	}
	if s := cmd.SuggestionsFor(name); len(s) > 0 {
		msg += "; did you mean " + strings.Join(s, " or ") + "?"
	}
	return &usageError{errors.New(msg)}
}

// newRootCmd builds the whole command tree. Each call returns a fresh tree,
// so tests can run commands in-process without sharing flag state.
func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "probeopt",
		Short: "Decode instructions and find how to probe them, on x86-64 and arm64 Linux",
		Long: `probeopt decodes x86-64 and arm64 machine instructions exactly enough to
probe them, scans ELF binaries for probe sites (function entries, USDT
probes), and says how each site would be probed: what Linux uprobes would do
with it, and the best strategy probeopt supports (emulate, single-step out
of line, a trampoline, or reject), with a reason.

Exit status: 0 when everything asked for was done; 1 when some inputs failed
(each failure is reported on stderr, or in the "error" field with --json);
2 on a usage error (unknown command or flag, bad flag value, missing argument).`,
		SilenceErrors: true,
		SilenceUsage:  true,
		CompletionOptions: cobra.CompletionOptions{
			DisableDefaultCmd: true,
		},
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return &usageError{err}
	})
	groupCmd(root)
	// The usage line of a group is its subcommand line alone: it runs only
	// to print its help.
	root.SetUsageTemplate(strings.Replace(root.UsageTemplate(), "{{if .Runnable}}", "{{if and .Runnable (not .HasAvailableSubCommands)}}", 1))
	root.AddCommand(
		newBenchCmd(),
		newDecodeCmd(),
		newExplainCmd(),
		newFuzzCmd(),
		newRunCmd(),
		newScanCmd(),
		newTraceCmd(),
		newVersionCmd(),
		newGendocsCmd(),
	)
	return root
}

// run executes the command line args (without the program name) and returns
// the exit status. Output goes to stdout, messages and errors to stderr.
func run(args []string, stdout, stderr io.Writer) int {
	if args == nil {
		args = []string{} // a nil slice would make cobra read os.Args
	}
	root := newRootCmd()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteC()
	return exitStatus(cmd, err, stderr)
}

// exitStatus reports err (if it has not been reported yet) and maps it to
// an exit status.
func exitStatus(cmd *cobra.Command, err error, stderr io.Writer) int {
	if err == nil {
		return exitOK
	}
	if errors.Is(err, errReported) {
		return exitFailed
	}
	var ec *exitCodeError
	if errors.As(err, &ec) {
		return ec.code
	}
	var re *runError
	if errors.As(err, &re) {
		fmt.Fprintf(stderr, "probeopt: %v\n", err)
		return exitFailed
	}
	path := "probeopt"
	if cmd != nil {
		path = cmd.CommandPath()
	}
	fmt.Fprintf(stderr, "probeopt: %v\nRun '%s --help' for usage.\n", err, path)
	return exitUsage
}
