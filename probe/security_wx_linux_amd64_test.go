//go:build linux && amd64

package probe_test

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/probeopt/probeopt/internal/testenv"
	"github.com/probeopt/probeopt/plan"
	"github.com/probeopt/probeopt/probe"
)

// mapsWatch reads /proc/PID/maps over and over until stopped, and keeps
// every mapping it saw writable and executable at once.
type mapsWatch struct {
	pid   int
	stop  chan struct{}
	done  chan struct{}
	mu    sync.Mutex
	scans int
	wx    []string // the offending lines
	seen  map[string]bool
}

func watchMaps(pid int) *mapsWatch {
	w := &mapsWatch{pid: pid, stop: make(chan struct{}), done: make(chan struct{}), seen: map[string]bool{}}
	go w.loop()
	return w
}

func (w *mapsWatch) loop() {
	defer close(w.done)
	for {
		select {
		case <-w.stop:
			return
		default:
		}
		w.scan()
		// Leave the CPU to the program and the tracer between scans.
		time.Sleep(200 * time.Microsecond)
	}
}

func (w *mapsWatch) scan() {
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", w.pid))
	if err != nil {
		time.Sleep(time.Millisecond)
		return
	}
	defer f.Close()
	var wx []string
	names := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 || len(fields[1]) < 3 {
			continue
		}
		if perms := fields[1]; perms[1] == 'w' && perms[2] == 'x' {
			wx = append(wx, sc.Text())
		}
		if len(fields) >= 6 {
			names[fields[5]] = true
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.scans++
	w.wx = append(w.wx, wx...)
	for n := range names {
		w.seen[n] = true
	}
}

// end stops the watch after one last scan.
func (w *mapsWatch) end() {
	close(w.stop)
	<-w.done
	w.scan()
}

// TestNoWritableExecutableMapping traces the fixture with probes of every
// kind, adding and removing some while it runs, in the default mode (most
// sites take trampolines, whose slot areas are mapped in the process) and
// with NoTrampolines (every site traps; XOL slots), and reads
// /proc/PID/maps all along: no mapping may ever be writable and
// executable at once.
func TestNoWritableExecutableMapping(t *testing.T) {
	testenv.NeedPtrace(t)
	exe := traceFixture(t, "tracee")
	// The watch itself sees such a mapping (one of this process's).
	page, err := unix.Mmap(-1, 0, os.Getpagesize(), unix.PROT_READ|unix.PROT_WRITE|unix.PROT_EXEC, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		t.Fatal(err)
	}
	self := &mapsWatch{pid: os.Getpid(), seen: map[string]bool{}}
	self.scan()
	unix.Munmap(page)
	if len(self.wx) == 0 {
		t.Fatal("the watch does not see a writable and executable mapping of this process")
	}
	for _, mode := range []struct {
		name string
		opts probe.Options
	}{
		{"trampolines", probe.Options{}},
		{"no-trampolines", probe.Options{NoTrampolines: true}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			opts := mode.opts
			r := spawn(t, []string{exe, "threads", "2", "400"}, &opts, nil)
			w := watchMaps(r.tr.Pid())
			defer func() {
				select {
				case <-w.stop:
				default:
					w.end()
				}
			}()
			probes, err := r.tr.Add("k_*", "c_sum", "work")
			if err != nil && len(probes) == 0 {
				t.Fatalf("add: %v", err)
			}
			strategies := map[plan.Strategy]int{}
			for _, p := range r.tr.Stats().Probes {
				for _, s := range p.Sites {
					strategies[s.Strategy]++
				}
			}
			tramps := strategies[plan.TrampolineNop] + strategies[plan.TrampolineDetour]
			if opts.NoTrampolines != (tramps == 0) {
				t.Fatalf("strategies %v with NoTrampolines %v", strategies, opts.NoTrampolines)
			}
			// More batches while the program runs: sites added and
			// removed, new slots and trampolines.
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 5; i++ {
					ps, err := r.tr.Add("c_fib", "mix")
					if err != nil || len(ps) == 0 {
						return // the program has ended
					}
					time.Sleep(2 * time.Millisecond)
					if r.tr.Remove(ps...) != nil {
						return
					}
				}
			}()
			r.finish(t, 2*time.Minute)
			wg.Wait()
			w.end()
			w.mu.Lock()
			defer w.mu.Unlock()
			if len(w.wx) > 0 {
				t.Errorf("writable and executable mappings:\n%s", strings.Join(w.wx, "\n"))
			}
			if w.scans < 10 {
				t.Errorf("only %d scans of the maps", w.scans)
			}
			if !opts.NoTrampolines && !w.seen["/memfd:probeopt-data"] {
				t.Errorf("no scan saw the trampolines' data area: the watch missed the tracing (%d scans)", w.scans)
			}
			t.Logf("%d scans, strategies %v", w.scans, strategies)
		})
	}
}
