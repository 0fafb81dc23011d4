package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/probeopt/probeopt/probe"
	"github.com/probeopt/probeopt/proc"
)

// What trace and run share: starting the tracer, letting the process go
// after a failure, and following it until it ends or a signal comes.

// notifyStop relays SIGINT and SIGTERM to the channel it returns until
// stop is called. Signals that arrive while probes are being installed
// wait there: the process is stopped then, and is detached or killed
// afterwards.
func notifyStop() (sigs <-chan os.Signal, stop func()) {
	c := make(chan os.Signal, 2)
	signal.Notify(c, os.Interrupt, syscall.SIGTERM)
	return c, func() { signal.Stop(c) }
}

// startTracer attaches to process pid, or spawns argv (pid 0) with
// probeopt's own standard input, output and error, under opts (nil for
// the defaults); a failure says what the user can do about it.
func startTracer(pid int, argv []string, opts *probe.Options) (*probe.Tracer, error) {
	var tr *probe.Tracer
	var err error
	if pid != 0 {
		tr, err = probe.Attach(pid, opts)
	} else {
		so := &probe.SpawnOptions{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}
		if opts != nil {
			so.Options = *opts
		}
		tr, err = probe.Spawn(argv, so)
	}
	if err != nil {
		return nil, traceStartError(err, pid)
	}
	return tr, nil
}

// abandonTracer lets the process go after a failure, leaving no probe
// behind: an attached process (pid != 0) is detached, and what is left
// in it said on stderr (sayLeft); a spawned one is killed.
func abandonTracer(tr *probe.Tracer, pid int, stderr io.Writer) {
	if pid == 0 {
		tr.Kill()
		return
	}
	err := tr.Detach()
	if err != nil {
		fmt.Fprintf(stderr, "probeopt: detach: %v\n", err)
	}
	sayLeft(stderr, pid, err)
}

// sayLeft writes on w what is left in process pid, which probeopt has
// detached (detachErr: how the detach failed, nil if it did not): a line
// when nothing is, else the text that differs from the files and the
// areas, and for a failed detach that the process's guardian restores
// what it recorded once probeopt exits.
func sayLeft(w io.Writer, pid int, detachErr error) {
	lb, err := probe.Leftover(pid)
	switch {
	case errors.Is(err, proc.ErrNoProcess):
		fmt.Fprintf(w, "probeopt: process %d is gone\n", pid)
		return
	case err != nil:
		fmt.Fprintf(w, "probeopt: left in process %d: cannot tell: %v\n", pid, err)
	default:
		// One line each, as every line of probeopt's on stderr.
		fmt.Fprintf(w, "probeopt: left in process %d: %s\n", pid, strings.ReplaceAll(lb.String(), "\n", "\nprobeopt: "))
	}
	if detachErr != nil {
		fmt.Fprintf(w, "probeopt: process %d's guardian restores the sites it recorded once probeopt exits\n", pid)
	}
}

// warnRefused writes a warning for every site of the tracer's probes
// that was refused, with its reason.
func warnRefused(w io.Writer, tr *probe.Tracer) {
	for _, p := range tr.Stats().Probes {
		for _, r := range p.Refused {
			fmt.Fprintf(w, "probeopt: warning: %v\n", &r)
		}
	}
}

// awaitExitOrSignal waits until the process exits or a signal comes on
// sigs; on a signal it removes the probes and detaches (a failure of the
// detach is written to stderr), and detached is true.
func awaitExitOrSignal(tr *probe.Tracer, sigs <-chan os.Signal, stderr io.Writer) (detached bool) {
	select {
	case <-tr.Exited():
		return false
	case s := <-sigs:
		fmt.Fprintf(stderr, "probeopt: %v: removing the probes and detaching\n", s)
		err := tr.Detach()
		if errors.Is(err, probe.ErrClosed) {
			return true
		}
		if err != nil {
			fmt.Fprintf(stderr, "probeopt: detach: %v\n", err)
		}
		sayLeft(stderr, tr.Pid(), err)
		return true
	}
}
