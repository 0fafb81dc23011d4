// Command vm runs one command in the arm64 Linux guest of package
// internal/vm/guest and exits with its status:
//
//	go run ./internal/vm [flags] -- CMD [ARGS]...
//
// Each --file is put in the guest's working directory (/root) under its
// base name, executable bits kept; CMD runs there as root, with busybox's
// tools on PATH and proc, sys, tracefs and debugfs mounted. Its standard
// output and error are printed as they arrive. A guest that hangs past
// --timeout, panics, or cannot be booted is an error: the console log is
// printed and the exit status is 125.
//
// Flags:
//
//	--file PATH      a host file to put in the working directory (repeatable)
//	--env NAME=VALUE an environment variable of CMD (repeatable)
//	--timeout D      bound on the whole run, boot included (default 5m)
//	--kernel PATH    the arm64 kernel image (default: newest /boot/vmlinuz-*-arm64)
//	--memory MIB     the guest's memory in MiB (default 2048)
//	--console        also print the kernel's console lines on standard error
//	--times          print the boot and total times on standard error
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"

	"github.com/probeopt/probeopt/internal/vm/guest"
)

// guestFailed is the exit status when the guest, not the command, failed.
const guestFailed = 125

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(s string) error { *l = append(*l, s); return nil }

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("vm", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: go run ./internal/vm [flags] -- CMD [ARGS]...\n\n"+
			"Boots the arm64 Linux guest under qemu-system-aarch64, runs CMD there as root\n"+
			"in /root with the files, prints its output and exits with its status\n"+
			"(125 when the guest itself failed: the console log is printed).\n\nFlags:")
		fs.PrintDefaults()
	}
	var files, env list
	o := &guest.Options{Stdout: os.Stdout, Stderr: os.Stderr}
	fs.Var(&files, "file", "a host `PATH` to put in the guest's working directory under its base name (repeatable)")
	fs.Var(&env, "env", "an environment variable `NAME=VALUE` of the command (repeatable)")
	fs.DurationVar(&o.Timeout, "timeout", guest.DefaultTimeout, "bound on the whole run, boot included")
	fs.StringVar(&o.Kernel, "kernel", "", "the arm64 kernel image `PATH` (default: the newest /boot/vmlinuz-*-arm64)")
	fs.IntVar(&o.Memory, "memory", 2048, "the guest's memory in `MiB`")
	console := fs.Bool("console", false, "also print the kernel's console lines on standard error")
	times := fs.Bool("times", false, "print the boot and total times on standard error")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	cmd := fs.Args()
	if len(cmd) == 0 {
		fs.Usage()
		return 2
	}
	for _, e := range env {
		if !strings.Contains(e, "=") {
			fmt.Fprintf(os.Stderr, "vm: --env %q: want NAME=VALUE\n", e)
			return 2
		}
	}
	for _, f := range files {
		st, err := os.Stat(f)
		if err == nil && !st.Mode().IsRegular() {
			err = fmt.Errorf("%s: not a regular file", f)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "vm: --file: %v\n", err)
			return 2
		}
	}
	o.Files, o.Env = files, env
	if *console {
		o.Console = os.Stderr
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	res, err := guest.Run(ctx, cmd, o)
	if res != nil && *times {
		fmt.Fprintf(os.Stderr, "vm: boot %v, total %v\n", res.Boot.Round(1e6), res.Total.Round(1e6))
	}
	var ge *guest.GuestError
	if errors.As(err, &ge) {
		// The output so far was printed as it came.
		ge.Stdout, ge.Stderr = nil, nil
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "vm: %v\n", err)
		return guestFailed
	}
	return res.ExitCode
}
