package probe

import (
	"fmt"
	"strings"

	"github.com/probeopt/probeopt/internal/textfile"
)

// LeftBehind is what tracers left in a process they no longer trace: text
// that differs from the files it is mapped from, and areas of probeopt's
// (any tracer's, recognised by their headers and names) still mapped.
// After a clean Detach there is none, but on arm64, where the areas stay
// mapped (see the package doc); after a tracer's death, none once its
// guardian has restored the process. A kernel uprobe's int3 (another
// tool's) or a program that rewrites its own text shows as a difference
// too.
type LeftBehind struct {
	Pid   int
	Files int        // the files whose executable mappings were compared
	Text  []TextDiff // the runs of text that differ from the files
	Areas []LeftArea
}

// TextDiff is a run of a process's text that differs from its file.
type TextDiff = textfile.Diff

// LeftArea is an area of probeopt's mapped in a process.
type LeftArea struct {
	Addr, Size uint64
	Kind       string // "slots", "thread table", "data" or "trap guard"
}

// Leftover reads what tracers left in process pid: it compares the text
// of every file the process maps executable with the file, and looks for
// probeopt's areas. The process is not stopped (it needs the access to its
// memory that ptrace needs), and no tracer may be changing it meanwhile.
func Leftover(pid int) (*LeftBehind, error) { return leftover(pid) }

// Empty reports whether nothing is left.
func (l *LeftBehind) Empty() bool { return len(l.Text) == 0 && len(l.Areas) == 0 }

// String says what is left in a line each, or that nothing is.
func (l *LeftBehind) String() string {
	if l.Empty() {
		return fmt.Sprintf("nothing: the text of %d files as in the files, no area of probeopt's", l.Files)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d runs of text that differ from their files, %d areas of probeopt's", len(l.Text), len(l.Areas))
	for _, d := range l.Text {
		fmt.Fprintf(&b, "\n  %v", d)
	}
	for _, a := range l.Areas {
		fmt.Fprintf(&b, "\n  %s area at %#x, %d bytes", a.Kind, a.Addr, a.Size)
	}
	return b.String()
}
