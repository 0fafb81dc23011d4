//go:build linux

package plan_test

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/probeopt/probeopt/elfscan"
	"github.com/probeopt/probeopt/internal/fixture"
	"github.com/probeopt/probeopt/internal/testenv"
	"github.com/probeopt/probeopt/plan"
	"github.com/probeopt/probeopt/proc"
	"github.com/probeopt/probeopt/trampoline"
)

// switchFuncs are the functions of testdata/jumptab/switches.c with a
// switch compiled to a jump table.
var switchFuncs = []string{"dense", "offset", "sparse", "bytes", "run", "two"}

// switchBuilds are the builds of switches.c the recovery is checked on.
func switchBuilds() []fixture.Program {
	var out []fixture.Program
	for _, cc := range []string{"gcc", "clang"} {
		for _, opt := range []string{"-O2", "-Os"} {
			for _, pic := range [][]string{{"-fPIE", "-pie"}, {"-fno-pie", "-no-pie"}} {
				flags := append([]string{opt, "-Wall"}, pic...)
				name := fmt.Sprintf("switches-%s%s%s", cc, opt, pic[0])
				out = append(out, fixture.Program{Compiler: cc, Flags: flags, Dir: "jumptab", Files: []string{"switches.c"}, Name: name})
			}
		}
	}
	// With CET: the jumps are notrack.
	out = append(out, fixture.Program{Compiler: "gcc", Flags: []string{"-O2", "-Wall", "-fcf-protection=full", "-fPIE", "-pie"}, Dir: "jumptab", Files: []string{"switches.c"}, Name: "switches-gcc-cet"})
	return out
}

// TestJumpTablesAgainstCPU recovers the jump tables of every switch of the
// fixture, built by gcc and clang at -O2 and -Os, PIE and not, and checks
// them against the CPU: each indirect jump of those functions gets a
// breakpoint; at each hit the jump is single-stepped under ptrace and the
// address the CPU went to recorded. The program passes every value of each
// switch's range (the gaps too), so the targets the CPU took must be
// exactly the recovered table's targets: none missed, none extra.
func TestJumpTablesAgainstCPU(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skipf("the fixture is built for the host and the recovery is x86-64's; this is %s", runtime.GOARCH)
	}
	testenv.NeedPtrace(t)
	for _, p := range switchBuilds() {
		t.Run(p.Name, func(t *testing.T) {
			path := fixture.Build(t, p)
			jumps := recoverSwitches(t, path)
			got := cpuJumpTargets(t, path, jumps)
			for _, j := range slices.Sorted(mapKeys(jumps)) {
				jt := jumps[j]
				if !slices.Equal(got[j], jt.Targets) {
					t.Errorf("jmp at %#x (%s): the CPU went to %x, the table at %#x (%d entries) has %x", j, jt.fn, got[j], jt.Table, jt.Entries, jt.Targets)
				}
			}
			checkDetours(t, path, got)
			checkPointerJumps(t, path)
		})
	}
}

// checkPointerJumps checks the jumps through pointers of the fixture:
// viahook's tail call, which the CPU takes out of the function, lets its
// entry take a detour; computed's jumps, which the CPU takes to its own
// labels (the file takes their addresses), keep it refused.
func checkPointerJumps(t *testing.T, path string) {
	f, funcs := openFuncs(t, path)
	pf := plan.NewFile(f, nil)
	var jumps []uint64
	inside := map[uint64][2]uint64{}
	for _, name := range []string{"viahook", "computed"} {
		i := slices.IndexFunc(funcs, func(fn elfscan.Func) bool { return fn.Name == name })
		if i < 0 {
			t.Fatalf("no function %s", name)
		}
		fn := pf.Function(&funcs[i])
		pointers := true
		for _, u := range fn.UnresolvedJumps() {
			if !u.Pointer {
				// gcc -Os merges computed's jumps into one after a
				// join: the load is before it, and the jump stays
				// unresolved (refused) for that reason.
				pointers = false
				if name == "viahook" {
					t.Errorf("%s: the jmp at %#x is not seen as a jump through a pointer: %s", name, u.Addr, u.Why)
				}
			}
			jumps = append(jumps, u.Addr)
			inside[u.Addr] = [2]uint64{funcs[i].Addr, funcs[i].End}
		}
		d, err := pf.Decide(plan.Probeopt, &elfscan.Site{Addr: funcs[i].Addr, Func: &funcs[i]}, &plan.Options{Rules: true})
		if err != nil {
			t.Fatal(err)
		}
		last := ""
		for _, r := range d.Rules {
			if r.Name == "trampoline" {
				last = r.Detail
			}
		}
		switch {
		case name == "viahook" && (d.Strategy != plan.TrampolineDetour || !strings.Contains(last, "through pointers loaded from memory")):
			t.Errorf("viahook's entry: %s (%s), want a detour whose rule names its jump through a pointer", d.Strategy, last)
		case name == "computed" && (d.Strategy == plan.TrampolineDetour || pointers && !strings.Contains(last, "the file takes the address")):
			t.Errorf("computed's entry: %s (%s), want no detour, for the addresses of its labels", d.Strategy, last)
		}
	}
	got, _ := stepJumps(t, jumpRun{argv: []string{path}, module: path, jumps: jumps})
	for _, j := range jumps {
		r := inside[j]
		in := 0
		for _, to := range got[j] {
			if to > r[0] && to < r[1] {
				in++
			}
		}
		if len(got[j]) == 0 {
			t.Errorf("the jmp at %#x did not run", j)
		}
		// The oracle for the plan's two answers: computed's jumps do go
		// inside it, viahook's never.
		if wantIn := r[0] != inside[jumps[0]][0]; (in > 0) != wantIn {
			t.Errorf("the jmp at %#x went to %x: inside its function %d times, want inside: %v", j, got[j], in, wantIn)
		}
	}
}

// checkDetours decides every instruction of the switch functions and
// checks that no detour the plan allows replaces bytes that a jump the CPU
// took lands strictly inside; and that the functions do get detours.
func checkDetours(t *testing.T, path string, cpu map[uint64][]uint64) {
	f, funcs := openFuncs(t, path)
	var landed []uint64
	for _, ts := range cpu {
		landed = append(landed, ts...)
	}
	slices.Sort(landed)
	pf := plan.NewFile(f, nil)
	detours, refused := 0, 0
	for i := range funcs {
		if !slices.Contains(switchFuncs, funcs[i].Name) {
			continue
		}
		fn := pf.Function(&funcs[i])
		for a := range fn.Starts() {
			d, err := pf.Decide(plan.Probeopt, &elfscan.Site{Addr: a, Func: &funcs[i]}, &plan.Options{Rules: true})
			if err != nil {
				t.Fatal(err)
			}
			if d.Strategy != plan.TrampolineDetour {
				for _, r := range d.Rules {
					if r.Name == "trampoline" && r.Outcome == plan.Fail && strings.Contains(r.Detail, "jump table") {
						refused++
					}
				}
				continue
			}
			detours++
			ts, err := trampoline.AnalyzeX86(a, fn.Code[a-fn.Addr:], nil)
			if err != nil {
				t.Fatalf("%#x: a detour the trampoline refuses: %v", a, err)
			}
			j, _ := slices.BinarySearch(landed, a+1)
			if j < len(landed) && landed[j] < ts.Resume() {
				t.Errorf("%s: a detour at %#x replaces %#x-%#x, and the CPU jumped to %#x through a jump table", funcs[i].Name, a, ts.PatchAddr, ts.Resume(), landed[j])
			}
			if last := d.Rules[len(d.Rules)-1]; fn.IndirectJumps > 0 && !strings.Contains(last.Detail, "recovered from the file") {
				t.Errorf("%s: detour rule %q does not say its tables were recovered", funcs[i].Name, last.Detail)
			}
		}
	}
	t.Logf("%d detours, %d refused by a table target inside", detours, refused)
	if detours == 0 || refused == 0 {
		t.Errorf("%d detours and %d refusals for a table target: the check saw nothing to check", detours, refused)
	}
}

type namedTable struct {
	plan.JumpTable
	fn string
}

// recoverSwitches returns the recovered tables of the switch functions by
// the address of their jumps (link-time addresses); every indirect jump of
// those functions must be recovered.
func recoverSwitches(t *testing.T, path string) map[uint64]namedTable {
	f, funcs := openFuncs(t, path)
	pf := plan.NewFile(f, nil)
	out := map[uint64]namedTable{}
	for _, name := range switchFuncs {
		i := slices.IndexFunc(funcs, func(fn elfscan.Func) bool { return fn.Name == name })
		if i < 0 {
			t.Fatalf("no function %s", name)
		}
		fn := pf.Function(&funcs[i])
		if fn.IndirectJumps == 0 {
			t.Errorf("%s: no indirect jump: the compiler made no jump table", name)
		}
		for _, u := range fn.UnresolvedJumps() {
			t.Errorf("%s: the jmp at %#x is not recovered: %s", name, u.Addr, u.Why)
		}
		for _, jt := range fn.JumpTables() {
			out[jt.Jump] = namedTable{jt, name}
		}
	}
	return out
}

// cpuJumpTargets runs the program under ptrace with a breakpoint at each
// jump and returns, for each, the sorted distinct addresses the CPU went
// to when it stepped the jump (link-time addresses). It checks that the
// program printed what it prints untraced.
func cpuJumpTargets(t *testing.T, path string, jumps map[uint64]namedTable) map[uint64][]uint64 {
	var at []uint64
	for j := range jumps {
		at = append(at, j)
	}
	got, stdout := stepJumps(t, jumpRun{argv: []string{path}, module: path, jumps: at})
	want, err := exec.Command(path).Output()
	if err != nil || string(stdout) != string(want) {
		t.Errorf("output %q, untraced %q (%v)", stdout, want, err)
	}
	return got
}

// jumpRun is a program to run with breakpoints at jumps of one of its
// modules.
type jumpRun struct {
	argv, env []string
	// module is the path of the executable or of a library the dynamic
	// linker maps before the program's entry; jumps are link-time
	// addresses of its indirect jumps.
	module string
	jumps  []uint64
	// maxHits is how many hits of a jump are stepped before its
	// breakpoint goes (0: all).
	maxHits int
}

// stepJumps runs r under ptrace: at the program's entry (the libraries are
// mapped then) each jump of r.module gets a breakpoint; at each hit the
// jump is single-stepped and the address the CPU went to recorded. It
// returns the distinct targets of each jump hit, in link-time addresses,
// sorted, and what the program wrote to its standard output.
func stepJumps(t *testing.T, r jumpRun) (map[uint64][]uint64, []byte) {
	out, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	errf, err := os.CreateTemp(t.TempDir(), "err")
	if err != nil {
		t.Fatal(err)
	}
	defer errf.Close()
	p, err := proc.Spawn(r.argv, &proc.SpawnOptions{Stdout: out, Stderr: errf, Env: r.env, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	exe, err := exec.LookPath(r.argv[0])
	if err != nil {
		t.Fatal(err)
	}
	ef := openELF(t, exe)
	entry := ef.Entry
	if ef.Type == elf.ET_DYN {
		entry += moduleBase(t, p, exe)
	}
	mf := openELF(t, r.module)
	pie := mf.Type == elf.ET_DYN

	var mu sync.Mutex
	known := map[uint64]byte{} // every breakpoint ever written, with the byte it covered
	set := func(w *proc.World, a uint64) error {
		b := []byte{0}
		if err := w.ReadMemory(a, b); err != nil {
			return err
		}
		mu.Lock()
		known[a] = b[0]
		mu.Unlock()
		return w.WriteMemory(a, []byte{0xcc})
	}
	if _, err := p.Stopped(func(w *proc.World) error { return set(w, entry) }); err != nil {
		t.Fatal(err)
	}
	type hit struct {
		tid  int
		addr uint64
	}
	hits := make(chan hit, 1<<16)
	if _, err := p.SetTrapHandler(func(ctx *proc.TrapContext) proc.TrapAction {
		mu.Lock()
		_, ok := known[ctx.Addr]
		mu.Unlock()
		if !ok {
			return proc.TrapPass
		}
		hits <- hit{ctx.Tid, ctx.Addr}
		return proc.TrapHold
	}); err != nil {
		t.Fatal(err)
	}
	if err := p.Resume(); err != nil {
		t.Fatal(err)
	}
	base := uint64(0)
	seen := map[uint64]map[uint64]bool{}
	count := map[uint64]int{}
	deadline := time.After(5 * time.Minute)
	for done := false; !done; {
		select {
		case h := <-hits:
			var to uint64
			stepped := false
			if _, err := p.Stopped(func(w *proc.World) error {
				mu.Lock()
				orig := known[h.addr]
				mu.Unlock()
				if err := w.WriteMemory(h.addr, []byte{orig}); err != nil {
					return err
				}
				regs, err := w.Regs(h.tid)
				if err != nil {
					return err
				}
				regs.SetPC(h.addr)
				if err := w.SetRegs(h.tid, &regs); err != nil {
					return err
				}
				if h.addr == entry {
					// The libraries are mapped: the jumps get their
					// breakpoints.
					if pie {
						maps, err := w.Maps()
						if err != nil {
							return err
						}
						if base = mapBase(maps, r.module); base == 0 {
							return fmt.Errorf("%s is not mapped at the entry", r.module)
						}
					}
					for _, j := range r.jumps {
						if err := set(w, base+j); err != nil {
							return err
						}
					}
					return nil
				}
				if err := w.Step(h.tid, 0); err != nil {
					return err
				}
				if regs, err = w.Regs(h.tid); err != nil {
					return err
				}
				to, stepped = regs.PC(), true

				if count[h.addr]++; r.maxHits > 0 && count[h.addr] >= r.maxHits {
					return nil // the breakpoint goes
				}
				return w.WriteMemory(h.addr, []byte{0xcc})
			}); err != nil {
				if errors.Is(err, proc.ErrNoThread) || errors.Is(err, proc.ErrExited) {
					p.Release(func(ctx *proc.TrapContext) bool { return ctx.Tid == h.tid })
					continue // the thread went with another's exit_group
				}
				t.Fatalf("step the jmp at %#x: %v", h.addr, err)
			}
			if stepped {
				j := h.addr - base
				if seen[j] == nil {
					seen[j] = map[uint64]bool{}
				}
				seen[j][to-base] = true
			}
			// Only this thread: another held at a breakpoint waits for
			// its turn in hits.
			if err := p.Release(func(ctx *proc.TrapContext) bool { return ctx.Tid == h.tid }); err != nil {
				t.Fatal(err)
			}
		case <-p.Exited():
			done = true
		case <-deadline:
			t.Fatal("the program did not finish in 5 minutes")
		}
	}
	if st, err := p.Wait(); err != nil || st.Code != 0 {
		b, _ := os.ReadFile(errf.Name())
		t.Fatalf("exit %+v %v; stderr:\n%s", st, err, b)
	}
	res := map[uint64][]uint64{}
	for j, ts := range seen {
		res[j] = slices.Sorted(mapKeys(ts))
	}
	b, err := os.ReadFile(out.Name())
	if err != nil {
		t.Fatal(err)
	}
	return res, b
}

// moduleBase returns the load address of the file at path in p.
func moduleBase(t *testing.T, p *proc.Process, path string) uint64 {
	maps, err := p.Maps()
	if err != nil {
		t.Fatal(err)
	}
	b := mapBase(maps, path)
	if b == 0 {
		t.Fatalf("%s is not mapped", path)
	}
	return b
}

// mapBase returns the start of the mapping of path's first byte, 0 when
// none maps it.
func mapBase(maps []proc.Mapping, path string) uint64 {
	for _, m := range maps {
		if m.Offset == 0 && m.Path != "" && elfscan.SamePath(m.Path, path) {
			return m.Start
		}
	}
	return 0
}

// openFuncs opens the ELF file at path for the test (closed when it ends)
// and returns it with its functions.
func openFuncs(t *testing.T, path string) (*elfscan.File, []elfscan.Func) {
	t.Helper()
	f, err := elfscan.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	funcs, err := f.Funcs()
	if err != nil {
		t.Fatal(err)
	}
	return f, funcs
}

// openELF opens the ELF file at path with debug/elf for the test (closed
// when it ends); unlike fixture.OpenELF it needs no symbol table (the
// programs of the system are stripped).
func openELF(t *testing.T, path string) *elf.File {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TestJumpTablesRealCode checks tables recovered in real libraries against
// the CPU, and the jumps through pointers of functions the plan lets
// detours stand in (their targets must leave the function): up to 2,000
// of each kind in libLLVM (clang
// compiling the switches fixture) and, where Java is installed, of libjvm
// (java -version, with libjvm preloaded so that it is mapped at the
// program's entry) get breakpoints; each hit is stepped (the first 20 of
// each jump) and every address the CPU went to must be one of the table's
// targets.
func TestJumpTablesRealCode(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skipf("the recovery is x86-64's; this is %s", runtime.GOARCH)
	}
	testenv.NeedPtrace(t)
	t.Run("clang", func(t *testing.T) {
		clang, err := filepath.EvalSymlinks(testenv.MustHaveTool(t, "clang"))
		if err != nil {
			t.Fatal(err)
		}
		lib := neededLibrary(t, clang, "libLLVM-")
		src := filepath.Join(fixture.Dir(t), "jumptab", "switches.c")
		checkRealJumps(t, jumpRun{argv: []string{clang, "-O2", "-c", "-o", filepath.Join(t.TempDir(), "s.o"), src}, module: lib, maxHits: 20})
	})
	t.Run("java", func(t *testing.T) {
		java, err := exec.LookPath("java")
		if err != nil {
			t.Skip("no java (not a tool the CI installs)")
		}
		java, _ = filepath.EvalSymlinks(java)
		lib := filepath.Join(filepath.Dir(filepath.Dir(java)), "lib", "server", "libjvm.so")
		if _, err := os.Stat(lib); err != nil {
			t.Skipf("no libjvm.so beside %s", java)
		}
		checkRealJumps(t, jumpRun{argv: []string{java, "-version"}, env: append(os.Environ(), "LD_PRELOAD="+lib), module: lib, maxHits: 20})
	})
}

// checkRealJumps samples the recovered jumps of r.module, runs r with
// breakpoints at them and compares.
func checkRealJumps(t *testing.T, r jumpRun) {
	f, funcs := openFuncs(t, r.module)
	pf := plan.NewFile(f, nil)
	tables := map[uint64]plan.JumpTable{}
	var all, ptrs []uint64
	ptrFunc := map[uint64][2]uint64{}
	for i := range funcs {
		fn := pf.Analyze(&funcs[i])
		if fn == nil {
			continue
		}
		un := fn.UnresolvedJumps()
		if len(un) > 0 && !slices.ContainsFunc(un, func(u plan.IndirectJump) bool { return !u.Pointer }) {
			taken, err := pf.Branches().TakenIn(funcs[i].Addr+1, funcs[i].End)
			if err != nil {
				t.Fatal(err)
			}
			if len(taken) == 0 {
				// Jumps through pointers that the plan lets detours
				// stand beside: the CPU must take them out of the
				// function (or to its entry).
				for _, u := range un {
					ptrs = append(ptrs, u.Addr)
					ptrFunc[u.Addr] = [2]uint64{funcs[i].Addr, funcs[i].End}
				}
			}
		}
		for _, jt := range fn.JumpTables() {
			if _, dup := tables[jt.Jump]; !dup {
				tables[jt.Jump] = jt
				all = append(all, jt.Jump)
			}
		}
	}
	slices.Sort(all)
	step := max(1, len(all)/2000)
	for i := 0; i < len(all); i += step {
		r.jumps = append(r.jumps, all[i])
	}
	nTables := len(r.jumps)
	slices.Sort(ptrs)
	ptrs = slices.Compact(ptrs)
	for i := 0; i < len(ptrs); i += max(1, len(ptrs)/2000) {
		r.jumps = append(r.jumps, ptrs[i])
	}
	got, _ := stepJumps(t, r)
	ptrHit, ptrTargets := 0, 0
	for j, ts := range got {
		fr, ok := ptrFunc[j]
		if !ok {
			continue
		}
		delete(got, j)
		ptrHit++
		ptrTargets += len(ts)
		for _, to := range ts {
			if to > fr[0] && to < fr[1] {
				t.Errorf("the jmp through a pointer at %#x went to %#x, inside its function %#x-%#x", j, to, fr[0], fr[1])
			}
		}
	}
	t.Logf("%s: %d jumps through pointers beside which detours may stand, %d with breakpoints, %d hit, %d distinct targets", filepath.Base(r.module), len(ptrs), len(r.jumps)-nTables, ptrHit, ptrTargets)
	targets := 0
	for j, ts := range got {
		targets += len(ts)
		for _, to := range ts {
			if _, found := slices.BinarySearch(tables[j].Targets, to); !found {
				t.Errorf("jmp at %#x: the CPU went to %#x, not a target of the table at %#x (%d entries)", j, to, tables[j].Table, tables[j].Entries)
			}
		}
	}
	t.Logf("%s: %d tables recovered, %d with breakpoints, %d hit, %d distinct targets taken", filepath.Base(r.module), len(all), nTables, len(got), targets)
	if len(got) < 10 {
		t.Errorf("only %d of %d sampled jumps ran: too few to check", len(got), len(r.jumps))
	}
}

// neededLibrary returns the path of the library whose name starts with
// prefix among exe's DT_NEEDED, found in the multiarch directories.
func neededLibrary(t *testing.T, exe, prefix string) string {
	ef := openELF(t, exe)
	libs, err := ef.ImportedLibraries()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range libs {
		if !strings.HasPrefix(l, prefix) {
			continue
		}
		for _, dir := range []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/lib64"} {
			if p := filepath.Join(dir, l); fileExists(p) {
				return p
			}
		}
	}
	t.Fatalf("%s needs no %s* library found on this system", exe, prefix)
	return ""
}
