package main

import (
	"bytes"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/probeopt/probeopt/internal/fixture"
	"golang.org/x/sys/unix"
)

// openPty opens a pseudo-terminal pair: the controlling side and the
// terminal a program would write to. Both are closed when the test ends.
func openPty(t *testing.T) (ctl, term *os.File) {
	t.Helper()
	fd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open /dev/ptmx: %v", err)
	}
	ctl = os.NewFile(uintptr(fd), "/dev/ptmx")
	t.Cleanup(func() { ctl.Close() })
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlock pty: %v", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("pty number: %v", err)
	}
	name := "/dev/pts/" + strconv.Itoa(n)
	term, err = os.OpenFile(name, os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open %s: %v", name, err)
	}
	t.Cleanup(func() { term.Close() })
	return ctl, term
}

// TestIsTerminalPty checks that both sides of a pseudo-terminal are
// terminals.
func TestIsTerminalPty(t *testing.T) {
	ctl, term := openPty(t)
	if !isTerminal(term) {
		t.Errorf("%s: not a terminal", term.Name())
	}
	if !isTerminal(ctl) {
		t.Errorf("%s: not a terminal", ctl.Name())
	}
}

// TestScanProgressTerminal runs scan on two files: the progress line is
// drawn and erased when stderr is a terminal, and absent on a pipe.
func TestScanProgressTerminal(t *testing.T) {
	files := []string{fixture.Path(t, "x86_64", "usdt-pie"), fixture.Path(t, "x86_64", "funcs-pie")}
	args := append([]string{"scan", "--summary"}, files...)

	ctl, term := openPty(t)
	got := make(chan string, 1)
	go func() {
		// Reading the controlling side ends with EIO once the terminal
		// side is closed.
		b, _ := io.ReadAll(ctl)
		got <- string(b)
	}()
	var stdout bytes.Buffer
	code := run(args, &stdout, term)
	term.Close()
	out := <-got
	if !strings.Contains(out, "\rscan: 0/2 files (0%)") || !strings.Contains(out, "\r\033[K") {
		t.Errorf("terminal: exit %d, no progress line drawn and erased: %q", code, out)
	}

	r, w := fixture.Pipe(t)
	defer r.Close()
	go func() {
		b, _ := io.ReadAll(r)
		got <- string(b)
	}()
	code = run(args, &stdout, w)
	w.Close()
	if out := <-got; strings.Contains(out, "scan: ") {
		t.Errorf("pipe: exit %d, progress drawn: %q", code, out)
	}
}
