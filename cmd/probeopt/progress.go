package main

import (
	"fmt"
	"io"
	"os"
	"time"
)

// isTerminal reports whether w is a file open on a terminal, where a
// progress line can be redrawn in place. Other character devices such as
// /dev/null are not, nor are pipes and regular files. The check does not
// change the file's blocking mode (as (*os.File).Fd would).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return false
	}
	term := false
	if err := rc.Control(func(fd uintptr) { term = isTerminalFd(fd) }); err != nil {
		return false
	}
	return term
}

// progress draws "label: done/total unit (percent)" on one terminal line, at
// most ten times a second. A nil *progress does nothing, so callers need not
// check.
type progress struct {
	w     io.Writer
	label string
	unit  string
	total int
	last  time.Time
	drawn bool
}

func newProgress(w io.Writer, label, unit string, total int) *progress {
	return &progress{w: w, label: label, unit: unit, total: total}
}

// update records that done items are finished.
func (p *progress) update(done int) {
	if p == nil {
		return
	}
	if now := time.Now(); now.Sub(p.last) >= 100*time.Millisecond {
		p.last = now
		p.drawn = true
		fmt.Fprintf(p.w, "\r%s: %d/%d %s (%d%%)", p.label, done, p.total, p.unit, 100*done/max(p.total, 1))
	}
}

// done erases the progress line.
func (p *progress) done() {
	if p == nil || !p.drawn {
		return
	}
	fmt.Fprint(p.w, "\r\033[K")
	p.drawn = false
}
